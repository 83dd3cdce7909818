"""Write the artifacts of ``tests/legacy/``: a token store, a packed store, a trained run and its
Hugging Face export, as this version of contextlab writes them, with the numbers they give.

    python tests/legacy/make.py tests/legacy/v1

Run once with the version whose formats are to be kept loading (the folder's README.md says
which); ``tests/test_legacy_artifacts.py`` then checks that every later version opens them and
gets the same numbers. Tiny on purpose (a 1-block GPT of width 16, a 3,000-byte corpus).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.packing import PackConfig, pack
from contextlab.eval import load_model
from contextlab.train.config import RunConfig
from contextlab.train.export import export_checkpoint
from contextlab.train.trainer import train

ROOT = Path(__file__).resolve().parents[1]
PROBE = list(range(65, 65 + 24))  # "ABC..." as byte ids


def main(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    src = out.parent / f".{out.name}.src"
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    text = (ROOT / "fixtures" / "tinyshakespeare" / "input.txt").read_text()[:3000]
    for i in range(3):
        (src / f"d{i}.txt").write_text(text[i * 1000 : (i + 1) * 1000])
    store = ingest(src, out / "store", IngestConfig(tokenizer="byte"), progress=False).store
    shutil.rmtree(src)
    packed = pack(store, out / "packed", PackConfig(method="ep", context=32), progress=False).packed
    cfg = {
        "model": {"size": "tiny-4x256", "n_layer": 1, "n_head": 2, "n_embd": 16},
        "data": {"store": "store", "val_split": "tail", "val_fraction": 0.1},
        "optim": {"lr": 3e-3, "warmup_steps": 1},
        "train": {
            "out_dir": "run",
            "context": 32,
            "tokens_per_step": 128,
            "max_steps": 2,
            "val_every": 0,
            "ckpt_every": 0,
            "threads": 1,
            "peak_flops": 1e12,
            "progress": False,
            "dtype": "fp32",
        },
    }
    cwd = Path.cwd()
    try:  # relative paths, as a user writes them: the run must not depend on where it is opened
        os.chdir(out)
        train(from_dict(RunConfig, cfg))
        export_checkpoint("run", "export")
    finally:
        os.chdir(cwd)
    idx = torch.tensor([PROBE])
    adapter = load_model(out / "run")
    with torch.no_grad():
        logits = adapter.model(idx).logits[0].double()
    expected = {
        "probe_ids": PROBE,
        "logits_sum": float(logits.sum()),
        "logits_first_row": [float(v) for v in logits[0, :8]],
        "store_n_docs": store.n_docs,
        "store_doc1_first": [int(t) for t in np.asarray(store.doc(1))[:16]],
        "packed_n_sequences": packed.n_sequences,
        "packed_sequence0": packed.sequence_entries(0).tolist(),
        "context": adapter.info.context,
        "tokenizer_hash": adapter.info.tokenizer["hash"],
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    for junk in (out / "run" / "checkpoints").glob("*/optimizer.pt"):
        junk.unlink()  # resuming is not what these artifacts test; keeps the folder small


if __name__ == "__main__":
    main(Path(sys.argv[1]))
