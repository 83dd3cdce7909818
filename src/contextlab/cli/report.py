"""``contextlab report DIR [--out FILE] [--title TEXT]``: a thin command over ``report.html.build_report``.

The page replaces only an earlier page of ``contextlab report`` (``report.html.check_out``): any
other file at --out, above all a file of DIR the page is built from, is refused before anything is read.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_report(argv: list[str]) -> int:
    """Write one self-contained HTML page (plots, tables, commands) for any folder of contextlab results."""
    from contextlab.report.html import build_report

    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab report",
        description=(
            "Build DIR/report.html from the result files in DIR (nothing is run or loaded; the page is "
            "one file with its plots embedded). DIR may be: a training run (metrics, loss curve, its "
            "evaluations, config); a Hugging Face or exported model folder, or a checkpoint, with "
            "evaluations in its eval/ folder; a folder of evaluation results (NAME.json and NAME.png of "
            "`contextlab eval --out DIR` or `contextlab analyze`); a folder holding several of these "
            "(every model's evaluations, a table of the models' headline numbers side by side, and the "
            "`contextlab compare` folders under it); a profile folder of `contextlab profile` "
            "(profile.json: headline table, steps, each model's evaluations, comparisons); a sweep "
            "(results.csv, the compute-optimal analysis) or a quickstart folder; token and packed stores "
            "found under DIR are shown too. Each evaluation shows its headline numbers, its plot, its "
            "options, model and data records, and the command that writes it again."
        ),
    )
    p.add_argument(
        "dir",
        metavar="DIR",
        help="a run, a model folder, a folder of evaluation results, a profile folder, a sweep, or a "
        "folder holding any of these",
    )
    p.add_argument(
        "--out",
        help="where to write the page (default: DIR/report.html); an existing file there is replaced only "
        "when it is a page of contextlab report",
    )
    p.add_argument("--title", help="page title (default: the folder's name, or the profiled models)")
    args = p.parse_args(argv)
    from contextlab.outputs import refuse_in_checkpoints

    # training would delete the page with its checkpoint: the default DIR/report.html too
    refuse_in_checkpoints(args.out or str(Path(args.dir) / "report.html"), file=True)
    out = build_report(args.dir, args.out, args.title)
    print(f"report: {out}")
    return 0
