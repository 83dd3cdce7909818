"""``contextlab compare RUN_A RUN_B [--eval NAME ...] [--out DIR]``: paired differences of two runs.

A thin command over ``contextlab.compare.paired.compare_runs``: it reads the evaluation results
both runs already have, prints one line per result (A - B with its 95% interval) and writes
OUT/compare_NAME.json and .png. Nothing is evaluated here, so it takes seconds; the trade-off
is that both runs must have been evaluated with the same data and options first.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from contextlab.config import add_dataclass_args, dataclass_from_args
from contextlab.errors import UserError
from contextlab.outputs import refuse_overlap, refuse_results_out


def cmd_compare(argv: list[str]) -> int:
    """Paired differences A - B of two runs' evaluations, with 95% intervals (same windows and samples)."""
    from contextlab.compare.paired import COMPARERS, Options, compare_runs

    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab compare",
        description=(
            "Compare two models on the same windows and samples: reads RUN/eval/NAME.json and the arrays "
            "beside it for both runs (run `contextlab eval NAME` on each first, with the same --data and "
            "options) and writes OUT/compare_NAME.json and OUT/compare_NAME.png with A - B and its 95% "
            "interval: per position bucket (contextwise), per document (ppl), per cell (niah, kv, "
            "passkey, vartrack), per set of examples (icl). Refuses when the results were not computed "
            "on the same data and options."
        ),
    )
    p.add_argument("run_a", metavar="RUN_A", help="a run directory (its eval/ folder) or a folder of results")
    p.add_argument("run_b", metavar="RUN_B", help="the run to subtract (the same kinds of path)")
    p.add_argument(
        "--eval",
        action="append",
        metavar="NAME",
        help="an evaluation to compare, repeat or separate with commas (default: every one both runs have): "
        + ", ".join(COMPARERS),
    )
    p.add_argument(
        "--and",
        dest="more",
        nargs=2,
        action="append",
        metavar=("RUN_A2", "RUN_B2"),
        help="another pair of the same two setups (another train.seed, data.split_seed or pack "
        "--split-seed), repeatable: each pair is compared as RUN_A RUN_B are, into OUT/pair_N, and every "
        "headline difference is pooled over the pairs (their mean, a t interval over pairs: it holds "
        "the seed and split noise one pair's interval leaves out) into OUT/pooled.json (default: one pair)",
    )
    p.add_argument(
        "--out",
        help="output folder (default: RUN_A/compare/<RUN_B's name>; with --and, "
        "RUN_A/compare/<RUN_B's name>_pooled)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace comparisons in OUT of other results or options (without it that is refused; the "
        "same comparison again replaces its files, as a reproduction)",
    )
    add_dataclass_args(p.add_argument_group("statistics"), Options)
    args = p.parse_args(argv)
    pairs = [(args.run_a, args.run_b)] + [tuple(p) for p in args.more or []]
    for i, pair in enumerate(pairs):
        for flag, path in zip((f"RUN_A{i + 1 if i else ''}", f"RUN_B{i + 1 if i else ''}"), pair):
            if not Path(path).exists():
                raise UserError(
                    f"{flag} {path} not found; give a run directory or a folder of evaluation results"
                )
    from contextlab.compare.pairing import eval_folder
    from contextlab.compare.replicates import check_pairs

    if args.out:
        refuse_results_out(args.out)  # a file there is the user's; a store is no results folder
    check_pairs(pairs)
    if args.out:
        refuse_overlap(args.out, [eval_folder(path) for pair in pairs for path in pair])
    evals = [n.strip() for e in args.eval or [] for n in e.split(",") if n.strip()]
    options = dataclass_from_args(Options, args)
    if len(pairs) > 1:
        return _pooled(pairs, evals, options, args.out, args.overwrite)
    out, docs = compare_runs(args.run_a, args.run_b, evals, options, args.out, args.overwrite)
    print(f"A = {docs[0]['a']['label']}, B = {docs[0]['b']['label']} (differences are A - B)")
    common = [n for n in docs[0]["notes"] if all(n in d["notes"] for d in docs)]  # said once, at the end
    for doc in docs:
        for line in doc["lines"]:
            print(f"  {line}")
        for line in _bucket_lines(doc):
            print(f"    {line}")
        for note in doc["notes"]:
            if note not in common:
                print(f"    note: {note}")
    for note in [*common, docs[0]["scope"]]:
        print(f"  note: {note}")
    names = [d["eval"] for d in docs]
    shown = names[0] if len(names) == 1 else "{" + ",".join(names) + "}"
    print(f"  wrote {out}/compare_{shown}.json and .png")
    return 0


def _bucket_lines(doc: dict) -> list[str]:
    """contextwise's paired difference per position bucket, a line each (the JSON and the plot hold them
    too; a reader at the terminal saw only the headline)."""
    from contextlab.eval.paired_stats import interval_text

    if doc.get("eval") != "contextwise":
        return []
    rows = (doc.get("results") or {}).get("buckets") or []
    spans = [f"{b['from']}-{b['to']}" for b in rows]
    width = max((len(x) for x in spans), default=0)
    return [
        f"positions {span:>{width}}: A - B = {interval_text(b)} (A {b['a']:.3f}, B {b['b']:.3f})"
        for span, b in zip(spans, rows)
    ]


def _pooled(
    pairs: list[tuple[str, str]], evals: list[str], options, out: str | None, overwrite: bool = False
) -> int:
    """Compare every pair into OUT/pair_N, then pool their headline differences into OUT/pooled.json."""
    from contextlab.compare.paired import comparisons, save
    from contextlab.compare.pairing import eval_folder, labels
    from contextlab.compare.replicates import check_pooled_rerun, drop_stale_pairs, pool, write_pooled

    la, lb = labels(eval_folder(pairs[0][0]), eval_folder(pairs[0][1]))
    folder = Path(out) if out else Path(pairs[0][0]) / "compare" / (lb.replace("/", "_") + "_pooled")
    check_pooled_rerun(folder, pairs, overwrite)
    # every pair compared and the pooling checked before anything is written: a refused pooling left the
    # pairs before it written, which the next, right, command then refused as other results
    made = [
        comparisons(a, b, evals, options, folder / f"pair_{i + 1}", overwrite)
        for i, (a, b) in enumerate(pairs)
    ]
    docs = [d for _, d in made]
    results = pool(docs)
    for pair_dir, pair_docs in made:
        save(pair_dir, pair_docs)
    drop_stale_pairs(folder, len(pairs))
    pooled = write_pooled(folder, pairs, results)
    print(f"A = {la} and the other A runs, B = {lb} and the other B runs (differences are A - B)")
    for i, (a, b) in enumerate(pairs):
        print(f"  pair {i + 1}: {a} - {b}")
    for line in pooled["lines"]:
        print(f"  {line}")
    for note in pooled["notes"]:
        print(f"    note: {note}")
    print(f"  wrote {folder}/pooled.json and each pair's comparison in {folder}/pair_N")
    return 0
