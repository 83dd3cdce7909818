"""A sweep folder belongs to one sweep configuration: what it holds that the sweep file no longer describes.

Against the sweep file given now, the folders of ``OUT/runs/`` are of three kinds:

* a grid point whose folder holds no run yet, or a run of the same config as far as training
  is concerned (``RESUME_FREE`` keys of the train config, such as budgets, logging and threads,
  may change, and the run resumes): the sweep's own;
* a grid point whose folder holds a run trained with another config (a ``[base]`` value
  changed): stale. ``contextlab train`` would refuse to resume it, so the sweep refuses before
  any run starts, in one line naming the first differing key; ``--overwrite`` trains such
  runs again, each folder replaced whole (``outputs.replace_dir``) just before its run starts;
* a folder that is no grid point (a grid value changed): left out of results.csv and the
  analysis, kept on disk, and named in one line.

``OUT/sweep.toml`` records the sweep file as the runs were made (with ``--set`` overrides
resolved into it), and only once the checks above passed. The analysis (compute_optimal.json and
its plots) describes the runs of one sweep file: it is deleted before anything runs whenever
that file changes or stale runs are trained again, and written again after the runs.

Trade-off: a run is compared by its own config.toml, the config it last trained with, not by a
record of the sweep: a run folder moved in from elsewhere, or one trained by hand, is judged
the same way as the sweep's own, at the cost of reading one small file per run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from contextlab import rundir
from contextlab.config import apply_overrides, dumps_toml, from_dict, read_toml
from contextlab.errors import UserError, some
from contextlab.io import atomic_write_text, fresh_dir
from contextlab.outputs import OutputKind, is_png, refuse_non_folder, replace_dir
from contextlab.sweep.compute_optimal import number_text

SWEEP_FILE = "sweep.toml"  # the sweep file the folder's runs and analysis were made with
ANALYSIS_FILES = ("compute_optimal.json", "u_curves.png", "optimal_context.png", "gap_curves.png")

_OWN = (  # what train, eval, the report and the sweep write at the top of a run folder
    rundir.CONFIG,
    rundir.METRICS,
    rundir.TOKENIZER,
    rundir.CHECKPOINTS,
    rundir.EVAL,
    "tensorboard",
    "loss_curve.png",
    "report.html",
    *rundir.BEFORE_TRAIN,
)
RUN_FOLDER = OutputKind(  # what --overwrite of a sweep may replace: a run folder and nothing else
    "a run folder",
    lambda folder: rundir.is_run(folder) or not any(folder.iterdir()),
    _OWN + tuple(f".{name}.*" for name in _OWN),  # atomic writes' and staged folders' temporaries
)


def difference(run_dir: Path, config: dict) -> str | None:
    """None when ``run_dir`` holds no run or one that ``config`` resumes (the rule train refuses by,
    ``train.config.describe_difference``); else the first key that differs, as ``optim.lr 2e-3 there,
    3e-3 now`` (numbers as a sweep file writes them)."""
    from contextlab.train.config import RunConfig, describe_difference, shown

    recorded = rundir.read_config(run_dir)
    if not recorded:
        return None
    text = lambda v: number_text(v) if isinstance(v, float) else shown(v)
    return describe_difference(recorded, from_dict(RunConfig, config), text) or data_changed(run_dir)


def data_changed(run_dir: Path) -> str | None:
    """The first [data] path whose store holds other content than the run trained on (its checkpoints'
    record against the store's meta.json): a store ingested or packed again at its path. A sweep kept such
    a run as done and set it beside new runs trained on the new content. None when all agree, or a path
    is gone (training says so when it resumes)."""
    from contextlab.data.store_meta import content_id

    record = rundir.data_record(run_dir) or {}
    cwd = Path(record["cwd"]) if record.get("cwd") else Path()
    for key, old in (record.get("paths") or {}).items():
        if not isinstance(old, dict) or not old.get("path") or not old.get("content"):
            continue
        now = content_id(cwd / old["path"])
        if now and now != old["content"]:
            return (
                f"{key} {old['path']} holds other content than it trained on ({old['content'][:12]} then, "
                f"{now[:12]} now: ingested or packed again)"
            )
    return None


def stale_runs(runs) -> dict[str, str]:
    """Run name -> the difference, for every run of ``runs`` whose folder holds a run of another config."""
    found = {run.name: difference(run.dir, run.config) for run in runs}
    return {name: why for name, why in found.items() if why}


def outside_grid(out: Path, runs) -> list[str]:
    """The folders of ``OUT/runs/`` that are no run of the grid (a grid value changed), sorted."""
    names = {run.name for run in runs}
    folder = Path(out) / "runs"
    if not folder.is_dir():
        return []
    return sorted(
        p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in names
    )


def left_out_line(out: Path, runs) -> str | None:
    """The one line naming the run folders a changed grid leaves out; None when there are none."""
    names = outside_grid(out, runs)
    if not names:
        return None
    shown = some(names, 6)
    return (
        f"left out: {len(names)} run folder(s) in {Path(out) / 'runs'} are not in this sweep's grid "
        f"({shown}); they stay on disk but are not in results.csv or the analysis"
    )


def prepare(out: Path, grid, selected, text: str, overwrite: bool) -> dict[str, str]:
    """Before a sweep runs anything: refuse stale runs (unless ``overwrite``), name the run folders the
    grid leaves out, then record the sweep file (``text``). Returns the stale runs of ``selected`` that
    are to be trained again in fresh folders (name -> the difference), each said in one line."""
    out = Path(out)
    refuse_not_a_sweep_folder(out)
    stale = stale_runs(grid)
    check_stale(out, grid, stale, overwrite)
    names = {r.name for r in selected}
    replace = {name: why for name, why in stale.items() if name in names}
    kept = [name for name in stale if name not in replace]
    lines = [left_out_line(out, grid)]
    if kept:
        lines.append(
            f"{len(kept)} run(s) trained with another config are not selected by --only and stay as they "
            f"are (status stale in results.csv) until a command with --overwrite selects them: "
            f"{', '.join(kept[:5])}"
        )
    lines += [
        f"{name}: trained with another config ({why}); its folder is replaced and it runs again"
        for name, why in replace.items()
    ]
    for line in filter(None, lines):
        print(line, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    write_sweep_file(out, text, replaced=bool(replace))
    return replace


STATE = "sweep_state.json"  # runner.STATE_FILE: every folder a sweep has written holds it
WRITTEN = (SWEEP_FILE, "results.csv", *ANALYSIS_FILES)  # what a sweep writes over at the folder's top


def refuse_not_a_sweep_folder(out: Path) -> None:
    """One line, before anything is written, for a sweep.out_dir that a sweep would write over but no
    sweep made: a file, or a folder without sweep_state.json holding a file of a sweep's names
    (results.csv, sweep.toml, the analysis) that does not read as a sweep's (a user's were replaced
    without a word; a sweep from before the state file wrote ones that do). A folder of runs alone
    (``runs/``, trained by hand or moved in) is a sweep's to take over, as before."""
    refuse_non_folder(out, "sweep.out_dir")
    if not out.is_dir() or (out / STATE).is_file():
        return
    theirs = [name for name in WRITTEN if (out / name).exists() and not _a_sweeps(out / name)]
    if theirs:
        raise UserError(
            f"sweep.out_dir {out} holds {some(theirs)} but no {STATE}, so no sweep wrote it; the sweep "
            "would replace them: choose another sweep.out_dir (nothing was changed)"
        )


def _a_sweeps(path: Path) -> bool:
    """Whether ``path`` is what a sweep writes under its name (a folder of a sweep from before
    sweep_state.json has no state, but its results.csv and sweep.toml read as a sweep's)."""
    try:
        if path.name == "results.csv":
            return path.read_text(encoding="utf-8").startswith("run,status")
        if path.name == SWEEP_FILE:
            return isinstance(read_toml(path).get("sweep"), dict)
        if path.suffix == ".png":
            return is_png(path)
        return isinstance(json.loads(path.read_text(encoding="utf-8")), dict)
    except (OSError, ValueError, UserError):
        return False


def check_stale(out: Path, runs, stale: dict[str, str], overwrite: bool) -> None:
    """Refuse a folder with stale runs unless ``overwrite``; with it, refuse any stale run folder that
    holds something contextlab does not write there (replacing it would delete it). Nothing is changed."""
    if not stale:
        return
    first = next(iter(stale))
    if not overwrite:
        many = f"{len(stale)} of its {len(runs)} run(s) {'were' if len(stale) > 1 else 'was'}"
        raise UserError(
            f"sweep folder {out} holds runs of another sweep configuration ({many} trained with another "
            f"config; {first}: {stale[first]}); use another sweep.out_dir to keep them, or pass "
            f"--overwrite to train them again (their folders are replaced)"
        )
    for run in runs:
        if run.name in stale:
            strangers = RUN_FOLDER.strangers(run.dir)
            if strangers:
                raise UserError(
                    f"{run.dir} holds {', '.join(strangers[:3])}, which contextlab does not "
                    "write in a run folder; --overwrite would replace the folder whole: move it out first "
                    "or use another sweep.out_dir (nothing was changed)"
                )


def replace_run(run_dir: Path) -> None:
    """Replace a stale run's folder by an empty one (the old one is swapped out whole, then deleted)."""
    empty = fresh_dir(run_dir, "tmp")
    try:
        replace_dir(empty, run_dir, overwrite=True, kind=RUN_FOLDER)
    except BaseException:
        shutil.rmtree(empty, ignore_errors=True)
        raise


def sweep_text(path, overrides: list[str] = ()) -> str:
    """The sweep file as this command runs it (OUT/sweep.toml): the file itself, or with ``--set``
    overrides the resolved tables, so that ``contextlab sweep OUT/sweep.toml`` makes the same runs."""
    text = Path(path).read_text(encoding="utf-8")
    if not overrides:
        return text
    sets = " ".join(f"--set {o}" for o in overrides)
    return f"# {path} with {sets}\n" + dumps_toml(apply_overrides(read_toml(path), list(overrides)))


def write_sweep_file(out: Path, text: str, replaced: bool = False) -> list[str]:
    """Record the sweep file in ``OUT/sweep.toml``; when it differs from the one recorded, or runs of
    another config are ``replaced``, the analysis is deleted first (it describes other runs).
    Returns the files deleted."""
    out = Path(out)
    recorded = out / SWEEP_FILE
    old = recorded.read_text(encoding="utf-8") if recorded.is_file() else None
    removed = []
    if old != text or replaced:
        for name in ANALYSIS_FILES:
            if (out / name).is_file():
                (out / name).unlink()
                removed.append(name)
    atomic_write_text(recorded, text)
    return removed
