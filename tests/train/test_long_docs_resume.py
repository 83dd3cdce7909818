"""data.mode = long_docs (every window of every long document, read column-major): a run stopped at
a checkpoint and resumed gives the losses of the uninterrupted run, step for step."""

from __future__ import annotations

import json
import shutil

import pytest

from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.train import checkpoint as ckpt
from contextlab.train.config import RunConfig
from contextlab.train.trainer import train
from tests.conftest import shakespeare, write_tree


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    text = shakespeare(60_000)
    cuts = [0, 3000, 9000, 11000, 20000, 26000, 38000, 41000, 50000, 60000]  # 9 documents of 2K-12K bytes
    files = {f"d{i}.txt": text[a:b] for i, (a, b) in enumerate(zip(cuts, cuts[1:]))}
    src = write_tree(tmp_path_factory.mktemp("src"), files)
    return ingest(src, tmp_path_factory.mktemp("store") / "s", IngestConfig(), progress=False).store


def config(store, out_dir) -> RunConfig:
    return from_dict(
        RunConfig,
        {
            "model": {"size": "tiny-4x256", "n_layer": 1, "n_head": 2, "n_embd": 32},
            "optim": {"lr": 3e-3, "warmup_steps": 2},
            "data": {"store": str(store.path), "mode": "long_docs", "val_fraction": 0.2},
            "train": {
                "out_dir": str(out_dir),
                "context": 32,
                "tokens_per_step": 128,  # 4 lanes
                "max_steps": 12,
                "log_every": 1,
                "val_every": 6,
                "val_tokens": 128,
                "ckpt_every": 4,
                "keep_last": 3,
                "threads": 1,
                "peak_flops": 1e12,
                "progress": False,
                "dtype": "fp32",
            },
        },
    )


def losses(run_dir) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows}  # a resumed step's line replaces the first one


def test_a_resumed_long_docs_run_equals_the_uninterrupted_one(store, tmp_path, capsys):
    ref = tmp_path / "ref"
    train(config(store, ref))
    state = json.loads((ref / "checkpoints" / "step_000012" / "state.json").read_text())
    assert state["loader"]["mode"] == "long_docs" and state["loader"]["n_rows"] > 9  # windows, not documents
    run = tmp_path / "run"
    train(config(store, run))
    ckpt_dirs = dict(ckpt.list_checkpoints(run))
    assert sorted(ckpt_dirs) == [4, 8, 12]
    for step in (8, 12):  # as if stopped after step 4's checkpoint
        shutil.rmtree(ckpt_dirs[step])
    capsys.readouterr()
    train(config(store, run))
    assert f"resuming {run} from step_000004" in capsys.readouterr().out
    got, want = losses(run), losses(ref)
    assert sorted(got) == list(range(1, 13)) and got == want
