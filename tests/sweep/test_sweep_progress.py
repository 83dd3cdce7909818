"""A sweep says when each run starts, at once, also into a pipe or a log file (no TTY)."""

from __future__ import annotations

import subprocess
import sys

from tests.sweep.conftest import tiny_sweep


def test_each_run_says_when_it_starts_at_once_even_into_a_pipe(tmp_path, store):
    """Nothing was printed until the first run ended (and then only when the buffer filled)."""
    f = tiny_sweep(tmp_path, store, "s", contexts="[16, 32]")
    proc = subprocess.Popen(
        [sys.executable, "-m", "contextlab", "sweep", str(f), "--no-analysis"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    first = proc.stdout.readline()
    running = proc.poll() is None  # the line came while the sweep runs, not with its end
    rest = [ln for ln in proc.stdout.read().splitlines() if not ln.startswith("  note: ")]  # a run's notes
    assert proc.wait() == 0
    assert first == "started context-16 (1/2)\n" and running
    assert rest[:3] == [rest[0], "started context-32 (2/2)", rest[2]] and rest[0].startswith(
        "done   context-16"
    )


def test_a_sweep_says_where_its_runs_are_while_they_train(tmp_path, store, monkeypatch, capsys):
    """A run hours long printed nothing between its start and its end: into a pipe or a log the sweep
    now prints a line every PROGRESS_EVERY seconds, naming each run's step of its budget."""
    from contextlab.sweep import runner

    monkeypatch.setattr(runner, "PROGRESS_EVERY", 0.0)
    f = tiny_sweep(tmp_path, store, "s", contexts="[16]")
    runner.run_sweep(f, progress=False)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("running: ")]
    assert lines and set(lines) <= {
        "running: context-16 step 1/2",
        "running: context-16 step 2/2, evaluating",
    }, lines


def test_progress_of_a_run_reads_its_newest_row_and_its_budget(tmp_path):
    import json
    import os
    import time

    from contextlab.sweep.runner import _progress
    from contextlab.sweep.spec import Run

    def run(train: dict, rows: list[dict]) -> Run:
        r = Run("r", {}, {"train": train}, tmp_path / f"r{len(list(tmp_path.iterdir()))}")
        r.dir.mkdir()
        if rows:
            text = "".join(json.dumps(x) + "\n" for x in rows) + '{"step": 9'  # a torn last line
            (r.dir / "metrics.jsonl").write_text(text)
        return r

    rows = [{"step": 10, "tokens": 1000, "loss": 3.0}, {"step": 20, "tokens": 2000, "loss": 2.0}]
    assert _progress(run({"max_steps": 40}, rows)) == "r step 20/40"
    assert _progress(run({"max_tokens": 2000}, rows)) == "r 2,000/2,000 tokens, evaluating"
    assert _progress(run({"max_flops": 1e12}, rows)) == "r step 20"
    assert _progress(run({"max_steps": 40}, [])) is None
    old = run({"max_steps": 40}, rows)
    os.utime(old.dir / "metrics.jsonl", (time.time() - 60, time.time() - 60))
    assert _progress(old, since=time.time()) is None  # rows of an earlier sweep: queued, not training
