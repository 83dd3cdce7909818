"""Sweeps: a grid of training runs (and their evaluations), N at a time, resumable.

A sweep file has three tables::

    [sweep]   name, out_dir, parallel, evals, eval_args ...   (SweepSection)
    [base]    a run config, exactly as `contextlab train` takes it
    [grid]    "section.key" = [values ...]   e.g. "train.context" = [64, 128, 256]

Every point of the grid is the base config with those keys set; all of them are built and
validated before anything runs, so a typo fails in a second, not after an hour. Each run
is an independent process (``python -m contextlab train``) with its own run directory and
log; its evaluations follow as processes too (``python -m contextlab eval NAME --model
RUN ...``). Which runs finished with which config (and evaluations) is recorded in
``OUT/sweep_state.json`` (``contextlab.steps``): finished runs are skipped when the sweep
is started again, a finished run whose config changed runs again (it resumes: a budget or an
evaluation changed), failed runs keep their error and are retried, and one failure never stops
the others. A folder belongs to one sweep configuration (``folder``): runs trained with another
config are refused before anything runs (``--overwrite`` trains them again in fresh folders),
and run folders a changed grid leaves out are named. ``RUN/sweep_status.json`` holds each
run's status and error for ``results.csv``, which gets one row per run of the whole grid (grid
values, a budget set in [base], training summary, every scalar of every evaluation; runs not
yet made are "pending") after each run ends, also when ``--only`` runs a slice of it.

Trade-off: processes instead of threads or one long-lived process: a run that crashes,
leaks memory or is killed cannot take the sweep down, and the same runs can be spread
over machines by giving each a slice of the grid (``--only``).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from contextlab.config import apply_overrides, dumps_toml, from_dict, opt, read_toml
from contextlab.errors import UserError
from contextlab.io import atomic_write_json, atomic_write_text
from contextlab.rundir import latest_checkpoint, read_checkpoint_state, read_evals, read_metrics, summarize
from contextlab.steps import Step, StepRunner
from contextlab.sweep import folder

STATE_FILE = "sweep_state.json"  # which runs finished with which config (contextlab.steps)


@dataclass
class SweepSection:
    name: str = opt("sweep", "name of the sweep (used in the report)")
    out_dir: str = opt("sweeps/sweep", "directory for the runs, results.csv and the analysis")
    parallel: int = opt(1, "runs at the same time")
    threads_per_run: int = opt(0, "torch threads per run; 0 = cores / parallel")
    evals: list[str] = opt([], "evaluations to run after each training run (contextlab eval NAME)")
    eval_args: dict = opt(
        {},
        "extra arguments per evaluation: NAME = [args]; {key.path} is replaced by "
        "the run's config value, {run} by the run directory",
    )
    retry_failed: bool = opt(True, "run failed runs again when the sweep is restarted")
    analysis_axis: str = opt(
        "",
        "grid key that groups the loss-vs-context curves of the analysis (one panel and "
        "one optimum per value), e.g. data.train_tokens for a data-size sweep; empty = the "
        "train.max_* budget key of the grid",
    )
    analysis_metric: str = opt(
        "",
        "results column the analysis minimises; empty = contextwise.best_context_loss (add "
        "contextwise to evals); another column (val_loss, best_val_loss) needs analysis_rank_by_mean_loss",
    )
    analysis_rank_by_mean_loss: bool = opt(
        False,
        "let the analysis rank training contexts by a loss averaged over each run's own context "
        "(val_loss, best_val_loss), which ranks them wrongly; it then prints a warning",
    )
    analysis_window: int = opt(
        3,
        "values of the analysis axis over which the optimal context is smoothed (the most "
        "common optimum in a sliding window); 1 = the raw optimum of each value",
    )


@dataclass
class Run:
    name: str
    params: dict  # grid key -> value
    config: dict  # the full run config (validated)
    dir: Path


def _short(key: str) -> str:
    return key.split(".")[-1]


def _fmt(value) -> str:
    """A grid value as a run-name part: numbers keep their sign (-0.5 and 0.5 are two runs), other
    values keep letters, digits and . + -, with runs of anything else as one '-'."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return re.sub(r"[^A-Za-z0-9.+-]+", "-", str(value)).strip("-")


def load_sweep(path: str | Path, overrides: list[str] = ()) -> tuple[SweepSection, list[Run]]:
    """Read a sweep file and expand its grid into validated runs."""
    from contextlab.train.budget import check_train
    from contextlab.train.config import RunConfig, check_values, renamed_keys

    data = apply_overrides(read_toml(path), list(overrides))
    unknown = set(data) - {"sweep", "base", "grid"}
    if unknown:
        raise UserError(
            f"unknown table(s) {sorted(unknown)} in {path}; a sweep has [sweep], [base] and [grid]"
        )
    section = from_dict(SweepSection, data.get("sweep", {}))
    _check_evals(section, path)
    grid = data.get("grid", {})
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise UserError(f"grid key '{key}' must be a non-empty list of values")
    out = Path(section.out_dir)
    keys = list(grid)
    runs, names = [], set()
    for combo in itertools.product(*(grid[k] for k in keys)) if keys else [()]:
        params = dict(zip(keys, combo))
        name = "__".join(f"{_short(k)}-{_fmt(v)}" for k, v in params.items()) or "run"
        if name in names:
            raise UserError(
                f"two grid points give the same run name {name!r}; make the grid keys' last parts differ"
            )
        names.add(name)
        cfg = apply_overrides(data.get("base", {}), [])
        for k, v in params.items():
            node = cfg
            *parents, leaf = k.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = v
        cfg.setdefault("train", {})["out_dir"] = str(out / "runs" / name)
        try:  # every value a run would refuse, refused here, before the first run trains
            run_cfg = from_dict(RunConfig, cfg)
            check_values(run_cfg)
            check_train(run_cfg.train)
        except UserError as exc:
            raise UserError(f"grid point {name}: {exc}") from None
        # results columns use the new names of renamed keys; the run name and config keep the
        # grid's own spelling, so a sweep written before a rename resumes where it stopped
        params = {renamed_keys().get(k, k): v for k, v in params.items()}
        runs.append(Run(name, params, cfg, out / "runs" / name))
    return section, runs


def _check_evals(section: SweepSection, path) -> None:
    """Unknown evaluation names in [sweep] evals or eval_args are refused before anything runs."""
    from contextlab.eval import EVALS

    unknown = sorted({*section.evals, *section.eval_args} - set(EVALS))
    if unknown:
        raise UserError(
            f"{path}: unknown evaluation(s) {', '.join(unknown)} in [sweep] evals/eval_args; "
            f"choose from {', '.join(EVALS)}"
        )


def status(run: Run) -> dict:
    """RUN/sweep_status.json ("pending" without it). A run recorded as running whose process on this
    machine is gone was stopped before it finished (a killed sweep): "stopped", run again next time."""
    f = run.dir / "sweep_status.json"
    try:
        record = json.loads(f.read_text())
    except (OSError, ValueError):
        return {"status": "pending"}
    if record.get("status") == "running" and record.get("host") == socket.gethostname():
        pid = record.get("pid")
        if isinstance(pid, int) and not _alive(pid):
            return {**record, "status": "stopped"}
    return record


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _format_arg(arg: str, run: Run) -> str:
    from contextlab.train.config import renamed_keys

    def lookup(m: re.Match) -> str:
        key = m.group(1)
        if key == "run":
            return str(run.dir)
        for spelling in [key] + [old for old, new in renamed_keys().items() if new == key]:
            node = run.config
            for part in spelling.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if node is not None:
                return str(node)
        raise UserError(f"eval argument {arg!r}: the run config has no key '{key}'")

    return re.sub(r"\{([A-Za-z0-9_.]+)\}", lookup, arg)


def _commands(section: SweepSection, run: Run, nproc: int = 1) -> list[tuple[str, list[str]]]:
    """The run's commands: train (under torchrun on this node when ``nproc`` > 1), then its evals."""
    py = [sys.executable, "-m", "contextlab"]
    launch = py if nproc <= 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    launch = launch if nproc <= 1 else launch + [f"--nproc_per_node={nproc}", "-m", "contextlab"]
    cmds = [("train", launch + ["train", str(run.dir / "sweep_config.toml")])]
    for name in section.evals:
        extra = [_format_arg(a, run) for a in section.eval_args.get(name, [])]
        # the sweep owns its runs' results: a changed eval_args reruns and replaces them (the grid's state
        # says which ran with what), as a user's --overwrite would
        cmds.append((f"eval {name}", py + ["eval", name, "--model", str(run.dir), "--overwrite"] + extra))
    return cmds


def _run_one(section: SweepSection, run: Run, threads: int, nproc: int = 1) -> subprocess.Popen:
    """Start a run's commands as one shell-free chain in a background process."""
    run.dir.mkdir(parents=True, exist_ok=True)
    cfg = apply_overrides(run.config, [f"train.threads={threads}", "train.progress=false"])
    atomic_write_text(run.dir / "sweep_config.toml", dumps_toml(cfg))
    chain = json.dumps([c for _, c in _commands(section, run, nproc)])
    code = (
        "import json, subprocess, sys\n"
        f"for cmd in json.loads({chain!r}):\n"
        "    r = subprocess.run(cmd)\n"
        "    if r.returncode:\n"
        "        sys.exit(r.returncode)\n"
    )
    log = open(run.dir / "sweep.log", "ab")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT, env=env)
    proc.log = log  # closed when the process ends
    return proc


def _last_error(run: Run) -> str:
    try:
        lines = (run.dir / "sweep.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["failed"])[-1][-500:]


def _step(section: SweepSection, run: Run, runner: StepRunner) -> Step:
    """A run and its evaluations as one step of OUT/sweep_state.json (its processes do the work).

    A run that a sweep from before the state file finished or saw fail (``sweep_status.json``
    says so, the state knows nothing of it) is recorded that way, as that sweep would have.
    """
    evals = [[name, [_format_arg(a, run) for a in section.eval_args.get(name, [])]] for name in section.evals]
    step = Step(run.name, {"config": run.config, "evals": evals}, [run.dir / "metrics.jsonl"])
    st = runner.state
    if run.name not in st["steps"] and run.name not in st["started"] and run.name not in st["failed"]:
        old = status(run)
        if old["status"] == "done":
            runner.finish(step, step.digest(), old.get("seconds", 0.0))
        elif old["status"] == "failed":
            runner.fail(step, old.get("error") or "failed")
    return step


def _must_run(section: SweepSection, step: Step, runner: StepRunner) -> bool:
    """Not finished with this config (a failed run: when ``retry_failed``); says why a finished one reruns."""
    _, reason = runner.check(step)
    if reason is None or (runner.failure(step.key) is not None and not section.retry_failed):
        return False
    if runner.recorded(step.key) is not None:
        print(f"{step.key}: {reason}; running it again", file=sys.stderr)
    return True


def _record_end(run: Run, returncode: int, seconds: float, runner: StepRunner, step: Step) -> dict:
    """A run's processes ended: record it finished or failed (sweep state and RUN/sweep_status.json)."""
    ok = returncode == 0
    record = {"status": "done" if ok else "failed", "seconds": round(seconds, 1), "returncode": returncode}
    if ok:
        runner.finish(step, step.digest(), record["seconds"])
    else:
        record["error"] = _last_error(run)
        runner.fail(step, record["error"])
    atomic_write_json(run.dir / "sweep_status.json", record)
    return record


def run_sweep(
    path: str | Path,
    overrides: list[str] = (),
    *,
    only: str | None = None,
    progress: bool = True,
    ray=None,
    overwrite: bool = False,
) -> Path:
    """Run every pending run of the sweep; returns the path of results.csv. ``ray``: a
    ``ray_runner.RayRuns`` to run them as Ray tasks instead of local processes. Holds the one-writer
    lock of the sweep's folder: a second sweep into it is refused, naming the first. Runs trained
    with another config are refused before anything is written, or with ``overwrite`` trained again
    in fresh folders (``folder``)."""
    from contextlab.data.store import output_lock

    section, runs = load_sweep(path, overrides)
    with output_lock(section.out_dir, "sweep folder"):
        return _run_sweep(path, overrides, section, runs, only, progress, ray, overwrite)


def _run_sweep(
    path, overrides, section: SweepSection, runs: list[Run], only, progress: bool, ray, overwrite
) -> Path:
    from tqdm.auto import tqdm

    out = Path(section.out_dir)
    grid = runs  # results.csv lists every run of the grid, finished in this command or an earlier one
    if only:
        runs = [r for r in runs if re.search(only, r.name)]
    replace = folder.prepare(out, grid, runs, folder.sweep_text(path, overrides), overwrite)  # may refuse
    write_results(section, grid)  # the grid of this sweep file from the start (pending, stale, done)
    runner = StepRunner(out / STATE_FILE)
    steps = {r.name: _step(section, r, runner) for r in runs}
    todo = [r for r in runs if r.name in replace or _must_run(section, steps[r.name], runner)]
    bar = tqdm(
        total=len(runs),
        initial=len(runs) - len(todo),
        unit="run",
        desc=section.name,
        disable=None if progress else True,
        dynamic_ncols=True,
    )
    sweep = Sweep(section, grid, steps, runner, bar, replace=set(replace), total=len(todo))
    try:
        if ray is not None:
            ray.run(sweep, todo)
        else:
            _run_local(sweep, todo)
    finally:
        bar.close()
    return write_results(section, grid)


@dataclass
class Sweep:
    """What the runners share: the sweep, its step state and its progress bar."""

    section: SweepSection
    runs: list[Run]  # every run of the grid (results.csv), not only those --only selects
    steps: dict[str, Step]
    runner: StepRunner
    bar: object
    replace: set[str] = field(default_factory=set)  # stale runs whose folder is replaced as they start
    total: int = 0  # runs this command starts
    started: int = 0

    def start(self, run: Run, how: str = "started") -> None:
        """A run is about to start: its stale folder replaced, recorded as started in the state and in
        RUN/sweep_status.json, and one line saying so."""
        if run.name in self.replace:
            folder.replace_run(run.dir)
            self.replace.discard(run.name)
        run.dir.mkdir(parents=True, exist_ok=True)
        self.runner.begin(self.steps[run.name], self.steps[run.name].digest())
        running = {"status": "running", "pid": os.getpid(), "host": socket.gethostname()}
        atomic_write_json(run.dir / "sweep_status.json", running)
        self.started += 1
        _say(f"{how} {run.name} ({self.started}/{self.total or self.started})", self.bar)

    def end(self, run: Run, returncode: int, seconds: float) -> None:
        """A run's processes ended: record it, say so, rewrite results.csv."""
        record = _record_end(run, returncode, seconds, self.runner, self.steps[run.name])
        ok = record["status"] == "done"
        self.bar.update(1)
        _say(
            f"{'done  ' if ok else 'FAILED'} {run.name} ({record['seconds']:.0f} s)"
            + ("" if ok else f": {record['error']}"),
            self.bar,
        )
        write_results(self.section, self.runs)


def _say(line: str, bar) -> None:
    """One line on stdout at once (a log file or a pipe too), without breaking the progress bar."""
    bar.write(line)
    sys.stdout.flush()


def _run_local(sweep: Sweep, todo: list[Run]) -> None:
    """``section.parallel`` runs at a time as local processes."""
    section = sweep.section
    threads = section.threads_per_run or max(1, (os.cpu_count() or 1) // max(1, section.parallel))
    running: list[tuple[Run, subprocess.Popen, float]] = []
    try:
        while todo or running:
            while todo and len(running) < max(1, section.parallel):
                run = todo.pop(0)
                sweep.start(run)
                running.append((run, _run_one(section, run, threads), time.time()))
            time.sleep(0.2)
            for item in list(running):
                run, proc, started = item
                if proc.poll() is None:
                    continue
                proc.log.close()
                running.remove(item)
                sweep.end(run, proc.returncode, time.time() - started)
    except KeyboardInterrupt:
        for _, proc, _ in running:
            proc.terminate()
        raise


def run_summary(run_dir: Path) -> dict:
    """Training summary of a run from its metrics.jsonl and checkpoints, plus evaluation scalars."""
    row: dict = summarize(read_metrics(run_dir))
    latest = latest_checkpoint(run_dir)
    if latest is not None:
        state = read_checkpoint_state(latest)
        row.update(flops=state.get("flops"), elapsed_s=state.get("elapsed"))
    for name, data in read_evals(run_dir).items():
        results = data.get("results") if isinstance(data.get("results"), dict) else None
        if results is not None and isinstance(results.get("summary"), dict):
            data = {**results["summary"], "seconds": data.get("seconds")}  # an eval result file: its headline
        for k, v in _scalars(data).items():
            row[f"{name}.{k}"] = v
    return row


def _scalars(data: dict, prefix: str = "", depth: int = 0) -> dict:
    out = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            out[key] = v
        elif isinstance(v, dict) and depth < 1 and k not in ("options", "config", "meta"):
            out.update(_scalars(v, f"{key}.", depth + 1))
    return out


def _budget(run: Run) -> dict:
    """The run's budget keys that are set in [base] rather than the grid (train.max_flops = 1.5e11), so
    that results.csv, and the analysis that reads it, know every run's budget."""
    from contextlab.sweep.compute_optimal import BUDGET_KEYS

    train = run.config.get("train", {})
    return {
        k: train[k.split(".")[1]] for k in BUDGET_KEYS if k not in run.params and train.get(k.split(".")[1])
    }


def write_results(section: SweepSection, runs: list[Run]) -> Path:
    rows = []
    for run in runs:
        st = status(run)
        why = folder.difference(run.dir, run.config)
        if why:  # trained with another config; its numbers do not belong to this sweep file
            st = {"status": "stale", "error": f"trained with another config: {why}"}
        rows.append(
            {
                "run": run.name,
                "status": st["status"],
                **run.params,
                **_budget(run),
                **run_summary(run.dir),
                "error": st.get("error", ""),
            }
        )
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    out = Path(section.out_dir) / "results.csv"
    atomic_write_text(out, buf.getvalue())
    return out
