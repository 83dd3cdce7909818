"""build_training_data: the exact training and validation rows of a token store, a packed store and a
mixture, rank slices, resume, and the errors a user can cause."""

from __future__ import annotations

import numpy as np
import pytest

from contextlab.data.packing import PackConfig, pack
from contextlab.data.packing.packed_store import packed_split
from contextlab.data.training import build_training_data
from contextlab.data.views import split_documents
from contextlab.errors import UserError
from contextlab.train.config import DataSection, MixtureSource
from tests.data.packing.helpers import EOT, make_store

LETTERS = ["abc", "xyz", "klm"]


def corpus(letters: str, n: int, seed: int) -> dict[str, str]:
    rng = np.random.default_rng(seed)
    return {
        f"doc{i:03d}.txt": "".join(rng.choice(list(letters), size=int(rng.integers(4, 30)))) for i in range(n)
    }


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("training")
    out = {f"s{i}": make_store(root, corpus(ch, 40, i), name=f"s{i}") for i, ch in enumerate(LETTERS)}
    out["tiny"] = make_store(
        root, {f"t{i}.txt": "ab" * (i + 1) for i in range(4)}, name="tiny"
    )  # 2..8 tokens
    return out


@pytest.fixture(scope="module")
def packed(stores, tmp_path_factory):
    root = tmp_path_factory.mktemp("packed")
    cfg = PackConfig(method="ep", context=8, seed=1, val_fraction=0)  # held-out sequences
    return [pack(stores[f"s{i}"], root / f"p{i}", cfg, progress=False).packed for i in range(2)]


def build(data: DataSection, **kw):
    args = dict(context=8, rows=4, seed=1, val_tokens=40)  # 5 validation rows
    return build_training_data(data, **{**args, **kw})


def windows(view, seed: int, seq_len: int = 8) -> list[list[int]]:
    """Every row of the documents of ``view`` end to end in a ``seed``-ed order, EOT after each."""
    stream = []
    for d in np.random.default_rng(seed).permutation(len(view)):
        stream += [int(t) for t in view.doc(int(d))] + [EOT]
    return [stream[r * seq_len : r * seq_len + seq_len + 1] for r in range((len(stream) - 1) // seq_len)]


def test_token_store_rows_are_exact_windows_of_the_split_documents(stores):
    store = stores["s0"]
    d = DataSection(store=str(store.path), val_fraction=0.25, split_seed=3)
    got = build(d)
    train, val = split_documents(store, 0.25, 3)
    rows = windows(train, seed=1)
    perm = np.random.default_rng([1, 0]).permutation(len(rows))  # epoch 0 of the loader seed
    assert got.loader.next_batch().tokens.tolist() == [rows[r] for r in perm[:4]]
    assert got.val_rows.tolist() == windows(val, seed=3)[:5]  # validation documents in the split seed's order
    assert got.store.hash == store.hash and got.val_rows.dtype == np.int64
    for rank in range(2):  # each of 2 processes: its half of every batch, every second validation row
        part = build(d, rank=rank, world=2)
        assert part.loader.next_batch().tokens.tolist() == [rows[r] for r in perm[2 * rank : 2 * rank + 2]]
        assert part.val_rows.tolist() == windows(val, seed=3)[:5][rank::2]


def test_a_packed_store_holds_out_its_own_sequences(packed):
    p = packed[0]
    got = build(DataSection(packed=str(p.path), val_fraction=0.2, split_seed=2))
    _, val_ids = packed_split(p, 0.2, 2)
    full_val = [int(i) for i in val_ids if p.sequence_lengths()[i] == 9]
    assert got.val_rows.tolist() == [p.sequence_tokens(i)[0].tolist() for i in full_val[:5]]
    assert not set(got.loader.source.doc_order.tolist()) & set(val_ids.tolist())
    held_out = {tuple(p.sequence_tokens(int(i))[0].tolist()) for i in val_ids}
    for _ in range(20):
        assert not {tuple(r) for r in got.loader.next_batch().tokens.tolist()} & held_out
    assert got.store.hash == p.store.hash


def source_of(row) -> int:
    letter = next(chr(int(t)) for t in row if 97 <= t <= 122)
    return next(i for i, letters in enumerate(LETTERS) if letter in letters)


def test_a_mixture_validates_on_each_source_in_its_share(packed):
    mix = [
        MixtureSource(packed=str(packed[0].path), weight=1),
        MixtureSource(packed=str(packed[1].path), weight=3),
    ]
    got = build(DataSection(mixture=mix, val_fraction=0.3), val_tokens=64)  # 8 rows: 2 + 6
    assert [source_of(r) for r in got.val_rows] == [0, 0, 1, 1, 1, 1, 1, 1]
    # the draw is said at the start: rows per step of each source beside its share of the weights
    said = "data.mixture: each step of 4 rows draws p0 1 (25%), p1 3 (75%); validation rows 2 + 6"
    assert got.notes == [said]
    batches = [got.loader.next_batch().tokens for _ in range(5)]
    assert [source_of(r) for b in batches for r in b].count(0) == 5  # a quarter of 20 rows
    state = got.loader.state_dict()
    rest = [got.loader.next_batch().tokens.tolist() for _ in range(3)]
    again = build(DataSection(mixture=mix, val_fraction=0.3), val_tokens=64)
    again.loader.load_state_dict(state)
    assert [again.loader.next_batch().tokens.tolist() for _ in range(3)] == rest


def test_a_validation_store_replaces_the_held_out_share(stores, packed):
    val_store = stores["s2"]  # letters k, l, m
    for d in (
        DataSection(store=str(stores["s0"].path), val_store=str(val_store.path)),
        DataSection(packed=str(packed[0].path), val_store=str(val_store.path)),
    ):
        got = build(d)
        assert {source_of(r) for r in got.val_rows} == {2} and len(got.val_rows) == 5
        assert 2 not in {source_of(r) for r in got.loader.next_batch().tokens}


def test_resume_gives_the_same_batches(stores):
    d = DataSection(store=str(stores["s1"].path), val_fraction=0.25, mode="long_docs")
    a = build(d, context=4)
    for _ in range(7):
        a.loader.next_batch()
    state = a.loader.state_dict()
    assert state["mode"] == "long_docs"
    rest = [a.loader.next_batch().tokens.tolist() for _ in range(5)]
    b = build(d, context=4)
    b.loader.load_state_dict(state)
    assert [b.loader.next_batch().tokens.tolist() for _ in range(5)] == rest


def test_long_docs_train_on_every_window_and_validate_on_different_documents(stores):
    """data.mode = long_docs over documents of 4..29 tokens at context 4: one row per 4 tokens of
    every training document of >= 5 (not one per document), and the validation rows are the first
    windows of as many different held-out documents."""
    store = stores["s1"]
    d = DataSection(store=str(store.path), val_fraction=0.25, mode="long_docs", split_seed=2)
    got = build(d, context=4, val_tokens=4 * 6)
    train, val = split_documents(store, 0.25, 2)
    lens = train.lengths()
    assert got.loader.n_rows == int(((lens[lens >= 5] - 1) // 4).sum()) > int((lens >= 5).sum())
    docs = [val.doc(i).tolist() for i in range(len(val)) if len(val.doc(i)) >= 5]
    assert len(got.val_rows) == 6
    for row in got.val_rows.tolist():  # a window of a rolled held-out document, each its own
        owner = [j for j, t in enumerate(docs) if any((t + t)[o : o + 5] == row for o in range(len(t)))]
        assert owner
        docs.pop(owner[0])


@pytest.mark.parametrize(
    "fields,message",
    [
        ({}, "no training data"),
        ({"packed": "P0", "mixture": [MixtureSource(packed="P1")]}, "not both"),
        ({"mixture": [MixtureSource(packed="")]}, "every data.mixture entry needs packed"),
        ({"packed": "P0", "train_tokens": 100}, "data.train_tokens works on a token store"),
        ({"packed": "P0", "store": "S1"}, "was packed from"),
        ({"store": "S0", "val_split": "middle"}, "data.val_split must be documents or tail"),
        ({"store": "S0", "mode": "packed_store"}, "unknown data.mode"),
        (
            {"store": "S0", "val_store": "T", "mode": "long_docs"},
            "validation documents are too few",
        ),
        ({"store": "P0"}, "data.store .* is a packed store, .* train on it with data.packed="),
        (
            {"store": "S0", "val_store": "P1"},
            "data.val_store .* is a packed store.* give its token store \\(/",
        ),
        ({"packed": "S0"}, "data.packed .* is a token store, .* train on it with data.store="),
        (
            {"mixture": [MixtureSource(packed="P0"), MixtureSource(packed="S1")]},
            "data.mixture entry 2 .* is a token store",
        ),
    ],
)
def test_errors_name_the_problem(stores, packed, fields, message):
    paths = {"P0": packed[0].path, "P1": packed[1].path, "T": stores["tiny"].path}
    paths.update({f"S{i}": stores[f"s{i}"].path for i in range(3)})

    def resolve(v):
        if isinstance(v, list):
            return [MixtureSource(packed=str(paths.get(m.packed, m.packed))) for m in v]
        return str(paths[v]) if v in paths else v

    d = DataSection(**{k: resolve(v) for k, v in fields.items()})
    with pytest.raises(UserError, match=message):
        build(d)


def test_a_mixture_source_short_of_its_validation_share_is_said(packed):
    mix = [MixtureSource(packed=str(p.path), weight=w) for p, w in zip(packed, (1, 3))]
    got = build(DataSection(mixture=mix, val_fraction=0.3), val_tokens=8 * 1000)  # 1,000 rows asked
    draw, note = got.notes
    assert draw.startswith("data.mixture: each step of 4 rows draws p0 1 (25%), p1 3 (75%)")
    assert note.startswith("note: the validation rows mix the data.mixture sources ")
    assert "where their weights ask 250 / 750: 2 sources hold out too little text for their share" in note
    assert len(build(DataSection(mixture=mix, val_fraction=0.3), val_tokens=64).notes) == 1  # 2 / 6: enough


def test_a_mixture_of_packs_of_other_contexts_names_every_one(stores, packed, tmp_path):
    """A mixture of a pack at 16,384 and one at 512 under train.context 512 was told "pack again with
    --context 512 or set train.context = 16384": the second way out was refused by the other source."""
    longer = pack(stores["s1"], tmp_path / "p16", PackConfig(method="ep", context=16, seed=1, val_fraction=0))
    mix = [
        MixtureSource(packed=str(packed[0].path), weight=1),
        MixtureSource(packed=str(longer.packed.path), weight=1),
    ]
    with pytest.raises(UserError) as refused:
        build(DataSection(mixture=mix, val_fraction=0.3))
    said = str(refused.value)
    assert f"{packed[0].path}: 8, {longer.packed.path}: 16" in said
    assert "pack that one again with --context 8" in said and "set train.context" not in said
