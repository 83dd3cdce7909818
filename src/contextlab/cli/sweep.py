"""``contextlab sweep``: run a grid of training runs and the compute-optimal analysis."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from contextlab.errors import UserError, some


def cmd_sweep(argv: list[str]) -> int:
    """Run a sweep (grid of runs + evaluations), resumable; then the compute-optimal analysis."""
    from contextlab.sweep.runner import run_sweep
    from contextlab.sweep.spec import check_data_paths, load_sweep

    args = _parser().parse_args(argv)
    on_ray = _ray_runs(args)  # options that cannot apply: one line first (a dry run too)
    section, runs = load_sweep(args.sweep, args.set)
    check_data_paths(runs)
    _check_eval_args(runs)
    if args.dry_run:
        return _dry_run(section, runs, args.overwrite, args.only)
    results = run_sweep(
        args.sweep,
        args.set,
        only=args.only,
        overwrite=args.overwrite,
        **({} if on_ray is None else {"ray": on_ray}),
    )
    print(f"results: {results}")
    from contextlab.sweep.objectives import objective_ranking

    for line in objective_ranking(results):
        print(line)
    section, runs = load_sweep(args.sweep, args.set)
    if not args.no_analysis:
        _analysis(results.parent, section)
    return _failed_runs(runs, args.only)


def _check_eval_args(runs) -> None:
    """Every run's evaluation arguments read by the evaluation's own parser, so that a typo in
    [sweep] eval_args is refused before the first run trains (it failed after training)."""
    from contextlab.cli.eval import _parser as eval_parser
    from contextlab.config import dataclass_from_args
    from contextlab.eval import EVALS
    from contextlab.sweep.spec import format_arg

    seen = set()
    for run in runs:
        for name, args in run.evals:
            argv = [name, "--model", str(run.dir), *(format_arg(a, run) for a in args)]
            if (name, tuple(argv[3:])) in seen:
                continue
            seen.add((name, tuple(argv[3:])))
            parser = eval_parser(name)

            def refuse(message: str, name=name) -> None:
                raise UserError(
                    f"[sweep] eval_args of {name}: {message}; `contextlab eval {name} --help` lists its "
                    "options"
                )

            parser.error = refuse
            parsed, unknown = parser.parse_known_args(argv)
            if unknown:
                refuse(f"unrecognized arguments: {' '.join(unknown)}")
            try:  # the values, converted as the evaluation converts them
                dataclass_from_args(EVALS[name].options, parsed)
            except UserError as exc:
                refuse(str(exc))


def _dry_run(section, runs, overwrite: bool, only: str | None = None) -> int:
    """List every run of the grid with its status (stale: trained with another config), the run folders
    the grid leaves out, and what the sweep would do with stale runs; run nothing."""
    from contextlab.steps import StepRunner
    from contextlab.sweep import folder
    from contextlab.sweep.results import status
    from contextlab.sweep.runner import STATE_FILE, select_runs, sweep_step, why_run
    from contextlab.sweep.spec import budget_notes, eval_notes

    grid, runs = runs, select_runs(only, runs)  # the slice this command would run, checked as the sweep does
    out = Path(section.out_dir)
    stale = folder.stale_runs(runs)
    runner = StepRunner(out / STATE_FILE)  # read only: what the sweep would decide
    for run in runs:
        said = "stale" if run.name in stale else status(run)["status"]
        reason = None
        if said == "done" and runner.recorded(run.name) is not None:  # done by a sweep before: adopted
            reason = why_run(section, sweep_step(section, run, runner, record=False), runner, run)
        print(f"{'rerun' if reason else said:<8} {run.name}" + (f"  ({reason})" if reason else ""))
    print(f"{len(runs)} runs in {out}" + (f" (--only {only!r} of the grid's {len(grid)})" if only else ""))
    for line in eval_notes(section, runs) + budget_notes(runs):
        print(f"note: {line}")
    left_out = folder.left_out_line(out, grid)
    if left_out:
        print(left_out)
    if stale:
        first = next(iter(stale))
        then = (
            "--overwrite trains them again in fresh folders"
            if overwrite
            else "the sweep refuses to start: use another sweep.out_dir, or --overwrite to train them again"
        )
        print(f"{len(stale)} stale run(s), trained with another config ({first}: {stale[first]}); {then}")
    return 0


def _failed_runs(runs, only: str | None) -> int:
    """1 and one line naming them when any run of this command's selection failed, else 0."""
    import re

    from contextlab.sweep.results import status

    failed = [
        r.name for r in runs if (not only or re.search(only, r.name)) and status(r)["status"] == "failed"
    ]
    if not failed:
        return 0
    shown = some(failed, 5)
    print(
        f"contextlab sweep: {len(failed)} run(s) failed: {shown}; each run's error is in RUN/sweep.log "
        "and results.csv; fix it and run the same command again (finished runs are skipped)",
        file=sys.stderr,
    )
    return 1


def _sweep_file_help() -> str:
    """The keys of a sweep file's [sweep] table, and what [base] and [grid] hold."""
    import dataclasses

    from contextlab.config import field_help
    from contextlab.sweep.spec import SweepSection

    lines = ["sweep file keys ([sweep] table, or --set sweep.KEY=VALUE):"]
    for f in dataclasses.fields(SweepSection):
        default = getattr(SweepSection(), f.name)
        text = textwrap.fill(
            field_help(SweepSection, f.name), 96, initial_indent=" " * 6, subsequent_indent=" " * 6
        )
        lines.append(f"  sweep.{f.name} = {default!r}\n{text}")
    lines += [
        "  [base]   a run config, as `contextlab train` takes it (`contextlab train --help` lists its keys)",
        '  [grid]   "SECTION.KEY" = [values ...]: one run per combination, named by its values, in '
        "OUT/runs/NAME",
    ]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(  # no abbreviations: --strid was read as --stride
        allow_abbrev=False,
        prog="contextlab sweep",
        epilog=_sweep_file_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "Run every point of a sweep file's [grid] as an independent training run (then its "
            "evaluations), N at a time; finished runs are skipped when started again, failures are "
            "recorded and retried. A sweep folder holds the runs of one configuration: runs trained with "
            "another config are refused (see --overwrite), run folders outside the grid are named and left "
            "out. Writes OUT/results.csv, then compute_optimal.json and U-curve plots.",
            96,
        ),
    )
    p.add_argument("sweep", help="a sweep TOML file with [sweep], [base] and [grid] tables (see recipes/)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the sweep file (repeatable): sweep.parallel=2, a run setting "
        "base.optim.lr=3e-4, a grid axis grid.train.context=[64,128] (default: none)",
    )
    p.add_argument(
        "--only",
        help="run only the runs whose name matches this regular expression (results.csv and the analysis "
        "still cover every finished run of the grid, so slices run one after another add up) "
        "(default: every run)",
    )
    p.add_argument("--dry-run", action="store_true", help="list the runs and their status, run nothing")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="train again, each in a fresh folder, the runs of the grid whose folder holds a run trained "
        "with another config (a changed [base] value); without it such a sweep folder is refused before "
        "any run starts",
    )
    p.add_argument("--no-analysis", action="store_true", help="skip the compute-optimal analysis")
    _add_ray_args(p)
    return p


def _add_ray_args(p: argparse.ArgumentParser) -> None:
    """--ray and the resources of each run on Ray."""
    from contextlab.ray_engine import LOCAL, RAY_CPUS_HELP, RAY_HELP

    p.add_argument(
        "--ray",
        nargs="?",
        const=LOCAL,
        metavar="ADDRESS",
        help=RAY_HELP.replace("the input and --out", "the stores and sweep.out_dir")
        + "; each run is one Ray task (sweep.parallel is then the cluster's business)",
    )
    p.add_argument("--ray-cpus", type=int, default=0, metavar="N", help=RAY_CPUS_HELP)
    p.add_argument(
        "--cpus-per-run",
        type=float,
        default=1.0,
        metavar="N",
        help="with --ray: CPUs each run reserves; its torch threads = N // --procs-per-run unless "
        "sweep.threads_per_run is set [default: 1]",
    )
    p.add_argument(
        "--gpus-per-run",
        type=float,
        default=0.0,
        metavar="N",
        help="with --ray: GPUs each run reserves (Ray sets CUDA_VISIBLE_DEVICES) [default: 0]",
    )
    p.add_argument(
        "--procs-per-run",
        type=int,
        default=1,
        metavar="N",
        help="with --ray: training processes per run; > 1 runs train under torchrun --standalone "
        "--nproc_per_node=N on the task's node (train.parallel picks ddp or fsdp) [default: 1]",
    )


def _ray_runs(args: argparse.Namespace):
    """The Ray runner asked for with --ray, or None (local processes)."""
    given = (args.ray_cpus, args.cpus_per_run, args.gpus_per_run, args.procs_per_run) != (0, 1.0, 0.0, 1)
    if args.ray is None:
        if given:
            raise UserError("--ray-cpus, --cpus-per-run, --gpus-per-run and --procs-per-run need --ray")
        return None
    if args.ray_cpus < 0 or args.cpus_per_run <= 0 or args.gpus_per_run < 0 or args.procs_per_run < 1:
        raise UserError(
            "--ray-cpus must be >= 0, --cpus-per-run > 0, --gpus-per-run >= 0 and --procs-per-run >= 1"
        )
    from contextlab.sweep.ray_runner import RayRuns

    return RayRuns(
        address=None if args.ray == "local" else args.ray,
        num_cpus=args.ray_cpus,
        cpus=args.cpus_per_run,
        gpus=args.gpus_per_run,
        procs=args.procs_per_run,
    )


def _analysis(sweep_dir: Path, section) -> None:
    """The compute-optimal analysis, or the one line saying why this sweep has none."""
    from contextlab.sweep.compute_optimal import budget_label, compute_optimal, margins_line, size_label

    try:
        res = compute_optimal(
            sweep_dir,
            budget_key=section.analysis_axis or None,
            metric=section.analysis_metric or None,
            window=max(1, section.analysis_window),
            rank_by_mean_loss=section.analysis_rank_by_mean_loss,
        )
    except UserError as exc:  # e.g. no context axis in the grid, or no finished run
        print(f"compute-optimal analysis skipped: {exc}")
        return
    if res["warning"]:
        print(res["warning"])
    for note in res.get("notes") or []:
        print(f"note: {note}")
    for b, opt in res["optimal"].items():
        best = opt["best"]
        tried = sorted(int(c) for c in res["curves"][b][best["size"]])
        edge = ""
        if len(tried) > 1 and int(best["context"]) in (tried[0], tried[-1]):
            which = ("smallest", "shorter") if int(best["context"]) == tried[0] else ("largest", "longer")
            edge = f"; the {which[0]} context tried, so the optimum may lie past it: add {which[1]} contexts"
        print(
            f"{budget_label(res['budget_key'], b)}: best {size_label(res['size_key'], best['size'])} "
            f"at context {best['context']} ({res['metric']} {best['loss']:.4f}){edge}"
        )
        if line := margins_line((res.get("paired") or {}).get(b, {}).get(best["size"])):
            print(f"  {line}")
    print("plots: " + ", ".join(res["plots"]))
