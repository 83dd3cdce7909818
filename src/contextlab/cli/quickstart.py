"""``contextlab quickstart``: the main job on the embedded corpus (thin wrapper of contextlab.quickstart).

Runs on a fresh machine with nothing but the package: ingest the embedded books (a BPE
trained on them) and the Python standard library, pack the code with EP and SPLICE, train
a tiny GPT and a tiny ContextLM, evaluate contextwise loss and needle in a haystack, and
write one HTML report. Every setting is in the packaged recipe (``--print-recipe``); every
step resumes and a finished step is skipped, so running it again is cheap. ``--corpus DIR``
puts a folder of the user's in place of the standard library (and of the books' BPE).
"""

from __future__ import annotations

import argparse
import time


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab quickstart",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Ingest the embedded books and the Python standard library, pack the code with example "
        "packing and SPLICE, train a tiny GPT and a tiny ContextLM, measure contextwise loss on held-out "
        "code and needle-in-a-haystack accuracy, and write OUT/report.html. Measured: 3 min 19 s on 2 idle "
        "CPU cores (2026-12-01), longer when other jobs share them (docs/quickstart.md). Run it again to "
        "resume after an interruption; finished steps are skipped. --corpus DIR does the same on a folder "
        "of your own.",
    )
    p.add_argument(
        "--out", default="contextlab-quickstart", help="directory for every artifact of the quickstart"
    )
    p.add_argument(
        "--corpus",
        metavar="DIR",
        help="your own corpus instead of the Python standard library: a folder of text or code files, "
        "its files matching corpus.heldout held out for the evaluations and the rest trained on, with a "
        "BPE trained on them (recipe: corpus.source; choose the files with --set "
        "'corpus.code_include=[\"**/*.txt\"]' --set 'corpus.heldout=[\"test/**\"]')",
    )
    p.add_argument(
        "--recipe",
        help="a quickstart recipe TOML (default: the one shipped in the package; see --print-recipe)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe key, e.g. --set base.model.n_layer=2 or --set runs.gpt.packing=ep "
        "(repeatable)",
    )
    p.add_argument(
        "--steps", type=int, help="optimizer steps of every run (overrides the recipe's training budget)"
    )
    p.add_argument(
        "--vocab",
        type=int,
        help="size of the BPE vocabulary trained on the books, or on --corpus (recipe: corpus.vocab)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch CPU threads for training and evaluation; 0 = torch's default (all cores)",
    )
    p.add_argument("--overwrite", action="store_true", help="redo every step from scratch")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--print-recipe", action="store_true", help="print the packaged recipe and exit")
    return p


def _overrides(args: argparse.Namespace) -> list[str]:
    """The recipe overrides: every --set, then what the shortcut flags stand for."""
    from contextlab.cli.runtime import check_compute
    from contextlab.errors import UserError

    sets = list(args.set)
    if args.steps is not None:
        if args.steps < 1:
            raise UserError(f"--steps must be >= 1, got {args.steps}")
        sets += [
            f"base.train.max_steps={args.steps}",
            "base.train.max_tokens=0",
            "base.train.max_flops=0",
            "base.train.max_minutes=0",
        ]
    if args.vocab is not None:
        sets.append(f"corpus.vocab={args.vocab}")
    check_compute(args)  # a bad --threads is one line; a good one is set here and for the runs
    if args.threads:
        sets.append(f"base.train.threads={args.threads}")
    return sets


def cmd_quickstart(argv: list[str]) -> int:
    """Run the whole pipeline on the embedded corpus: ingest, pack, train GPT/ContextLM, evaluate, report."""
    from contextlab.quickstart import format_headline, load_recipe, packaged_recipe, run_quickstart

    args = _parser().parse_args(argv)
    if args.print_recipe:
        print(packaged_recipe(), end="")
        return 0
    cfg = load_recipe(args.recipe, _overrides(args))
    if args.corpus is not None:
        cfg.corpus.source = args.corpus
    if args.no_progress:
        cfg.base.setdefault("train", {})["progress"] = False
    t0 = time.perf_counter()
    page, summary = run_quickstart(cfg, args.out, overwrite=args.overwrite, progress=not args.no_progress)
    minutes, secs = divmod(time.perf_counter() - t0, 60)
    print(f"\nquickstart done in {int(minutes)}m{secs:02.0f}s. Report: {page.resolve()}")
    print(format_headline(summary))
    for note in summary["notes"]:
        print(f"  {note}")
    return 0
