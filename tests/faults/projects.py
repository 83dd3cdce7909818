"""One small project for the writer fault tests: a corpus, its byte store, an EP packed store and a
tiny trained run, made through the command line and the trainer as a user makes them."""

from __future__ import annotations

import json
from pathlib import Path

from contextlab.cli import main
from contextlab.config import from_dict
from tests.conftest import shakespeare, write_tree

TINY_RUN = {
    "model": {"size": "tiny-2x128", "n_layer": 1, "n_head": 2, "n_embd": 32},
    "data": {"store": "", "val_split": "tail", "val_fraction": 0.1},
    "optim": {"lr": 3e-3, "warmup_steps": 1},
    "train": {
        "out_dir": "",
        "context": 32,
        "tokens_per_step": 128,
        "max_steps": 1,
        "val_every": 0,
        "ckpt_every": 0,
        "threads": 1,
        "progress": False,
        "dtype": "fp32",
    },
}


def run_config(store: Path, out_dir: Path, **train) -> dict:
    """TINY_RUN on ``store`` into ``out_dir``, with ``train`` keys replaced."""
    cfg = json.loads(json.dumps(TINY_RUN))
    cfg["data"]["store"], cfg["train"]["out_dir"] = str(store), str(out_dir)
    cfg["train"].update(train)
    return cfg


def make_project(root: Path, chars: int, parts: int) -> Path:
    """``root`` with corpus/ (``chars`` of Tiny Shakespeare in ``parts`` files), store/, packed/
    (EP, context 63) and run/ (TINY_RUN)."""
    from contextlab.train.config import RunConfig
    from contextlab.train.trainer import train

    text, size = shakespeare(chars), chars // parts
    write_tree(root / "corpus", {f"part{i}.txt": text[i * size : (i + 1) * size] for i in range(parts)})
    assert main(["data", "ingest", str(root / "corpus"), "--out", str(root / "store"), "--no-progress"]) == 0
    pack = ["data", "pack", str(root / "store"), "--method", "ep", "--context", "63", "--no-progress"]
    assert main([*pack, "--out", str(root / "packed")]) == 0
    train(from_dict(RunConfig, run_config(root / "store", root / "run")))
    return root
