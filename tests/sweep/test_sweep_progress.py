"""A sweep says when each run starts, at once, also into a pipe or a log file (no TTY)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from contextlab.data.ingest import IngestConfig, ingest
from tests.conftest import shakespeare

SWEEP = """
[sweep]
name = "tiny"
out_dir = "{out}"
threads_per_run = 1

[base.model]
size = "tiny-2x128"
n_layer = 1
n_embd = 32
n_head = 2

[base.data]
store = "{store}"
val_split = "tail"
val_fraction = 0.1

[base.train]
tokens_per_step = 128
max_steps = 2
val_tokens = 128
peak_flops = 1e12
dtype = "fp32"

[grid]
"train.context" = [16, 32]
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    src = tmp_path_factory.mktemp("src") / "s.txt"
    src.write_text(shakespeare(20_000))
    return ingest(src, tmp_path_factory.mktemp("st") / "s", IngestConfig(), progress=False).store


def test_each_run_says_when_it_starts_at_once_even_into_a_pipe(tmp_path, store):
    """Nothing was printed until the first run ended (and then only when the buffer filled)."""
    f = tmp_path / "s.toml"
    f.write_text(SWEEP.format(out=tmp_path / "out", store=store.path))
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
