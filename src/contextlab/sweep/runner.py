"""Running a sweep: every run of the grid and its evaluations, N at a time, resumable.

Each run is an independent process (``python -m contextlab train``) with its own run directory and
log; its evaluations follow as processes too (``python -m contextlab eval NAME --model RUN ...``).
Which runs finished with which config (and evaluations) is recorded in ``OUT/sweep_state.json``
(``contextlab.steps``): finished runs are skipped when the sweep is started again, a finished run
whose config changed runs again (it resumes: a budget or an evaluation changed), failed runs keep
their error and are retried, and one failure never stops the others. A folder belongs to one sweep
configuration (``folder``): runs trained with another config are refused before anything runs
(``--overwrite`` trains them again in fresh folders). ``results.csv`` (``results``) is rewritten
after each run ends, also when ``--only`` runs a slice of the grid. The runs go to local processes
here or to Ray tasks (``ray_runner``), which share ``Sweep``.

Trade-off: processes instead of threads or one long-lived process: a run that crashes, leaks memory
or is killed cannot take the sweep down, and the same runs can be spread over machines by giving
each a slice of the grid (``--only``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from contextlab.config import apply_overrides, dumps_toml
from contextlab.errors import UserError
from contextlab.io import atomic_write_json, atomic_write_text
from contextlab.outputs import file_digest
from contextlab.rundir import checkpoint_step, latest_checkpoint
from contextlab.steps import Step, StepRunner
from contextlab.sweep import folder
from contextlab.sweep.results import status, write_results
from contextlab.sweep.spec import Run, SweepSection, budget_notes, eval_notes, format_arg, load_sweep

STATE_FILE = folder.STATE  # sweep_state.json: which runs finished with which config (contextlab.steps)


def _commands(section: SweepSection, run: Run, nproc: int = 1) -> list[tuple[str, list[str]]]:
    """The run's commands: train (under torchrun on this node when ``nproc`` > 1), then its evals."""
    py = [sys.executable, "-m", "contextlab"]
    launch = py if nproc <= 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    launch = launch if nproc <= 1 else launch + [f"--nproc_per_node={nproc}", "-m", "contextlab"]
    cmds = [("train", launch + ["train", str(run.dir / "sweep_config.toml")])]
    stops_early = bool((run.config.get("train") or {}).get("patience"))
    for name, args in run.evals:
        extra = [format_arg(a, run) for a in args]
        if stops_early and "--step" not in extra:  # an early-stopped run's newest checkpoint is past its best
            extra += ["--step", "best"]
        # the sweep owns its runs' results: a changed eval_args reruns and replaces them (the grid's state
        # says which ran with what), as a user's --overwrite would
        cmds.append((f"eval {name}", py + ["eval", name, "--model", str(run.dir), "--overwrite"] + extra))
    return cmds


def die_with_parent() -> None:
    """On Linux, have the kernel send this process SIGTERM when its parent dies (and send it now if the
    parent is already gone): a sweep killed with SIGKILL left its runs training under PID 1, holding
    their run folders' locks, so the next sweep failed them. Run in each child before it starts (the
    chain of a run's commands, and each command of it); training takes SIGTERM as a stop and keeps
    its newest checkpoint. Elsewhere nothing is done."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG (linux/prctl.h)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the kernel was asked
        os.kill(os.getpid(), signal.SIGTERM)


def _run_one(section: SweepSection, run: Run, threads: int, nproc: int = 1) -> subprocess.Popen:
    """Start a run's commands as one shell-free chain in a background process."""
    run.dir.mkdir(parents=True, exist_ok=True)
    cfg = apply_overrides(run.config, [f"train.threads={threads}", "train.progress=false"])
    atomic_write_text(run.dir / "sweep_config.toml", dumps_toml(cfg))
    chain = json.dumps([c for _, c in _commands(section, run, nproc)])
    code = (
        "import json, subprocess, sys\n"
        "from contextlab.sweep.runner import die_with_parent\n"
        "die_with_parent()\n"
        f"for cmd in json.loads({chain!r}):\n"
        "    r = subprocess.run(cmd, preexec_fn=die_with_parent)\n"
        "    if r.returncode:\n"
        "        sys.exit(r.returncode)\n"
    )
    log = open(run.dir / "sweep.log", "ab")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        preexec_fn=die_with_parent,
    )
    proc.log = log  # closed when the process ends
    return proc


def _last_error(run: Run) -> str:
    try:
        lines = (run.dir / "sweep.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    own = [line for line in lines if line.startswith("contextlab") and "error:" in line]  # its one line
    errors = own or [line for line in lines if "error" in line.lower() and "errors.html" not in line]
    return (errors or lines or ["failed"])[-1][-500:]


def sweep_step(section: SweepSection, run: Run, runner: StepRunner, record: bool = True) -> Step:
    """A run and its evaluations as one step of OUT/sweep_state.json (its processes do the work):
    its outputs are its metrics.jsonl and every evaluation's result file.

    A run that a sweep from before the state file finished or saw fail (``sweep_status.json``
    says so, the state knows nothing of it) is recorded that way, as that sweep would have
    (``record`` False: not written, for a dry run).
    """
    evals = [[name, [format_arg(a, run) for a in args]] for name, args in run.evals]
    outputs = [run.dir / "metrics.jsonl", *_eval_files(run).values()]  # a result deleted: evaluated again
    step = Step(run.name, {"config": run.config, "evals": evals}, outputs)
    st = runner.state
    if (
        record
        and run.name not in st["steps"]
        and run.name not in st["started"]
        and run.name not in st["failed"]
    ):
        old = status(run)
        if old["status"] == "done":
            runner.finish(step, step.digest(), old.get("seconds", 0.0))
        elif old["status"] == "failed":
            runner.fail(step, old.get("error") or "failed")
    return step


def _must_run(section: SweepSection, step: Step, runner: StepRunner, run: Run, say: bool = True) -> bool:
    """Not finished with this config (a failed run: when ``retry_failed``), or an evaluation result
    rewritten since; says why a finished one reruns (``say``)."""
    reason = why_run(section, step, runner, run)
    if reason is None:
        return False
    if say and runner.recorded(step.key) is not None:
        print(f"{step.key}: {reason}; running it again", file=sys.stderr)
    return True


def why_run(section: SweepSection, step: Step, runner: StepRunner, run: Run) -> str | None:
    """Why the sweep runs ``run`` (None: it is done): new, its inputs changed, an output missing, an
    evaluation result rewritten since the sweep made it (another command's options would enter the
    analysis unseen), interrupted; a failed run only with ``retry_failed``."""
    _, reason = runner.check(step)
    if reason is None and runner.recorded(step.key) is not None:
        reason = _rewritten(run)
    if reason is None or (runner.failure(step.key) is not None and not section.retry_failed):
        return None
    return reason


def _eval_files(run: Run) -> dict[str, Path]:
    """Each evaluation's result file, by name: where ``contextlab eval NAME --model RUN`` writes it,
    ``RUN/eval/NAME.json``, or under the ``--out`` its eval_args give."""
    files = {}
    for name, args in run.evals:
        given = [format_arg(a, run) for a in args]
        out = next((a.split("=", 1)[1] for a in given if a.startswith("--out=")), None)
        if "--out" in given[:-1]:
            out = given[given.index("--out") + 1]
        files[name] = (Path(out) if out else run.dir / "eval") / f"{name}.json"
    return files


def _rewritten(run: Run) -> str | None:
    """The reason to evaluate again when a result file is not the one the sweep's run wrote (recorded
    in RUN/sweep_status.json when it finished): an ``eval --overwrite`` with other options; or when the
    token store a result read holds other content now (ingested again at its path)."""
    from contextlab.data.store_meta import content_id

    made = status(run).get("evals") or {}
    for name, path in _eval_files(run).items():
        if made.get(name) and file_digest(path) != made[name]:
            return f"its result {path} was rewritten since the sweep made it (by another command?)"
        try:
            data = json.loads(path.read_text()).get("data") or {}
        except (OSError, ValueError, AttributeError):
            continue
        store, was = data.get("store"), data.get("hash")
        now = content_id(store) if isinstance(store, str) and was else None
        if now and now != was:
            return (
                f"its result {path} read {store}, which holds other content now ({was[:12]} then, "
                f"{now[:12]} now)"
            )
    return None


def _where(path: Path, run_dir: Path) -> str:
    """``path`` relative to the run's folder when inside it (the record survives a moved sweep folder)."""
    full, base = path.resolve(), run_dir.resolve()
    return str(full.relative_to(base)) if full.is_relative_to(base) else str(full)


def _record_end(run: Run, returncode: int, seconds: float, runner: StepRunner, step: Step) -> dict:
    """A run's processes ended: record it finished or failed (sweep state and RUN/sweep_status.json)."""
    ok = returncode == 0
    record = {"status": "done" if ok else "failed", "seconds": round(seconds, 1), "returncode": returncode}
    if ok:
        files = _eval_files(run)
        record["evals"] = {name: file_digest(path) for name, path in files.items()}
        record["eval_files"] = {name: _where(path, run.dir) for name, path in files.items()}  # for the report
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

    section, grid = load_sweep(path, overrides)
    runs = select_runs(only, grid)
    with output_lock(section.out_dir, "sweep folder"):
        return _run_sweep(path, overrides, section, grid, runs, progress, ray, overwrite)


def select_runs(only: str | None, grid: list[Run]) -> list[Run]:
    """The runs of ``grid`` whose name ``only`` (a regular expression) matches, every one without it;
    one line when it is no regular expression or selects none (a typo ran nothing and looked like a
    finished slice)."""
    if not only:
        return grid
    try:
        pattern = re.compile(only)
    except re.error as exc:
        raise UserError(
            f"--only {only!r} is not a regular expression ({exc}); e.g. --only 'context-64'"
        ) from None
    runs = [r for r in grid if pattern.search(r.name)]
    if not runs:
        names = ", ".join(r.name for r in grid[:6]) + (", ..." if len(grid) > 6 else "")
        raise UserError(f"--only {only!r} matches no run of the grid ({len(grid)} runs: {names})")
    return runs


def _run_sweep(
    path, overrides, section: SweepSection, grid: list[Run], runs: list[Run], progress: bool, ray, overwrite
) -> Path:
    """``runs`` (the --only slice) of ``grid``; results.csv lists every run of the grid, finished in
    this command or an earlier one."""
    from contextlab import bars

    out = Path(section.out_dir)
    replace = folder.prepare(out, grid, runs, folder.sweep_text(path, overrides), overwrite)  # may refuse
    write_results(section, grid)  # the grid of this sweep file from the start (pending, stale, done)
    for line in eval_notes(section, runs) + budget_notes(runs):
        print(f"note: {line}", file=sys.stderr)
    runner = StepRunner(out / STATE_FILE)
    steps = {r.name: sweep_step(section, r, runner) for r in runs}
    todo = [r for r in runs if r.name in replace or _must_run(section, steps[r.name], runner, r)]
    bar = bars.bar(
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
    except BaseException as exc:  # Ctrl-C, SIGTERM, an error: the files say what is on disk, not "running"
        sweep.stop_active(exc)
        write_results(section, grid)
        raise
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
    active: dict[str, tuple[Run, float]] = field(default_factory=dict)  # name -> (run, started or queued)
    said: float = field(default_factory=time.time)  # when the last progress line was printed
    log_from: dict[str, int] = field(default_factory=dict)  # name -> size of RUN/sweep.log at its start

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
        self.active[run.name] = (run, time.time())
        self.log_from[run.name] = _log_size(run)
        _say(f"{how} {run.name} ({self.started}/{self.total or self.started})", self.bar)

    def tick(self, now: float | None = None) -> None:
        """Say where the runs in progress are: on a terminal beside the bar (at most every 2 s), in
        a pipe or a log one line every ``PROGRESS_EVERY`` seconds (a long run is not silent)."""
        now = time.time() if now is None else now
        live = not getattr(self.bar, "disable", True)
        if now - self.said < (2.0 if live else PROGRESS_EVERY):
            return
        self.said = now
        parts = [p for run, t0 in self.active.values() if (p := _progress(run, t0)) is not None]
        if live:
            self.bar.set_postfix_str(" · ".join(parts), refresh=True)
        elif parts:
            _say("running: " + " · ".join(parts), self.bar)

    def stop_active(self, why: BaseException) -> None:
        """The sweep stops with runs still in progress: each is recorded "stopped" in its
        RUN/sweep_status.json (it said "running", with this driver's pid, after a Ctrl-C), with what
        it has on disk: the newest checkpoint's step, and which evaluations wrote a result."""
        what = (str(why).splitlines() or ["stopped"])[0]
        what = "interrupted" if isinstance(why, KeyboardInterrupt) else what
        for run, _ in list(self.active.values()):
            ckpt = latest_checkpoint(run.dir)
            record = {
                "status": "stopped",
                "error": what[:300],
                "stopped": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "trained_to_step": checkpoint_step(ckpt) if ckpt is not None else None,
                "evaluated": sorted(name for name, f in _eval_files(run).items() if f.is_file()),
            }
            atomic_write_json(run.dir / "sweep_status.json", record)
        self.active.clear()

    def end(self, run: Run, returncode: int, seconds: float) -> None:
        """A run's processes ended: record it, say so, rewrite results.csv."""
        record = _record_end(run, returncode, seconds, self.runner, self.steps[run.name])
        self.active.pop(run.name, None)
        ok = record["status"] == "done"
        self.bar.update(1)
        _say(
            f"{'done  ' if ok else 'FAILED'} {run.name} ({record['seconds']:.0f} s)"
            + ("" if ok else f": {record['error']}"),
            self.bar,
        )
        for note in _notes(run, self.log_from.pop(run.name, 0)):
            _say(f"  {note}", self.bar)
        write_results(self.section, self.runs)


def _log_size(run: Run) -> int:
    try:
        return (run.dir / "sweep.log").stat().st_size
    except OSError:
        return 0


def _notes(run: Run, start: int = 0) -> list[str]:
    """The ``note:`` lines its commands printed into RUN/sweep.log since byte ``start`` (this sweep's
    part of the log), each once: what a run says of its settings (a warm-up as long as the run, data
    read many times) is seen by the sweep's user, not only by one who opens the log."""
    try:
        with open(run.dir / "sweep.log", "rb") as fh:
            fh.seek(start)
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return list(dict.fromkeys(line.strip() for line in text.splitlines() if line.startswith("note: ")))


PROGRESS_EVERY = 600.0  # seconds between the progress lines of a sweep printing into a pipe or a log


def _last_row(run: Run, since: float = 0.0) -> dict | None:
    """The newest row of RUN/metrics.jsonl, read from the file's end (None before the first, or when
    the file was last written before ``since``: a queued run's rows from an earlier sweep)."""
    try:
        if (run.dir / "metrics.jsonl").stat().st_mtime < since - 2.0:  # 2 s: coarse file times
            return None
        with open(run.dir / "metrics.jsonl", "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 16384))
            lines = fh.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            row = json.loads(line)
        except ValueError:  # a torn last line, or the cut first one
            continue
        if isinstance(row, dict) and "step" in row:
            return row
    return None


def _progress(run: Run, since: float = 0.0) -> str | None:
    """``NAME step S/N`` (or its tokens of the budget, or its step alone) for a run that has logged a
    step since ``since``; None before."""
    row = _last_row(run, since)
    if row is None:
        return None
    train = run.config.get("train", {})
    if train.get("max_steps"):
        done, where = row["step"] / train["max_steps"], f"step {row['step']:,}/{train['max_steps']:,}"
    elif train.get("max_tokens") and "tokens" in row:
        done, where = (
            row["tokens"] / train["max_tokens"],
            f"{row['tokens']:,}/{int(train['max_tokens']):,} tokens",
        )
    else:
        done, where = None, f"step {row['step']:,}"
    return f"{run.name} {where}" + (", evaluating" if done is not None and done >= 1 else "")


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
            sweep.tick()
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
