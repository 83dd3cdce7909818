"""A sweep folder belongs to one sweep configuration: runs trained with another config are refused
before anything runs (stale in --dry-run; --overwrite trains them again in fresh folders), run folders
of a changed grid are named and marked in the report."""

from __future__ import annotations

import csv

import pytest

from contextlab.cli import main
from contextlab.errors import UserError
from contextlab.sweep.runner import run_sweep
from contextlab.sweep.spec import load_sweep
from tests.sweep.conftest import tiny_sweep


def _rows(results) -> dict:
    return {r["run"]: r for r in csv.DictReader(open(results))}


def test_a_changed_base_value_is_refused_before_any_run_and_overwrite_trains_it_again(
    tmp_path, store, capsys
):
    """Changing [base] optim.lr of a finished sweep listed its runs as done, then failed every one in
    train, wrote the new sweep.toml and kept the old analysis beside it."""
    old = tiny_sweep(tmp_path, store, "old")
    new = tiny_sweep(tmp_path, store, "new", lr="\nlr = 3e-3")
    out = tmp_path / "out"
    run_sweep(old, progress=False)
    (run,) = load_sweep(new)[1]
    (out / "compute_optimal.json").write_text("{}")  # the analysis of the old runs
    metrics = (run.dir / "metrics.jsonl").read_text()
    capsys.readouterr()

    assert main(["sweep", str(new), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "stale    context-16"
    assert "optim.lr 1e-3 there, 3e-3 now" in lines[-1] and "--overwrite" in lines[-1]

    with pytest.raises(
        UserError, match=r"context-16: optim.lr 1e-3 there, 3e-3 now\); use another sweep.out_dir"
    ):
        run_sweep(new, progress=False)
    assert main(["sweep", str(new)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pass --overwrite to train them again" in err[0]
    assert (out / "sweep.toml").read_text() == old.read_text()  # nothing was changed
    assert (out / "compute_optimal.json").exists() and (run.dir / "metrics.jsonl").read_text() == metrics

    (run.dir / "notes.txt").write_text("mine")  # --overwrite replaces contextlab's run folders only
    with pytest.raises(UserError, match="holds notes.txt, which contextlab does not write in a run folder"):
        run_sweep(new, progress=False, overwrite=True)
    (run.dir / "notes.txt").unlink()

    rows = _rows(run_sweep(new, progress=False, overwrite=True))
    assert rows["context-16"]["status"] == "done" and int(rows["context-16"]["steps"]) == 2
    assert "lr = 0.003" in (run.dir / "config.toml").read_text()
    assert "its folder is replaced and it runs again" in capsys.readouterr().out
    assert (out / "sweep.toml").read_text() == new.read_text()
    assert not (out / "compute_optimal.json").exists()  # it described the old runs
    assert not [p.name for p in (out / "runs").iterdir() if p.name.startswith(".")]  # no leftovers
    assert main(["sweep", str(new), "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "done     context-16"


def test_set_overrides_are_part_of_the_recorded_sweep_file(tmp_path, store):
    """--set changes the runs, so OUT/sweep.toml records it: the file reruns the same sweep."""
    f = tiny_sweep(tmp_path, store, "s")
    run_sweep(f, ["base.optim.lr=3e-3"], progress=False)
    recorded = tmp_path / "out" / "sweep.toml"
    assert recorded.read_text().startswith(f"# {f} with --set base.optim.lr=3e-3\n")
    (run,) = load_sweep(recorded)[1]
    assert run.config["optim"]["lr"] == 3e-3
    with pytest.raises(UserError, match="optim.lr 3e-3 there, 1e-3 now"):
        run_sweep(f, progress=False)


def test_run_folders_outside_a_changed_grid_are_named_and_marked_in_the_report(tmp_path, store, capsys):
    from contextlab.report.html import build_report

    run_sweep(tiny_sweep(tmp_path, store, "a"), progress=False)
    capsys.readouterr()
    b = tiny_sweep(tmp_path, store, "b", contexts="[32]")
    assert main(["sweep", str(b), "--dry-run"]) == 0
    left_out = (
        f"left out: 1 run folder(s) in {tmp_path / 'out' / 'runs'} are not in this sweep's grid "
        "(context-16); they stay on disk but are not in results.csv or the analysis"
    )
    assert capsys.readouterr().out.splitlines()[-1] == left_out
    results = run_sweep(b, progress=False)
    assert capsys.readouterr().out.splitlines()[0] == left_out
    assert list(_rows(results)) == ["context-32"]
    page = build_report(tmp_path / "out").read_text()
    assert ">runs/context-16 (not in this sweep&#x27;s grid)</td>" in page  # the Runs table
    assert "not in this sweep&#x27;s grid (its sweep file has other values): runs/context-16;" in page
    assert "runs/context-32 (not" not in page


@pytest.mark.parametrize("theirs", ["results.csv", "sweep.toml"])
def test_a_folder_no_sweep_wrote_is_refused_before_its_files_are_replaced(tmp_path, store, theirs, capsys):
    """A user's sweep.out_dir holding their own results.csv and sweep.toml had both replaced, exit 0."""
    path = tiny_sweep(tmp_path, store, "s")
    out = tmp_path / "out"
    out.mkdir()
    (out / theirs).write_text("my,precious,table\n")
    assert main(["sweep", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"contextlab sweep: error: sweep.out_dir {out} holds {theirs} but no sweep_state.json, so no sweep "
        "wrote it; the sweep would replace them: choose another sweep.out_dir (nothing was changed)"
    ]
    assert (out / theirs).read_text() == "my,precious,table\n" and sorted(p.name for p in out.iterdir()) == [
        theirs
    ]


def test_a_sweep_folder_it_wrote_and_a_folder_of_runs_alone_are_its_own(tmp_path, store):
    path = tiny_sweep(tmp_path, store, "s")
    run_sweep(path, progress=False)
    run_sweep(path, progress=False)  # its own folder again: resumed, not refused
    (tmp_path / "out" / "sweep_state.json").unlink()
    (tmp_path / "out" / "results.csv").unlink()
    (tmp_path / "out" / "sweep.toml").unlink()
    run_sweep(path, progress=False)  # runs/ alone (moved in, trained by hand): taken over as before


def _training(path) -> list[int]:
    """The pids of processes training from the sweep config of ``path``'s run folder."""
    import os

    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = open(f"/proc/{d}/cmdline", "rb").read().decode(errors="replace")
            except OSError:
                continue
            if str(path) in cmd and "sweep_config.toml" in cmd and "train" in cmd:
                pids.append(int(d))
    return pids


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_sweep_killed_with_sigkill_takes_its_training_processes_with_it(tmp_path, store):
    """A user's `kill -9` of a sweep left its run training under PID 1 (holding the run folder's lock),
    so the next sweep failed that run; the kernel now stops a sweep's children with it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    path = tiny_sweep(tmp_path, store, "long")
    path.write_text(path.read_text().replace("max_steps = 2", "max_steps = 100000"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    sweep = subprocess.Popen([sys.executable, "-m", "contextlab", "sweep", str(path)], env=env)
    try:
        deadline = time.time() + 120
        while not _training(tmp_path / "out") and time.time() < deadline:
            time.sleep(0.5)
        assert _training(tmp_path / "out"), "the run never started"
        time.sleep(2)  # well into training
        sweep.send_signal(signal.SIGKILL)
        sweep.wait()
        deadline = time.time() + 60
        while _training(tmp_path / "out") and time.time() < deadline:
            time.sleep(0.5)
        assert not _training(tmp_path / "out")
    finally:
        for pid in _training(tmp_path / "out"):
            os.kill(pid, signal.SIGKILL)
        if sweep.poll() is None:
            sweep.kill()
