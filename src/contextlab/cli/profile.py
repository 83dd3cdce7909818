"""``contextlab profile --model M --data D [--compare M2] [--budget quick|standard|full]``."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from contextlab.cli.runtime import DEVICE_HELP
from contextlab.errors import UserError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab profile",
        description=(
            "How a model uses its context, in one command: contextwise loss (best-context loss and the "
            "context gain: the same targets' loss with one visible token minus with all of them), the "
            "visible-context curve (bayes-fit), needle and passkey heatmaps, key-value retrieval (random "
            "UUID pairs in the lost-in-the-middle format, as many as fit) and attention by distance. "
            "Every length follows the model's context (with --compare, the "
            "smaller of the two; --context measures at a shorter one): no prompt runs past it. Prompt "
            "tasks are scored by likelihood. Writes OUT/models/<model>/<eval>.json (ordinary result "
            "files), OUT/compare/ (paired differences with 95% intervals), OUT/profile.json (settings, "
            "steps, headline table) and OUT/report.html. Rerun the same command to resume a killed "
            "profile: finished steps are kept."
        ),
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="PATH",
        help="a contextlab run or checkpoint, or a local Hugging Face model folder",
    )
    p.add_argument(
        "--data",
        metavar="STORE_OR_TEXT",
        help="required: held-out text: a token store made with the model's tokenizer, or a text file or "
        "folder of text files (ingested with the model's tokenizer into OUT/data, less the corpus's own "
        "notes such as SOURCE.txt and files of records such as JSONL; also the needle's haystack); with "
        "--split run, default: the run's own store",
    )
    p.add_argument(
        "--split",
        default="all",
        choices=["all", "run"],
        help="all: the losses read every document of --data; run: only what the run held out for "
        "validation (a contextlab run's val_fraction of documents, document tails or val_store, "
        "recomputed from its config), on its own store: a run's profile without a second store "
        "(default: all)",
    )
    p.add_argument(
        "--doc-start",
        metavar="REGEX",
        help="for text --data: cut its files into documents before every line matching REGEX, as data "
        "ingest --doc-start does (WikiText: ' = [^=].* = $', its 62 article titles); the intervals' unit "
        "is the document, so a file of many articles read as one gives none (default: one document per "
        "file)",
    )
    p.add_argument(
        "--encoding",
        default="strict",
        choices=["strict", "replace", "skip", "latin-1"],  # data.sources.Encoding
        help="for text --data (and the needle's haystack read from it): files that are not UTF-8, as data "
        "ingest --encoding reads them: strict (stop, naming every such file), replace (U+FFFD), skip "
        "(the file), latin-1 (decode it as Latin-1) (default: strict)",
    )
    p.add_argument(
        "--compare",
        metavar="PATH",
        help="a second model, profiled the same way and paired with the first (differences are second minus "
        "first, with 95%% intervals); both must share a tokenizer when --data is a token store "
        "(default: none, one model)",
    )
    p.add_argument(
        "--budget",
        default="quick",
        choices=["quick", "standard", "full"],
        help="sample counts: quick (minutes on a CPU for a small model), standard, full (default: quick)",
    )
    p.add_argument(
        "--out",
        help="output folder (default: ./profile-<model>[-vs-<other>]-<budget> in the current directory; "
        "never inside a model's folder)",
    )
    p.add_argument(
        "--haystack",
        help="the needle's haystack (a text file, or a folder of text files read as data ingest reads "
        "it); default: --data when it is text, else the public-domain books shipped with contextlab",
    )
    p.add_argument(
        "--context",
        type=int,
        default=0,
        help="measure at this many tokens instead of the model's whole context (with --compare, the "
        "smaller of the two): every length follows it. For models whose context is far longer than what "
        "this machine or the data can serve (e.g. 131,072 positions on a CPU); with --compare it may be up "
        "to the longer model's context, reading the shorter one past its own (RoPE extrapolation: a base "
        "model against its context extension). Default: 0, the model's",
    )
    p.add_argument(
        "--dtype", default="fp32", choices=["fp32", "bf16"], help="compute precision (default: fp32)"
    )
    p.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass (default: 8)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: 0 = torch's own)")
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bars (they show on a terminal only)"
    )
    return p


def _check_data(data: str) -> None:
    """--data that is missing, or a packed store's export (Parquet or Megatron files, not text), in one
    line naming what to give."""
    from contextlab.data.export import is_data_export

    if not Path(data).exists():
        raise UserError(f"--data {data} not found: give a token store, or text (a file or a folder of files)")
    if is_data_export(Path(data)):
        raise UserError(
            f"--data {data} is an export of a packed store for other trainers, not text or a token store; "
            "give the token store it was packed from (its export.json names the packed store)"
        )


def cmd_profile(argv: list[str]) -> int:
    """Profile how a model (or two, paired) uses its context: the battery, a headline table, a report."""
    from contextlab.cli.runtime import check_compute, quiet_transformers, refuse_data_as_model
    from contextlab.data.store import output_lock
    from contextlab.outputs import refuse_non_folder, refuse_overlap
    from contextlab.profile.runner import default_out, run_profile

    parser = _parser()
    args = parser.parse_args(argv)
    if not args.data and args.split == "run":
        from contextlab.eval.heldout import first_run

        args.data = first_run([args.model] + ([args.compare] if args.compare else []))
    if not args.data:
        parser.error("the following argument is required: --data (or --split run: a run's own store)")
    check_compute(args)
    refuse_data_as_model([args.model])
    refuse_data_as_model([args.compare], "--compare")
    models = [args.model] + ([args.compare] if args.compare else [])
    quiet_transformers(models, args.no_progress)
    _check_data(args.data)
    out = Path(args.out) if args.out else default_out(models, args.budget)
    refuse_non_folder(out)
    refuse_overlap(out, models)  # never written into a model's folder
    command = "contextlab profile " + shlex.join(argv)
    with output_lock(out, "profile folder"):
        doc = run_profile(
            models,
            args.data,
            out,
            args.budget,
            command=command,
            haystack=args.haystack,
            doc_start=args.doc_start,
            encoding=args.encoding,
            split=args.split,
            context=args.context,
            dtype=args.dtype,
            batch_size=args.batch_size,
            device=args.device,
            show_progress=not args.no_progress,
        )
    _print(doc)
    print(f"wrote {out / 'profile.json'} and {out / doc['report']}")
    return 0


def _print(doc: dict) -> None:
    """The headline table on the console: value [95% interval] per model, and the paired difference."""
    labels = [m["label"] for m in doc["models"]]
    for row in doc["headline"]:
        parts = []
        for label in labels:
            v, iv = row["values"].get(label), row["intervals"].get(label)
            if v is not None:
                parts.append(f"{label} {v:.3f}" + (f" [{iv[0]:.3f}, {iv[1]:.3f}]" if iv else ""))
        if row.get("diff") is not None:
            iv = row.get("ci95")
            parts.append(
                f"{labels[1]} - {labels[0]} {row['diff']:+.3f}"
                + (f" [{iv[0]:+.3f}, {iv[1]:+.3f}]" if iv else "")
            )
        if row.get("note"):
            parts.append(f"({row['note']})")
        chance = f", chance {row['chance']:.3f}" if row.get("chance") is not None else ""
        print(f"  {row['measure']} ({row['unit']}, {row['better']} is better{chance}): " + "; ".join(parts))
