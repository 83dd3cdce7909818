"""What a sweep has measured: each run's status and ``OUT/results.csv``, one row per grid point.

A row holds the run's grid values, a budget set in [base] rather than the grid, its training
summary (metrics.jsonl and the last checkpoint), every scalar of every evaluation result, its
status (pending, running, stopped, done, failed, or stale: trained with another config) and its
error. ``RUN/sweep_status.json`` is a run's status as the sweep last recorded it.

Trade-off: the file is rewritten whole, from the run folders, after every run ends (a row is never
stale and a killed sweep's file is never torn); a run's row is read again only when one of the files
it comes from changed, so that rewriting it stays cheap as the grid grows.
"""

from __future__ import annotations

import csv
import io
import json
import os
import socket
from pathlib import Path

from contextlab import rundir
from contextlab.io import atomic_write_text
from contextlab.outputs import file_digest
from contextlab.rundir import latest_checkpoint, read_checkpoint_state, read_evals, read_metrics, summarize
from contextlab.sweep import folder
from contextlab.sweep.spec import Run, SweepSection


def status(run: Run) -> dict:
    """RUN/sweep_status.json ("pending" without it). A run recorded as running whose process on this
    machine is gone was stopped before it finished (a killed sweep): "stopped", run again next time."""
    return recorded_status(run.dir)


def recorded_status(run_dir: Path) -> dict:
    """``status`` of the run folder ``run_dir``."""
    f = Path(run_dir) / "sweep_status.json"
    try:
        record = json.loads(f.read_text())
    except (OSError, ValueError):
        return {"status": "pending"}
    if record.get("status") == "running" and record.get("host") == socket.gethostname():
        pid = record.get("pid")
        if isinstance(pid, int) and not _alive(pid):
            return {**record, "status": "stopped"}
    return record


def rewritten_evals(sweep_dir: Path) -> dict[str, list[str]]:
    """For each run in SWEEP/runs/ the evaluations whose result file is no longer the one the sweep
    wrote when the run finished (an ``eval --overwrite`` since, or a file removed): results.csv and
    the analysis still hold the sweep's numbers until the sweep runs again. Read from each run's
    sweep_status.json (where the file is: its ``eval_files``, else RUN/eval/NAME.json)."""
    found: dict[str, list[str]] = {}
    runs = Path(sweep_dir) / "runs"
    for run in sorted(runs.iterdir()) if runs.is_dir() else []:
        try:
            record = json.loads((run / "sweep_status.json").read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or record.get("status") != "done":
            continue
        paths = record.get("eval_files") or {}
        for name, digest in (record.get("evals") or {}).items():
            path = run / (paths.get(name) or f"{rundir.EVAL}/{name}.json")  # an absolute one stays so
            if digest and file_digest(path) != digest:
                found.setdefault(run.name, []).append(name)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
            step = (data.get("model") or {}).get("step")  # the checkpoint it read (an early stop's best)
            data = {**results["summary"], "seconds": data.get("seconds"), "step": step}  # its headline
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


# run folder -> (what its files were, the config compared, difference, summary): a run's files are read
# again only when one of them changed, so the rewrite after each run reads one run, not the whole grid
_READ: dict[Path, tuple[tuple, str, str | None, dict]] = {}


def _files(run_dir: Path) -> tuple:
    """What a run's row is read from, as (name, mtime in ns, size): its config, metrics, checkpoint
    folder (a checkpoint is renamed into it whole) and each evaluation result."""
    found = []
    for name in (rundir.CONFIG, rundir.METRICS, rundir.CHECKPOINTS, rundir.EVAL):
        try:
            st = os.stat(run_dir / name)
        except OSError:
            continue
        found.append((name, st.st_mtime_ns, st.st_size))
    try:
        evals = sorted(os.scandir(run_dir / rundir.EVAL), key=lambda e: e.name)
    except OSError:
        evals = []
    for entry in evals:
        try:
            st = entry.stat()
        except OSError:
            continue
        found.append((f"{rundir.EVAL}/{entry.name}", st.st_mtime_ns, st.st_size))
    return tuple(found)


def _read(run: Run) -> tuple[str | None, dict]:
    """The run's difference from its config in the sweep file (``folder.difference``) and its summary
    (``run_summary``), read again only when the run's files or its config changed since last time."""
    files, config = _files(run.dir), json.dumps(run.config, sort_keys=True, default=str)
    known = _READ.get(run.dir)
    if known is not None and known[0] == files and known[1] == config:
        return known[2], known[3]
    why, summary = folder.difference(run.dir, run.config), run_summary(run.dir)
    _READ[run.dir] = (files, config, why, summary)
    return why, summary


def write_results(section: SweepSection, runs: list[Run]) -> Path:
    """Write OUT/results.csv whole: one row per run of ``runs`` (the whole grid), in grid order."""
    rows = []
    for run in runs:
        st = status(run)
        why, summary = _read(run)
        if why:  # trained with another config; its numbers do not belong to this sweep file
            st = {"status": "stale", "error": f"trained with another config: {why}"}
        rows.append(
            {
                "run": run.name,
                "status": st["status"],
                **run.params,
                **_budget(run),
                **summary,
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
