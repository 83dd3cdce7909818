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
    rest = proc.stdout.read().splitlines()
    assert proc.wait() == 0
    assert first == "started context-16 (1/2)\n" and running
    assert rest[:3] == [rest[0], "started context-32 (2/2)", rest[2]] and rest[0].startswith(
        "done   context-16"
    )
