"""The training loader and its row sources: exact rows, separators, doc ids, rank slicing, resume."""

from __future__ import annotations

import numpy as np
import pytest

from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.loader import LongDocRows, TokenLoader, WindowRows, document_rows
from contextlab.data.views import all_documents, long_documents
from contextlab.errors import UserError
from tests.conftest import write_tree

LONG_NAMES = ["a.txt", "b.txt", "c.txt", "d.txt"]  # ingest order (sorted paths)
TEXTS = ["abcdefg", "hij", "klmnopqrstu", "vw", "xyz0123456789"]


@pytest.fixture
def view(tmp_path):
    src = write_tree(tmp_path / "c", {f"f{i}.txt": t for i, t in enumerate(TEXTS)})
    return all_documents(ingest(src, tmp_path / "s", IngestConfig(), progress=False).store)


def windows(view, seq_len, rows, seed=0, separator=256, **kw):
    """The loader the trainer builds over a token store: windows in a seeded document order."""
    return TokenLoader(WindowRows(view, seq_len, separator=separator, seed=seed), rows, seed=seed, **kw)


def expected_stream(loader, sep=256):
    out = []
    for d in loader.source.doc_order:
        out += list(TEXTS[int(d)].encode()) + [sep]
    return out


def test_packed_rows_are_windows_of_the_stream(view):
    loader = windows(view, 4, 2, seed=3)
    stream = expected_stream(loader)
    assert loader.n_rows == (len(stream) - 1) // 4
    for r in range(loader.n_rows):
        assert loader.source.row(r).tolist() == stream[r * 4 : r * 4 + 5]
    assert sorted(loader.source.doc_order.tolist()) == [0, 1, 2, 3, 4]


def test_doc_ids_mark_document_changes(view):
    loader = windows(view, 8, 1, seed=0)
    b = loader.next_batch()
    toks, ids = b.tokens[0], b.doc_ids[0]
    # a new document id starts right after each separator
    for j in range(1, len(toks)):
        assert ids[j] == ids[j - 1] + (1 if toks[j - 1] == 256 else 0)


def test_every_row_once_per_epoch_and_deterministic(view):
    a = windows(view, 4, 2, seed=1)
    b = windows(view, 4, 2, seed=1)
    n_steps = a.n_rows // 2
    seen = [tuple(r) for _ in range(n_steps) for r in a.next_batch().tokens.tolist()]
    all_rows = {tuple(a.source.row(r).tolist()) for r in range(a.n_rows)}
    assert len(all_rows) == a.n_rows  # rows of this corpus are all different
    assert len(set(seen)) == len(seen) == 2 * n_steps and set(seen) <= all_rows
    assert [tuple(r) for _ in range(n_steps) for r in b.next_batch().tokens.tolist()] == seen
    assert a.next_batch().tokens.shape == (2, 5) and a.state.epoch == 1


def test_rank_slices_partition_the_global_batch(view):
    single = windows(view, 3, 4, seed=2)
    ranks = [windows(view, 3, 4, seed=2, rank=r, world_size=2) for r in range(2)]
    for _ in range(5):
        full = single.next_batch().tokens
        parts = np.concatenate([ld.next_batch().tokens for ld in ranks])
        assert np.array_equal(full, parts)
    with pytest.raises(UserError, match="divisible"):
        windows(view, 3, 3, separator=None, world_size=2)


def test_resume_gives_the_same_batches(view):
    a = windows(view, 4, 2, seed=5)
    for _ in range(7):
        a.next_batch()
    state = a.state_dict()
    rest = [a.next_batch().tokens.tolist() for _ in range(6)]
    b = windows(view, 4, 2, seed=5)
    b.load_state_dict(state)
    assert [b.next_batch().tokens.tolist() for _ in range(6)] == rest
    c = windows(view, 5, 2, seed=5)
    with pytest.raises(UserError, match="same data and config"):
        c.load_state_dict(state)


def test_the_state_format_is_that_of_older_checkpoints(view):
    """A loader state is the dict checkpoints have always held; one written before row sources existed
    resumes, and one of another kind of rows is refused."""
    a = windows(view, 4, 2, seed=5)
    for _ in range(9):
        a.next_batch()
    n = a.n_rows
    assert a.state_dict() == {
        "epoch": 9 * 2 // n,
        "position": a.state.position,
        "n_rows": n,
        "context": 4,
        "rows": 2,
        "mode": "packed",
        "seed": 5,
    }
    # a checkpoint from before the rename (seq_len) and one after it (context) resume alike
    old = {"epoch": 1, "position": 4, "n_rows": n, "seq_len": 4, "rows": 2, "mode": "packed", "seed": 5}
    with pytest.raises(UserError, match="context=5"):
        windows(view, 4, 2, seed=5).load_state_dict({**old, "seq_len": 5})
    b, c = windows(view, 4, 2, seed=5), windows(view, 4, 2, seed=5)
    b.load_state_dict(old)
    c.state.epoch, c.state.position = 1, 4
    assert b.next_batch().tokens.tolist() == c.next_batch().tokens.tolist()
    with pytest.raises(UserError, match="mode=long_docs"):
        b.load_state_dict({**old, "mode": "long_docs"})


def test_long_docs_mode(view):
    lv = long_documents(view.store, 10)
    assert TokenLoader(document_rows(lv, 9, "long_docs", separator=None, seed=0), 2).n_rows == 2
    with pytest.raises(UserError, match="unknown data.mode 'zzz'; use one of packed, long_docs"):
        document_rows(lv, 9, "zzz", separator=None, seed=0)


LONG = {"a.txt": "ABCDEFGHIJKLMNOPQRSTUVWXY", "b.txt": "abcde", "c.txt": "0123456789!@#", "d.txt": "xyz"}


@pytest.fixture
def long_view(tmp_path):
    src = write_tree(tmp_path / "long", LONG)
    return all_documents(ingest(src, tmp_path / "ls", IngestConfig(), progress=False).store)


def test_long_docs_rows_are_every_window_of_every_rolled_document(long_view):
    """Context 4 (rows of 5): 25 tokens give 6 windows of the rolled document, 13 give 3, the
    5-token document is one row unrolled, the 3-token one is too short."""
    src = LongDocRows(long_view, 4, seed=7)
    assert src.n_rows == 6 + 3 + 1
    got: dict[str, list] = {}
    for r in range(src.n_rows):
        j = next(j for j in range(len(src.doc_order)) if r in src.rows_of(j).tolist())
        got.setdefault(LONG_NAMES[int(src.doc_order[j])], []).append(src.row(r).tolist())
    for name, text in LONG.items():
        tokens = list(text.encode())
        if len(tokens) < 5:
            assert name not in got
            continue
        j = [LONG_NAMES[int(d)] for d in src.doc_order].index(name)
        roll = int(src.roll[j])
        assert roll == 0 if len(tokens) == 5 else 0 <= roll < len(tokens)
        rolled = tokens[roll:] + tokens[:roll]
        assert got[name] == [rolled[i * 4 : i * 4 + 5] for i in range((len(tokens) - 1) // 4)]
    rolls = {tuple(LongDocRows(long_view, 4, seed=s).roll.tolist()) for s in range(6)}
    assert len(rolls) > 1  # the seed picks the offsets
    # window-major ids: the first rows are first windows of different documents
    assert [src.rows_of(j)[0] for j in range(3)] == [0, 1, 2]


def test_long_docs_epoch_is_read_column_major(long_view, tmp_path):
    """Row r of step k is the k-th window of lane r: the rows of a step come from different
    documents, the next step continues them, and an epoch holds every window once."""
    texts = {f"e{i}.txt": f"{i}abcdefghijkl" for i in range(4)}  # 4 documents of 13 tokens
    store = ingest(write_tree(tmp_path / "eq", texts), tmp_path / "es", IngestConfig(), progress=False).store
    loader = TokenLoader(LongDocRows(all_documents(store), 4, seed=1), 2, seed=3)
    src, order = loader.source, loader.source.order(3, 0, 2)
    assert sorted(order.tolist()) == list(range(loader.n_rows)) == list(range(12))
    doc_of = {int(r): j for j in range(4) for r in src.rows_of(j)}
    lanes = [order[0::2].tolist(), order[1::2].tolist()]  # 2 documents of 3 windows per lane
    for lane in lanes:
        docs = [doc_of[r] for r in lane]
        assert docs[:3] == [docs[0]] * 3 and docs[3:] == [docs[3]] * 3 and docs[0] != docs[3]
        assert lane == src.rows_of(docs[0]).tolist() + src.rows_of(docs[3]).tolist()
    assert {doc_of[lanes[0][0]], doc_of[lanes[0][3]]}.isdisjoint({doc_of[lanes[1][0]], doc_of[lanes[1][3]]})
    steps = [loader.next_batch().tokens.tolist() for _ in range(6)]
    assert [row for step in steps for row in step] == [src.row(int(r)).tolist() for r in order]
    assert not np.array_equal(src.order(3, 1, 2), order)  # each epoch its own grouping
    # documents of unequal lengths: lanes are balanced, every window once, each document in order
    uneven = LongDocRows(long_view, 4, seed=1)
    order = uneven.order(3, 0, 2)
    assert sorted(order.tolist()) == list(range(uneven.n_rows))
    for j in range(3):
        assert [r for r in order.tolist() if r in set(uneven.rows_of(j).tolist())] == uneven.rows_of(
            j
        ).tolist()


def test_long_docs_of_one_row_read_as_before(tmp_path):
    """Documents of exactly context + 1 tokens (synthetic samples): each is one row, unrolled, and
    an epoch is the seeded permutation the loader has always used."""
    texts = {f"s{i:02d}.txt": f"{i:02d}abcdefgh"[:10] for i in range(12)}
    store = ingest(write_tree(tmp_path / "syn", texts), tmp_path / "ss", IngestConfig(), progress=False).store
    view = all_documents(store)
    loader = TokenLoader(LongDocRows(view, 9, seed=5), 4, seed=2)
    assert loader.n_rows == 12 and not loader.source.roll.any()
    assert [loader.source.row(r).tolist() for r in range(12)] == [view.doc(i).tolist() for i in range(12)]
    for epoch in range(2):
        perm = np.random.default_rng([2, epoch]).permutation(12)
        assert np.array_equal(loader.source.order(2, epoch, 4), perm)
        for k in range(3):
            assert loader.next_batch().tokens.tolist() == [
                view.doc(int(i)).tolist() for i in perm[4 * k : 4 * k + 4]
            ]


def test_long_docs_resume_gives_the_same_batches(long_view):
    """Stopped mid-epoch and across an epoch boundary, a restored loader continues the column-major
    reading exactly; two ranks together read the single process's steps."""

    def make(**kw):
        return TokenLoader(LongDocRows(long_view, 4, seed=9), 2, seed=4, **kw)

    for stop in (2, 6):
        a = make()
        for _ in range(stop):
            a.next_batch()
        state = a.state_dict()
        rest = [a.next_batch().tokens.tolist() for _ in range(7)]
        b = make()
        b.load_state_dict(state)
        assert [b.next_batch().tokens.tolist() for _ in range(7)] == rest
    single, ranks = make(), [make(rank=r, world_size=2) for r in range(2)]
    for _ in range(8):
        assert np.array_equal(
            single.next_batch().tokens, np.concatenate([x.next_batch().tokens for x in ranks])
        )


def test_too_little_data_is_a_clear_error(view):
    with pytest.raises(UserError, match="one step needs"):
        windows(view, 16, 64)


def test_first_tokens_is_exact_and_nested(tmp_path):
    from contextlab.data.views import all_documents, first_tokens

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(12):
        (docs / f"d{i:02d}.txt").write_text(f"document {i} " * (20 + 7 * i))
    store = ingest(docs, tmp_path / "store", IngestConfig(), progress=False).store
    small, big = first_tokens(store, 300, seed=1), first_tokens(store, 1500, seed=1)
    assert small.n_tokens() == 300 and big.n_tokens() == 1500
    assert sum(len(small.doc(i)) for i in range(len(small))) == 300
    # the smaller set is a prefix of the larger: same documents in the same order, the last one cut shorter
    assert list(big.indices[: len(small)]) == list(small.indices)
    for i in range(len(small)):
        a, b = small.doc(i), big.doc(i)
        assert np.array_equal(a, b[: len(a)])
    assert list(first_tokens(store, 1500, seed=2).indices) != list(
        big.indices
    )  # the seed picks the documents
    assert first_tokens(all_documents(store), store.n_tokens).n_tokens() == store.n_tokens
    with pytest.raises(UserError, match="hold only"):
        first_tokens(store, store.n_tokens + 1)
