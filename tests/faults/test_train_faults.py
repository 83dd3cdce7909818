"""Fault injection for ``contextlab train``: SIGKILL at chosen points, restart, compare.

Each killed run is a subprocess started with ``python -c`` that patches one function of the
trainer to SIGKILL its own process at a chosen moment (inside a checkpoint write, between the
files of its temporary folder; after the rename of a checkpoint, before pruning; between a
checkpoint and the next metrics row; in the middle of writing a metrics row; before the first
checkpoint), then runs the command line. The same command is started again, unpatched. The
final weights must be byte for byte those of an uninterrupted run, and metrics.jsonl must hold
the same rows (every value but the timings), each step once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from contextlab.config import from_dict, save_toml
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.train.checkpoint import load_checkpoint
from contextlab.train.config import RunConfig
from tests.conftest import REPO, shakespeare

STEPS = 24
TIMINGS = ("tokens_per_s", "mfu", "elapsed")  # differ between any two runs
RUN = {
    "model": {"size": "tiny-4x256", "n_layer": 1, "n_head": 2, "n_embd": 32},
    "optim": {"lr": 3e-3, "warmup_steps": 2},
    "train": {
        "context": 16,
        "tokens_per_step": 64,
        "max_steps": STEPS,
        "log_every": 1,
        "val_every": 4,
        "val_tokens": 256,
        "ckpt_every": 4,
        "keep_last": 2,
        "threads": 1,
        "peak_flops": 1e12,
        "progress": False,
        "dtype": "fp32",
    },
    "data": {"val_split": "tail", "val_fraction": 0.1},
}

# the patch each killed run applies before the command line starts; KILL() ends the process at once
PRELUDE = """
import os, signal, sys
def KILL():
    os.kill(os.getpid(), signal.SIGKILL)
"""
KILLS = {
    "inside the checkpoint write, between its files": """
from contextlab.train import checkpoint as ckpt
real = ckpt.torch.save
def save(obj, path, *a, **k):
    if path.parent.name == ".step_000012.tmp" and path.name == "optimizer.pt":
        KILL()  # model.safetensors is written, optimizer.pt is not
    return real(obj, path, *a, **k)
ckpt.torch.save = save
""",
    "after a checkpoint's rename, before pruning": """
from contextlab.train import checkpoint as ckpt
real = ckpt.fsync_dir
def fsync_dir(path):
    real(path)
    if (ckpt.Path(path) / "step_000016").is_dir():
        KILL()
ckpt.fsync_dir = fsync_dir
""",
    "between a checkpoint and the next metrics row": """
from contextlab.train.metrics import MetricsWriter
real = MetricsWriter.write
def write(self, row, bar):
    if row["step"] == 9:
        KILL()  # checkpoint 8 is complete, row 9 never written
    real(self, row, bar)
MetricsWriter.write = write
""",
    "inside the write of a metrics row": """
import json
from contextlab.train.metrics import MetricsWriter
real = MetricsWriter.write
def write(self, row, bar):
    if row["step"] == 14:
        line = json.dumps(row)
        self.fh.write(line[: len(line) // 2])
        self.fh.flush()
        KILL()  # a torn last line
    real(self, row, bar)
MetricsWriter.write = write
""",
    "before the first checkpoint": """
from contextlab.train.metrics import MetricsWriter
real = MetricsWriter.write
def write(self, row, bar):
    real(self, row, bar)
    if row["step"] == 3:
        KILL()  # rows 1-3 written, no checkpoint yet
MetricsWriter.write = write
""",
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(config file, reference run directory): the reference is an uninterrupted run."""
    root = tmp_path_factory.mktemp("train_faults")
    (root / "src.txt").write_text(shakespeare(20_000))
    store = ingest(root / "src.txt", root / "store", IngestConfig(), progress=False).store
    data = json.loads(json.dumps(RUN))
    data["data"]["store"] = str(store.path)
    data["train"]["out_dir"] = str(root / "unused")
    save_toml(from_dict(RunConfig, data), root / "run.toml")
    ref = root / "ref"
    res = train_cli(root / "run.toml", ref)
    assert res.returncode == 0, res.stderr
    return root / "run.toml", ref


def train_cli(cfg: Path, out: Path, patch: str = "") -> subprocess.CompletedProcess:
    code = PRELUDE + patch + "\nfrom contextlab.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-c", code, "train", str(cfg), f"--set=train.out_dir={out}"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


def rows(run: Path) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMINGS} for line in lines]


@pytest.mark.parametrize("where", list(KILLS))
def test_a_killed_train_restarts_to_the_uninterrupted_result(setup, tmp_path, where):
    cfg, ref = setup
    run = tmp_path / "run"
    killed = train_cli(cfg, run, KILLS[where])
    assert killed.returncode == -9, f"not killed where planned: {killed.stderr[-2000:]}"
    if where.startswith("inside the checkpoint write"):
        assert (run / "checkpoints" / ".step_000012.tmp" / "model.safetensors").is_file()
        assert not (run / "checkpoints" / ".step_000012.tmp" / "optimizer.pt").exists()
    again = train_cli(cfg, run)
    assert again.returncode == 0, again.stderr[-2000:]
    final = run / "checkpoints" / f"step_{STEPS:06d}"
    want = ref / "checkpoints" / f"step_{STEPS:06d}"
    assert (final / "model.safetensors").read_bytes() == (want / "model.safetensors").read_bytes()
    got_opt, want_opt = load_checkpoint(final)[1], load_checkpoint(want)[1]
    for a, b in zip(got_opt["state"].values(), want_opt["state"].values()):
        assert all(torch.equal(a[k], b[k]) for k in ("exp_avg", "exp_avg_sq"))
    assert rows(run) == rows(ref) and [r["step"] for r in rows(run)] == list(range(1, STEPS + 1))
    assert not list((run / "checkpoints").glob(".*"))  # no temporary folder left
