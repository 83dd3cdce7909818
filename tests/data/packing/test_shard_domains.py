"""A shard reads only its own documents' domains, and only when its method draws within a domain."""

from __future__ import annotations

import numpy as np
import pytest

import contextlab.data.packing.shards as shards_mod
from contextlab.data.packing import PackConfig, pack
from contextlab.data.packing.shards import domain_codes, line_starts
from contextlab.data.shards.ranges import shard_ranges
from contextlab.data.store import TokenStore
from tests.data.packing.helpers import make_store, mixed_corpus


def test_shard_domain_codes_equal_the_full_read(tmp_path):
    store = make_store(tmp_path, mixed_corpus(40))
    meta = store.docs_meta()
    for lo, hi in [(0, 40), (0, 7), (13, 29), (39, 40)]:
        names: dict[str, int] = {}  # codes numbered by first appearance within the range
        want = [names.setdefault(str(meta[i].get("domain", "")), len(names)) for i in range(lo, hi)]
        np.testing.assert_array_equal(domain_codes(store, lo, hi), want)
        (at,) = line_starts(store.path / "docs.jsonl", [lo], chunk=97)  # from where line lo starts
        np.testing.assert_array_equal(domain_codes(store, lo, hi, at), want)
    assert len(set(domain_codes(store, 0, 40).tolist())) == 4  # d0..d3


@pytest.mark.parametrize(
    ("method", "noise", "reads"),
    [
        ("splice", 0.0, False),
        ("ep", 0.0, False),
        ("icp", 0.0, False),
        ("ep-domain", 0.0, True),
        ("splice", 0.5, True),
    ],
)
def test_domains_are_read_only_by_methods_that_use_them(tmp_path, monkeypatch, method, noise, reads):
    store = make_store(tmp_path, mixed_corpus(40))
    calls = []

    lines = (store.path / "docs.jsonl").read_bytes().split(b"\n")

    def counting(s, lo, hi, at=None):
        calls.append((lo, hi))
        assert at == sum(len(line) + 1 for line in lines[:lo])  # pack found where the shard's lines start
        return domain_codes(s, lo, hi, at)

    monkeypatch.setattr(shards_mod, "domain_codes", counting)
    scanned, line_starts_ = [], shards_mod.line_starts
    monkeypatch.setattr(shards_mod, "line_starts", lambda *a, **k: scanned.append(1) or line_starts_(*a, **k))
    loaded_all = []  # the whole docs.jsonl (a million parsed rows at scale) is never loaded
    monkeypatch.setattr(TokenStore, "docs_meta", lambda s: loaded_all.append(1) or [])
    cfg = PackConfig(method=method, noise=noise, context=255, seed=1, shards=2)  # roots are expanded
    packed = pack(store, tmp_path / "p", cfg, progress=False).packed
    assert packed.n_sequences > 0 and not loaded_all
    assert sorted(calls) == (shard_ranges(store.lengths(), 2) if reads else [])
    assert cfg.draws_within_domain == reads and bool(scanned) == reads  # docs.jsonl scanned only then


def test_line_starts_in_one_pass_for_lines_in_any_order(tmp_path):
    lines = [b"x" * n for n in np.random.default_rng(0).integers(0, 40, 300)]
    f = tmp_path / "lines.jsonl"
    f.write_bytes(b"".join(line + b"\n" for line in lines))
    starts = np.concatenate([[0], np.cumsum([len(line) + 1 for line in lines])])
    wanted = [299, 0, 5, 150, 150, 1, 300, 301]  # 300: the end of the file; 301: past it
    for chunk in (1, 7, 64, 1 << 20):  # chunk edges anywhere, lines longer than a chunk
        assert shards_mod.line_starts(f, wanted, chunk=chunk) == [
            *(int(starts[i]) for i in wanted[:-1]),
            None,
        ]


def test_the_repo_retriever_reads_only_its_shards_rows_of_docs_jsonl(tmp_path, monkeypatch):
    """It loaded the whole docs.jsonl in every shard (a million parsed rows per shard at scale);
    it now gets its shard's rows from where they start, and packs the same sequences."""
    from contextlab.data.packing.methods import RETRIEVERS

    store = make_store(tmp_path, mixed_corpus(40))
    cfg = PackConfig(method="splice", retriever="repo", context=63, seed=1, shards=3)
    assert cfg.reads_docs_meta and RETRIEVERS["repo"].reads_meta
    whole = TokenStore.docs_meta
    loaded_all, scanned, line_starts_ = [], [], shards_mod.line_starts
    monkeypatch.setattr(TokenStore, "docs_meta", lambda s: loaded_all.append(1) or whole(s))
    monkeypatch.setattr(shards_mod, "line_starts", lambda *a, **k: scanned.append(1) or line_starts_(*a, **k))
    by_shard = pack(store, tmp_path / "shard_rows", cfg, progress=False).packed
    assert not loaded_all and scanned
    repo = RETRIEVERS["repo"]  # the same builder reading the whole file, for the reference
    monkeypatch.setitem(
        RETRIEVERS,
        "repo",
        type(repo)(lambda s, ids, c, rows: repo.build(s, ids, c), repo.help, reads_meta=True),
    )
    reference = pack(store, tmp_path / "whole", cfg, progress=False).packed
    assert loaded_all
    for name in ("entries", "seq_offsets", "similarity"):
        np.testing.assert_array_equal(getattr(by_shard, name), getattr(reference, name))
