"""Training rows from a packed store: exact sequences, full rows only, splits, training on them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contextlab.config import from_dict
from contextlab.data.loader import PackedRows, TokenLoader, document_rows
from contextlab.data.packing import PackConfig, pack
from contextlab.data.packing.packed_store import packed_split
from contextlab.data.views import all_documents
from contextlab.errors import UserError
from contextlab.train.config import RunConfig
from contextlab.train.trainer import train
from tests.data.packing.helpers import EOT, make_store, mixed_corpus


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed")
    store = make_store(root, mixed_corpus(120, seed=4))
    return pack(store, root / "ep", PackConfig(method="ep", context=32, seed=1), progress=False).packed


def test_rows_are_the_packed_sequences_and_short_ones_are_dropped(packed):
    lengths = packed.sequence_lengths()
    assert (lengths < 33).sum() >= 1 and (lengths == 33).sum() > 20  # the last sequence is short
    loader = TokenLoader(PackedRows(packed, 32), 4, seed=0)
    full = np.flatnonzero(lengths == 33)
    assert loader.n_rows == len(full) and sorted(loader.source.doc_order.tolist()) == full.tolist()
    for r in range(loader.n_rows):
        tokens, _ = packed.sequence_tokens(int(loader.source.doc_order[r]))
        assert loader.source.row(r).tolist() == tokens.tolist()
    batch = loader.next_batch()
    for toks, ids in zip(batch.tokens, batch.doc_ids):  # row-local document ids step after every separator
        assert ids[0] == 0
        for j in range(1, len(toks)):
            assert ids[j] == ids[j - 1] + int(toks[j - 1] == EOT)


def test_split_is_disjoint_seeded_and_respected(packed):
    train_ids, val_ids = packed_split(packed, 0.2, seed=3)
    assert set(train_ids) | set(val_ids) == set(range(len(packed))) and not set(train_ids) & set(val_ids)
    assert len(val_ids) == round(0.2 * len(packed))
    assert packed_split(packed, 0.2, seed=3)[1].tolist() == val_ids.tolist()
    assert packed_split(packed, 0.2, seed=4)[1].tolist() != val_ids.tolist()
    loader = TokenLoader(PackedRows(packed, 32, train_ids), 2)
    assert set(loader.source.doc_order.tolist()) <= set(train_ids.tolist())


def test_wrong_packing_length_and_wrong_mode_are_refused(packed):
    with pytest.raises(
        UserError, match="packed for context 32 but train.context is 64; pack again with --context 64"
    ):
        PackedRows(packed, 64)
    with pytest.raises(
        UserError, match="unknown data.mode 'packed_store'"
    ):  # packed rows come from data.packed
        document_rows(all_documents(packed.store), 32, "packed_store", separator=EOT, seed=0)


def test_training_on_a_packed_store(packed, tmp_path):
    cfg = {
        "model": {"size": "tiny-4x256", "n_layer": 1, "n_head": 2, "n_embd": 32},
        "optim": {"lr": 3e-3, "warmup_steps": 2},
        "data": {"packed": str(packed.path), "val_fraction": 0.1},
        "train": {
            "out_dir": str(tmp_path / "run"),
            "context": 32,
            "tokens_per_step": 128,
            "max_steps": 6,
            "log_every": 1,
            "val_every": 3,
            "val_tokens": 64,
            "threads": 1,
            "peak_flops": 1e12,
            "progress": False,
            "dtype": "fp32",
        },
    }
    res = train(from_dict(RunConfig, cfg))
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert res.steps == 6 and len(rows) == 6 and res.val_loss is not None
    state = json.loads((tmp_path / "run" / "checkpoints" / "step_000006" / "state.json").read_text())
    assert state["loader"]["mode"] == "packed_store" and state["loader"]["position"] == 6 * 4
    cfg["train"]["context"] = 16
    cfg["train"]["out_dir"] = str(tmp_path / "run2")
    with pytest.raises(UserError, match="--context 16"):
        train(from_dict(RunConfig, cfg))


def test_the_documents_the_first_rows_read_are_counted_exactly(packed):
    """What the trainer's few-validation-documents note counts: the store's documents that the first
    k rows read, for packed sequences, windows over documents and every-window rows."""
    source = PackedRows(packed, 32)
    want = {int(d) for r in range(40) for d in packed.sequence_entries(int(source.doc_order[r]))[:, 0]}
    assert set(source.documents(40).tolist()) == want and len(want) > 10
    view = all_documents(packed.store)
    windows = document_rows(view, 16, "packed", separator=EOT, seed=2)
    owner = np.concatenate(  # the stream's owner of every position: documents in their order, separators
        [np.full(len(view.doc(int(j))) + 1, int(view.indices[int(j)])) for j in windows.doc_order]
    )
    for k in (1, 3, 40):
        assert set(windows.documents(k).tolist()) == set(owner[: k * 16 + 1].tolist())
    long = document_rows(view, 16, "long_docs", separator=None, seed=2)
    assert long.documents(4).tolist() == view.indices[long.doc_order[:4]].tolist()
    assert len(set(long.documents(10**6).tolist())) == len(long.doc_order)  # more rows than documents
