"""Stores, packed stores, runs and exports written by earlier versions still open, and give the
same numbers (tests/legacy/README.md says which version wrote each folder, and how)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from contextlab.cli import main as cli
from contextlab.data.packing import PackedStore
from contextlab.data.store import TokenStore
from contextlab.eval import load_model
from contextlab.inference import kind_of, open_model, read_checkpoint
from tests.conftest import REPO

LEGACY = REPO / "tests" / "legacy"


@pytest.fixture(params=sorted(p.name for p in LEGACY.iterdir() if (p / "expected.json").is_file()))
def legacy(request, tmp_path):
    """A copy of one version's folder (opening a store may write its check cache beside it)."""
    root = tmp_path / request.param
    shutil.copytree(LEGACY / request.param, root)
    return root, json.loads((root / "expected.json").read_text())


def _logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].double()


def test_the_store_and_the_packed_store_read_back_the_same(legacy):
    root, want = legacy
    store = TokenStore(root / "store")
    assert store.n_docs == want["store_n_docs"]
    assert np.asarray(store.doc(1))[:16].tolist() == want["store_doc1_first"]
    packed = PackedStore(root / "packed", store=store)
    assert packed.n_sequences == want["packed_n_sequences"]
    assert packed.sequence_entries(0).tolist() == want["packed_sequence0"]


@pytest.mark.parametrize("what", ["run", "checkpoint", "export"])
def test_the_run_its_checkpoint_and_its_export_open_with_the_same_logits(legacy, what):
    root, want = legacy
    (ckpt,) = (root / "run" / "checkpoints").iterdir()
    path = {"run": root / "run", "checkpoint": ckpt, "export": root / "export"}[what]
    assert kind_of(path) == what
    model, tok, info = open_model(path)
    got = _logits(model, want["probe_ids"])
    assert got.sum().item() == pytest.approx(want["logits_sum"], abs=1e-6)
    assert got[0, :8].tolist() == pytest.approx(want["logits_first_row"], abs=1e-6)
    assert info.context == want["context"] and tok.hash == want["tokenizer_hash"]
    if what != "export":
        assert torch.equal(_logits(read_checkpoint(path).build(), want["probe_ids"]), got)


def test_the_old_run_evaluates_and_exports_with_this_version(legacy, tmp_path, capsys):
    root, want = legacy
    assert (
        cli(
            [
                "eval",
                "ppl",
                "--model",
                str(root / "run"),
                "--data",
                str(root / "store"),
                "--out",
                str(tmp_path / "e"),
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "e" / "ppl.json").read_text())["results"]["summary"]
    assert cli(["export", str(root / "run"), "--out", str(tmp_path / "hf")]) == 0
    again = load_model(tmp_path / "hf")
    assert _logits(again.model, want["probe_ids"]).sum().item() == pytest.approx(want["logits_sum"], abs=1e-6)
