"""An evaluation read on the token store the run trained on says so: one note on stderr and
``training_store: true`` in the result's data, and neither on a store of other text."""

from __future__ import annotations

import json

from contextlab.cli import main
from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.train.config import RunConfig
from contextlab.train.trainer import train
from tests.conftest import shakespeare

TINY = {
    "model": {"size": "tiny-4x256", "n_layer": 1, "n_head": 2, "n_embd": 32},
    "optim": {"warmup_steps": 2},
    "train": {
        "context": 32,
        "tokens_per_step": 128,
        "max_steps": 2,
        "val_every": 0,
        "val_tokens": 64,
        "threads": 1,
        "progress": False,
        "dtype": "fp32",
    },
    "data": {"val_split": "tail", "val_fraction": 0.1},
}


def test_eval_on_the_training_store_says_so(tmp_path, capsys):
    for name, text in (("train", shakespeare(20_000)), ("other", shakespeare(40_000)[20_000:])):
        (tmp_path / f"{name}.txt").write_text(text)
        ingest(tmp_path / f"{name}.txt", tmp_path / name, IngestConfig(tokenizer="byte"), progress=False)
    cfg = json.loads(json.dumps(TINY))
    cfg["data"]["store"] = str(tmp_path / "train")
    cfg["train"]["out_dir"] = str(tmp_path / "run")
    train(from_dict(RunConfig, cfg))
    capsys.readouterr()

    def ppl(store: str) -> tuple[str, dict]:
        out = tmp_path / f"eval-{store}"
        args = ["eval", "ppl", "--model", str(tmp_path / "run"), "--data", str(tmp_path / store)]
        assert main([*args, "--out", str(out), "--no-progress"]) == 0
        return capsys.readouterr().err, json.loads((out / "ppl.json").read_text())["data"]

    err, data = ppl("train")
    assert f"note: {tmp_path / 'train'} is the token store {tmp_path / 'run'} trained on" in err
    assert data["training_store"] is True
    err, data = ppl("other")
    assert "trained on" not in err and "training_store" not in data
