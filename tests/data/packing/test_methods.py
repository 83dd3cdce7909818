"""Exact orders on corpora with known relatedness; every document used once; determinism."""

from __future__ import annotations

import numpy as np
import pytest

from contextlab.data.packing import PackConfig, pack
from contextlab.data.packing.retrievers import BM25Retriever
from tests.data.packing.helpers import EOT, make_store, mixed_corpus, paths_of, sequences_as_paths

# four twin pairs: each pair shares one rare word nobody else has; all documents have the same length
TWINS = {
    "t/a1.txt": "zebra harbour",
    "t/a2.txt": "zebra meadow!",
    "t/b1.txt": "quasar lemon!",
    "t/b2.txt": "quasar pillow",
    "t/c1.txt": "violin gravel",
    "t/c2.txt": "violin sunset",
    "t/d1.txt": "glacier tulip",
    "t/d2.txt": "glacier noise",
}


def test_splice_bm25_pairs_documents_sharing_rare_words(tmp_path):
    store = make_store(tmp_path, TWINS)
    paths = paths_of(store)
    cfg = PackConfig(val_fraction=0, method="splice", retriever="bm25", k=1, context=2 * (13 + 1) - 1, seed=3)
    packed = pack(store, tmp_path / "p", cfg, progress=False).packed
    seqs = sequences_as_paths(packed, store)
    # roots are drawn from the shard's seeded permutation; the twin follows its root
    perm = np.random.default_rng([3, 0]).permutation(len(paths))
    roots, seen = [], set()
    for i in perm:
        if paths[i][:3] not in seen:
            seen.add(paths[i][:3])
            roots.append(paths[i])
    twin = {p: p[:3] + ("2" if p[3] == "1" else "1") + p[4:] for p in paths}
    assert seqs == [[r, twin[r]] for r in roots]
    sims = np.asarray(packed.similarity).reshape(-1, 2)
    assert np.isnan(sims[:, 0]).all() and (sims[:, 1] > 0).all()


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5, 6])
def test_splice_repo_is_depth_first_over_directories(tmp_path, seed):
    files = {p: f"file {p}\n" for p in ["a/x1.py", "a/x2.py", "a/x3.py", "a/sub/y1.py", "b/z1.py", "b/z2.py"]}
    store = make_store(tmp_path, files)
    cfg = PackConfig(
        val_fraction=0, method="splice", retriever="repo", k=1, context=9_999, seed=seed, separator="none"
    )
    (seq,) = sequences_as_paths(pack(store, tmp_path / "p", cfg, progress=False).packed, store)
    # root -> whole order: its folder (after, then before it), then onwards depth first, wrapping
    expected = {
        "a/x1.py": ["a/x1.py", "a/x2.py", "a/x3.py", "a/sub/y1.py", "b/z1.py", "b/z2.py"],
        "a/x2.py": ["a/x2.py", "a/x3.py", "a/x1.py", "a/sub/y1.py", "b/z1.py", "b/z2.py"],
        "a/x3.py": ["a/x3.py", "a/x2.py", "a/x1.py", "a/sub/y1.py", "b/z1.py", "b/z2.py"],
        "a/sub/y1.py": ["a/sub/y1.py", "b/z1.py", "b/z2.py", "a/x1.py", "a/x2.py", "a/x3.py"],
        "b/z1.py": ["b/z1.py", "b/z2.py", "a/x1.py", "a/x2.py", "a/x3.py", "a/sub/y1.py"],
        "b/z2.py": ["b/z2.py", "b/z1.py", "a/x1.py", "a/x2.py", "a/x3.py", "a/sub/y1.py"],
    }
    assert seq == expected[seq[0]]


def test_splice_k2_breadth_first_and_orders(tmp_path):
    # hub shares a word with each of two spokes; spokes share a second word with one leaf each
    files = {
        "h/hub.txt": "alpha beta",
        "h/s1.txt": "alpha gamma",
        "h/s2.txt": "beta delta",
        "h/l1.txt": "gamma",
        "h/l2.txt": "delta",
    }
    store = make_store(tmp_path, files)
    paths = paths_of(store)
    hub = paths.index("h/hub.txt")
    for seed in range(20):  # find a seed whose first root is the hub
        if np.random.default_rng([seed, 0]).permutation(5)[0] == hub:
            break
    orders = {}
    for order in ("identity", "reverse"):
        cfg = PackConfig(
            val_fraction=0, method="splice", k=2, context=9_999, seed=seed, order=order, separator="none"
        )
        (seq,) = sequences_as_paths(pack(store, tmp_path / order, cfg, progress=False).packed, store)
        orders[order] = seq
    ident = orders["identity"]
    assert ident[0] == "h/hub.txt" and set(ident[1:3]) == {"h/s1.txt", "h/s2.txt"}
    assert set(ident[3:]) == {"h/l1.txt", "h/l2.txt"}
    # breadth first: each leaf follows the order of its spoke
    assert [ident[1:3].index(f"h/s{i}.txt") for i in (1, 2)] == [
        ident[3:].index(f"h/l{i}.txt") for i in (1, 2)
    ]
    assert orders["reverse"] == ident[::-1]


METHODS = [("ep", "bm25"), ("ep-domain", "bm25"), ("splice", "bm25"), ("splice", "repo"), ("icp", "bm25")]


@pytest.mark.parametrize("remainder", ["drop", "next", "pool"])
@pytest.mark.parametrize("method,retriever", METHODS)
def test_every_document_used_exactly_once(tmp_path, method, retriever, remainder):
    store = make_store(tmp_path, mixed_corpus())
    lens = store.lengths()
    order = "shuffle" if method == "splice" and retriever == "bm25" else "identity"
    cfg = PackConfig(
        val_fraction=0,
        method=method,
        retriever=retriever,
        k=2,
        order=order,
        context=96,
        seed=1,
        remainder=remainder,
        shards=3,
    )
    packed = pack(store, tmp_path / "p", cfg, progress=False).packed
    e = np.asarray(packed.entries)
    separator_alone = (e[:, 1] == e[:, 2]) & (e[:, 2] == lens[e[:, 0]])  # a row ended just before it
    assert ((e[:, 1] < e[:, 2]) | separator_alone).all()
    if remainder == "drop":
        assert sorted(e[:, 0].tolist()) == list(range(store.n_docs)) and (e[:, 1] == 0).all()
    else:  # every token exactly once: each document's pieces tile [0, len)
        for d in range(store.n_docs):
            pieces = sorted(map(tuple, e[e[:, 0] == d, 1:].tolist()))
            assert pieces[0][0] == 0 and pieces[-1][1] == lens[d]
            assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
        assert packed.meta["n_tokens"] == lens.sum() + store.n_docs  # tokens + one separator each
    lengths = packed.sequence_lengths()
    assert (lengths <= 97).all()
    assert (lengths[:-3] == 97).sum() >= packed.n_sequences - 3 - 3  # only shard tails may be short


ALL_METHODS = [("ep", "bm25"), ("ep-domain", "bm25")] + [
    (m, r) for m in ("splice", "icp") for r in ("bm25", "dense", "repo")
]


@pytest.mark.parametrize("remainder", ["next", "drop"])
@pytest.mark.parametrize("method,retriever", ALL_METHODS)
def test_a_document_exactly_one_row_long_keeps_its_separator(tmp_path, method, retriever, remainder):
    """A document of exactly context + 1 tokens fills a row with its tokens; its separator then
    starts the next row (an entry of no tokens, (d, len, len)) or, with remainder drop, is counted
    in dropped_tokens. It was cut off silently: the row held the document, the separator fell past
    the row's end and no count said so (a repo pack of the stdlib lost one)."""
    row = 16
    files = {f"{'ab'[i % 2]}/f{i}.py": f"def f{i}(): x = {i}"[:row].ljust(row, "#") for i in range(6)}
    store = make_store(tmp_path, files)
    lens = store.lengths()
    assert (lens == row).all()  # every document is exactly one row: the first row always hits the case
    cfg = PackConfig(
        val_fraction=0, method=method, retriever=retriever, context=row - 1, seed=0, remainder=remainder
    )
    packed = pack(store, tmp_path / "p", cfg, progress=False).packed
    rows = [packed.sequence_tokens(i)[0] for i in range(packed.n_sequences)]
    first = int(packed.sequence_entries(0)[0, 0])
    assert rows[0].tolist() == store.doc(first).tolist()  # the whole document, no room for its separator
    kept = sum(len(r) for r in rows)
    assert kept == packed.meta["n_tokens"] == packed.sequence_lengths().sum()
    assert kept + packed.meta["dropped_tokens"] == lens.sum() + store.n_docs  # every token, every separator
    if remainder == "next":
        assert packed.meta["dropped_tokens"] == 0
        assert rows[1][0] == EOT and int(packed.sequence_entries(1)[0, 0]) == first
        assert sum(int((r == EOT).sum()) for r in rows) == store.n_docs
        e = np.asarray(packed.entries)
        for d in range(store.n_docs):  # each document's pieces tile [0, len], its separator last
            pieces = sorted(map(tuple, e[e[:, 0] == d, 1:].tolist()))
            assert pieces[0][0] == 0 and pieces[-1][1] == row
            assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    store = make_store(tmp_path, mixed_corpus())
    cfg = PackConfig(val_fraction=0, method="splice", context=63, seed=7, noise=0.3, shards=2)
    a = pack(store, tmp_path / "a", cfg, progress=False).packed
    b = pack(store, tmp_path / "b", cfg, progress=False).packed
    c = pack(
        store,
        tmp_path / "c",
        PackConfig(val_fraction=0, method="splice", context=63, seed=8, noise=0.3, shards=2),
        progress=False,
    ).packed
    for name in ("entries.npy", "seq_offsets.npy", "similarity.npy", "config.toml"):
        assert (a.path / name).read_bytes() == (b.path / name).read_bytes()
    assert (a.path / "entries.npy").read_bytes() != (c.path / "entries.npy").read_bytes()


def test_noise_one_is_within_domain_example_packing(tmp_path, monkeypatch):
    """p = 1 (k = 1, identity order, remainder drop): the retriever is never built or queried, no entry is
    retrieved, and the entries equal ep-domain's with the same seed exactly."""
    store = make_store(tmp_path, mixed_corpus())

    def boom(*a, **k):
        raise AssertionError("the retriever must not be used at p = 1")

    monkeypatch.setattr(BM25Retriever, "__init__", boom)
    spl = pack(
        store,
        tmp_path / "s",
        PackConfig(val_fraction=0, method="splice", noise=1.0, context=79, seed=5, remainder="drop"),
        progress=False,
    ).packed
    epd = pack(
        store,
        tmp_path / "e",
        PackConfig(val_fraction=0, method="ep-domain", context=79, seed=5, remainder="drop"),
        progress=False,
    ).packed
    assert np.array_equal(spl.entries, epd.entries) and np.array_equal(spl.seq_offsets, epd.seq_offsets)
    assert np.isnan(spl.similarity).all()
    # and within-domain: a sequence spans two domains only where a domain runs out (3 of 4 times at most)
    doms = [m["domain"] for m in store.docs_meta()]
    spans = [len({doms[d] for d in spl.sequence_entries(i)[:, 0]}) for i in range(spl.n_sequences)]
    assert sum(s > 1 for s in spans) <= 3


def test_noise_replaces_retrieved_documents(tmp_path):
    store = make_store(tmp_path, mixed_corpus())
    sims = {}
    for p in (0.0, 0.5):
        cfg = PackConfig(val_fraction=0, method="splice", noise=p, context=199, seed=2)
        sims[p] = np.asarray(pack(store, tmp_path / f"n{p}", cfg, progress=False).packed.similarity)
    frac = {p: np.isfinite(s).mean() for p, s in sims.items()}
    assert frac[0.5] < frac[0.0]


def test_every_splice_sequence_grows_from_a_random_root_after_a_carried_tail(tmp_path):
    """With --remainder next the tail of the document a sequence cut opens the next one, but the tree
    after it grows from a fresh random root (seed Algorithm 1): grown from the tail, k = 1 continued
    one path across sequences and packed exactly as icp does."""
    store = make_store(tmp_path, mixed_corpus(80))
    splice = pack(
        store, tmp_path / "s", PackConfig(val_fraction=0, method="splice", context=63), progress=False
    )
    icp = pack(store, tmp_path / "i", PackConfig(val_fraction=0, method="icp", context=63), progress=False)
    s, i = splice.packed, icp.packed
    assert not np.array_equal(s.entries, i.entries)
    after_tail = []  # the similarity of the entry after an opening tail, in each such sequence
    for q in range(s.n_sequences):
        lo, hi = int(s.seq_offsets[q]), int(s.seq_offsets[q + 1])
        if hi - lo >= 2 and s.entries[lo, 1] > 0:  # opens with a tail (it begins past token 0)
            after_tail.append(float(s.similarity[lo + 1]))
    assert len(after_tail) >= 5 and np.isnan(after_tail).all()  # a root every time
    roots = int(np.isnan(s.similarity).sum())
    assert roots >= s.n_sequences - 1  # at least one root per sequence (a tail is not retrieved either)


def test_icp_path_continues_across_sequences_and_drops_near_duplicates(tmp_path):
    chain = {
        "c/0.txt": "ant bee",
        "c/1.txt": "bee cow",
        "c/2.txt": "cow dog",
        "c/3.txt": "dog elk",
        "c/4.txt": "elk fox",
        "c/5.txt": "dog elk",
    }  # 5 duplicates 3
    store = make_store(tmp_path, chain)
    paths = paths_of(store)
    cfg = PackConfig(val_fraction=0, method="icp", context=15, seed=0, icp_dedup=0.99, separator="none")
    packed = pack(store, tmp_path / "p", cfg, progress=False).packed
    order = [paths[int(d)] for d in np.asarray(packed.entries)[:, 0]]
    assert packed.meta["dropped_near_duplicates"] == 1
    kept = [p for p in paths if p in order]
    assert len(kept) == 5 and len(set(order)) == 5
    # each step of the path shares a word with the previous document (the chain), across sequence ends
    words = {p: set(t.split()) for p, t in chain.items()}
    steps = [(a, b) for a, b in zip(order, order[1:]) if a != b]
    related = [bool(words[a] & words[b]) for a, b in steps]
    assert sum(related) >= len(steps) - 1  # at most one restart (the path may start mid-chain)
