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
from contextlab.outputs import refuse_non_folder


def cmd_compare(argv: list[str]) -> int:
    """Paired differences A - B of two runs' evaluations, with 95% intervals (same windows and samples)."""
    from contextlab.compare.paired import COMPARERS, Options, compare_runs

    p = argparse.ArgumentParser(
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
    p.add_argument("--out", help="output folder (default: RUN_A/compare/<RUN_B's name>)")
    add_dataclass_args(p.add_argument_group("statistics"), Options)
    args = p.parse_args(argv)
    for flag, path in (("RUN_A", args.run_a), ("RUN_B", args.run_b)):
        if not Path(path).exists():
            raise UserError(
                f"{flag} {path} not found; give a run directory or a folder of evaluation results"
            )
    if args.out:
        refuse_non_folder(args.out)  # a file there is the user's: never replaced by a folder
    evals = [n.strip() for e in args.eval or [] for n in e.split(",") if n.strip()]
    out, docs = compare_runs(args.run_a, args.run_b, evals, dataclass_from_args(Options, args), args.out)
    print(f"A = {docs[0]['a']['label']}, B = {docs[0]['b']['label']} (differences are A - B)")
    for doc in docs:
        for line in doc["lines"]:
            print(f"  {line}")
        for note in doc["notes"]:
            print(f"    note: {note}")
    names = [d["eval"] for d in docs]
    shown = names[0] if len(names) == 1 else "{" + ",".join(names) + "}"
    print(f"  wrote {out}/compare_{shown}.json and .png")
    return 0
