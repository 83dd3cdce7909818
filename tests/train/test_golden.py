"""Golden loss curve: a fixed tiny run must give the same losses as when the golden file was written.

A refactor of the model, objective, loader, optimizer or schedule that changes any number
fails here. fp32 on one CPU thread is deterministic; the tolerance only absorbs differences
between CPU kernels of other machines. After an intended change of the numbers, rewrite the
file with ``CONTEXTLAB_UPDATE_GOLDEN=1 pytest tests/train/test_golden.py`` and say why in the commit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.train.config import RunConfig
from contextlab.train.trainer import train
from tests.conftest import golden_corpus

GOLDEN = Path(__file__).with_name("golden_tiny_losses.json")
CONFIG = {
    "model": {"size": "tiny-2x128", "n_layer": 2, "n_head": 2, "n_embd": 64},
    "optim": {"lr": 3e-3, "warmup_steps": 4},
    "data": {"val_split": "tail", "val_fraction": 0.1},
    "train": {
        "context": 64,
        "tokens_per_step": 512,
        "max_steps": 12,
        "log_every": 1,
        "val_every": 6,
        "val_tokens": 1024,
        "ckpt_every": 0,
        "threads": 1,
        "peak_flops": 1e12,
        "progress": False,
        "dtype": "fp32",
        "seed": 7,
    },
}


def test_tiny_run_reproduces_the_golden_losses(tmp_path):
    store = ingest(golden_corpus(tmp_path / "src"), tmp_path / "store", IngestConfig(), progress=False).store
    cfg = json.loads(json.dumps(CONFIG))
    cfg["data"]["store"] = str(store.path)
    cfg["train"]["out_dir"] = str(tmp_path / "run")
    train(from_dict(RunConfig, cfg))
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    got = {"loss": [r["loss"] for r in rows], "val_loss": [r["val_loss"] for r in rows if "val_loss" in r]}
    assert len(got["loss"]) == 12 and len(got["val_loss"]) == 2
    if os.environ.get("CONTEXTLAB_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(got, indent=1) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert got["loss"] == pytest.approx(want["loss"], rel=0, abs=2e-5)
    assert got["val_loss"] == pytest.approx(want["val_loss"], rel=0, abs=2e-5)
    assert want["loss"][-1] < want["loss"][0] - 1.0  # the golden run itself learned something
