"""``contextlab report DIR``."""

from __future__ import annotations

import argparse


def cmd_report(argv: list[str]) -> int:
    """Write one self-contained HTML report (plots, tables, configs, commands) for a run or a sweep."""
    from contextlab.report.html import build_report

    p = argparse.ArgumentParser(
        prog="contextlab report",
        description=(
            "Build DIR/report.html from the result files in DIR: training runs (metrics, evaluations), "
            "token stores, sweep results and the compute-optimal analysis. Plots are embedded; the page "
            "is one file."
        ),
    )
    p.add_argument("dir", help="a run directory, a sweep directory, or a folder holding runs and stores")
    p.add_argument("--out", help="where to write the page (default: DIR/report.html)")
    p.add_argument("--title", help="page title")
    args = p.parse_args(argv)
    out = build_report(args.dir, args.out, args.title)
    print(f"report: {out}")
    return 0
