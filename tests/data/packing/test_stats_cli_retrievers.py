"""pack-stats numbers on hand-made cases, the command line, and the retrievers' exclusion of used
documents."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from contextlab.cli.pack import cmd_pack, cmd_pack_stats
from contextlab.config import from_dict
from contextlab.data.packing import PackConfig, PackedStore, pack, pack_stats, zipf_coefficient
from contextlab.data.packing.retrievers import BM25Retriever
from contextlab.data.packing.stats import format_pack_stats, power_law_fit
from contextlab.errors import UserError
from tests.data.packing.helpers import make_store, mixed_corpus, sequences_as_paths


def _tokens_with_counts(counts: list[int]) -> np.ndarray:
    return np.concatenate([np.full(c, t) for t, c in enumerate(counts)])


def test_zipf_coefficient_of_known_distributions():
    assert zipf_coefficient(_tokens_with_counts([720 // r for r in range(1, 7)])) == pytest.approx(1.0)
    assert zipf_coefficient(_tokens_with_counts([3600 // r**2 for r in range(1, 7)])) == pytest.approx(2.0)
    assert zipf_coefficient(np.array([5, 5, 5, 9, 9, 9])) == pytest.approx(0.0)  # flat = maximally bursty
    assert np.isnan(zipf_coefficient(np.array([1, 1, 1])))


def test_power_law_mle_recovers_a_known_exponent():
    """Counts drawn from a discrete power law of exponent 2.5: the MLE finds it (within its
    sampling error), and its rank exponent is 1 / (alpha - 1); too few distinct counts give NaN."""
    counts = np.random.default_rng(0).zipf(2.5, size=20_000)
    s, alpha, xmin = power_law_fit(_tokens_with_counts(counts.tolist()))
    assert alpha == pytest.approx(2.5, abs=0.1) and s == pytest.approx(1 / (alpha - 1)) and xmin >= 1
    assert all(np.isnan(v) for v in power_law_fit(_tokens_with_counts([5, 4, 3, 2, 1])))


def test_pack_stats_on_twins(tmp_path, monkeypatch):
    from contextlab.data.store import TokenStore

    # the spans are counted from docs.jsonl read a row at a time, never a dict per document kept
    monkeypatch.setattr(TokenStore, "docs_meta", lambda s: pytest.fail("docs.jsonl loaded whole"))
    files = {
        "x/a1.txt": "zebra harbour",
        "x/a2.txt": "zebra meadow!",
        "y/b1.txt": "quasar lemon!",
        "y/b2.txt": "quasar pillow",
    }
    store = make_store(tmp_path, files)
    packed = pack(
        store, tmp_path / "p", PackConfig(method="splice", context=27, seed=0, val_fraction=0), progress=False
    ).packed
    s = pack_stats(packed)
    assert s["n_sequences"] == 2 and s["docs_per_sequence"]["mean"] == 2.0
    assert s["frac_sequences_ge2_related"] == 1.0 and s["domains_per_sequence"] == 1.0
    assert s["directories_per_sequence"] == 1.0 and s["retrieved_fraction_of_entries"] == 0.5
    assert 0 < s["mean_neighbour_similarity"] < 1
    # the Zipf coefficient of each sequence is that of its tokens
    want = [zipf_coefficient(packed.sequence_tokens(i)[0]) for i in range(2)]
    assert s["zipf"]["mean"] == pytest.approx(np.mean(want))
    assert s["zipf_mle"]["n_sequences"] == 0 and s["zipf_mle"]["mean"] is None  # too few tokens to fit
    ep = pack_stats(
        pack(
            store, tmp_path / "e", PackConfig(method="ep", context=27, val_fraction=0), progress=False
        ).packed
    )
    assert ep["mean_neighbour_similarity"] is None and ep["frac_sequences_ge2_related"] == 0.0


def test_cli_pack_and_pack_stats(tmp_path, capsys):
    make_store(tmp_path, mixed_corpus(16))
    out = tmp_path / "packed"
    args = [str(tmp_path / "store"), "--out", str(out), "--method", "splice", "--context", "63"]
    args += ["--k", "2", "--noise", "0.1", "--shards", "2", "--no-progress"]
    assert cmd_pack(args) == 0
    assert "wrote" in capsys.readouterr().out
    assert PackedStore(out).meta["config"]["k"] == 2
    assert cmd_pack(args) == 0  # the same command again
    assert "up to date" in capsys.readouterr().out
    from contextlab.report.html import build_report

    page = build_report(tmp_path, tmp_path / "before.html").read_text()
    assert "Packing" in page and "no diagnostics yet" in page  # a packed store shows before pack-stats ran
    assert cmd_pack_stats([str(out)]) == 0
    text = capsys.readouterr().out
    assert "zipf" in text and (out / "pack_stats.png").stat().st_size > 1000
    saved = json.loads((out / "pack_stats.json").read_text())  # what the report shows of it
    assert saved["method"] == "splice" and "zipf" in saved and not any(k.endswith("_all") for k in saved)
    assert saved["docs_per_sequence"]["mean"] > 1 and "directories_per_sequence" in saved  # report's columns
    page = build_report(tmp_path, tmp_path / "after.html").read_text()
    assert "no diagnostics yet" not in page and "neighbour similarity" in page and "pack_stats" in page
    with pytest.raises(UserError, match="unknown packing method"):
        cmd_pack([str(tmp_path / "store"), "--out", str(tmp_path / "x"), "--method", "nope"])
    with pytest.raises(UserError, match="context must be >= 4"):
        cmd_pack([str(tmp_path / "store"), "--out", str(tmp_path / "x"), "--context", "0"])
    with pytest.raises(UserError, match="seq_len .* is replaced by context.* use --context 63 "):
        cmd_pack([str(tmp_path / "store"), "--out", str(tmp_path / "x"), "--seq-len", "64"])
    with pytest.raises(UserError, match="use --context 63 "):
        cmd_pack([str(tmp_path / "store"), "--out", str(tmp_path / "x"), "--set", "seq_len=64"])
    with pytest.raises(UserError, match="unknown config key 'kk'"):
        from_dict(PackConfig, {"kk": 1})
    for cmd in (cmd_pack, cmd_pack_stats):
        with pytest.raises(SystemExit) as exc:
            cmd(["--help"])
        assert exc.value.code == 0
    assert "--remainder" in capsys.readouterr().out


def test_bm25_never_returns_used_documents_and_compaction_changes_nothing(monkeypatch):
    rng = np.random.default_rng(0)
    texts = [
        " ".join(rng.choice([f"w{i}" for i in range(30)], size=int(rng.integers(2, 15)))) for _ in range(300)
    ]
    fast = BM25Retriever(texts)
    slow = BM25Retriever(texts)
    monkeypatch.setattr(slow, "_compact", lambda: None)
    used = set()
    for d in rng.permutation(300)[:290]:
        d = int(d)
        fast.remove(d), slow.remove(d)
        used.add(d)
        a, b = fast.query(d, 3), slow.query(d, 3)
        assert [x[0] for x in a] == [x[0] for x in b]
        assert np.allclose([x[1] for x in a], [x[1] for x in b])
        assert not used & {x[0] for x in a}
    assert fast.compactions >= 3


@pytest.mark.parametrize(
    "device, why", [("cuda", "no CUDA GPU is visible here"), ("tpu9", "unknown dense device")]
)
def test_dense_device_that_is_not_here_is_one_line(tmp_path, device, why):
    from contextlab.data.packing.dense import embed

    if device == "cuda":
        import torch

        if torch.cuda.is_available():  # on a GPU machine the device is there: embed with it instead
            assert embed(["a cat"], device="cuda").shape == (1, 384)
            return
    with pytest.raises(UserError, match=why):
        embed(["a cat", "a dog"], device=device)


def test_dense_splice_pairs_documents_on_the_same_topic(tmp_path):
    files = {
        "n/1.txt": "The kitten purred and curled up on the warm blanket.",
        "n/2.txt": "Cats love to nap in sunny spots and purr softly.",
        "n/3.txt": "The stock market fell sharply as investors sold shares.",
        "n/4.txt": "Bond yields rose while equity prices dropped on Wall Street.",
        "n/5.txt": "The rocket launched into orbit carrying a new satellite.",
        "n/6.txt": "Astronauts aboard the space station observed the planet.",
    }
    store = make_store(tmp_path, files)
    lens = store.lengths()  # any two documents fill a sequence: each holds a root and its nearest neighbour
    cfg = PackConfig(
        method="splice",
        retriever="dense",
        k=1,
        context=int(np.sort(lens)[:2].sum()) + 1,
        remainder="drop",
        seed=1,
        val_fraction=0,
    )
    packed = pack(store, tmp_path / "p", cfg, progress=False).packed
    pairs = [sorted(s) for s in sequences_as_paths(packed, store)]
    assert sorted(pairs) == [["n/1.txt", "n/2.txt"], ["n/3.txt", "n/4.txt"], ["n/5.txt", "n/6.txt"]]
    assert packed.meta["shards"][0]["index_bytes"] > 0


class _Bar:
    """A stand-in for the progress bar: what it was opened with, its descriptions and its counts."""

    def __init__(self, opened: list, total, enabled, desc="", *args, **kw):
        self.record = {"total": total, "enabled": enabled, "descs": [desc], "n": 0}
        opened.append(self.record)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def set_description(self, desc):
        self.record["descs"].append(desc)

    def update(self, n=1):
        self.record["n"] += n


def test_dense_embedding_shows_a_bar_of_documents_honouring_no_progress(tmp_path, monkeypatch):
    """The embedding, most of a dense pack's time (75-85 s silent on the stdlib), has a bar over the
    documents embedded, saying 'loading' while the model loads; none with progress off or in a pool
    worker (its parent draws the pack's one bar)."""
    from contextlab.data.packing import dense, shards
    from contextlab.data.shards import progress as progress_mod

    opened: list[dict] = []
    monkeypatch.setattr(dense, "progress_bar", lambda *a, **k: _Bar(opened, *a, **k))
    store = make_store(tmp_path, mixed_corpus(10))
    cfg = PackConfig(method="splice", retriever="dense", context=63, dense_batch=3, val_fraction=0)
    pack(store, tmp_path / "on", cfg, progress=True)
    (bar,) = opened
    assert bar["total"] == bar["n"] == 10 and bar["enabled"] is True
    assert bar["descs"][0].startswith("dense: loading ") and bar["descs"][-1] == "dense: embedding"
    pack(store, tmp_path / "off", cfg, progress=False)
    assert opened[1]["enabled"] is False and opened[1]["n"] == 10
    monkeypatch.setattr(progress_mod, "_counter", object())  # as in a pool worker
    shards.build_retriever(store, np.arange(10), cfg, bars=True)
    assert opened[2]["enabled"] is False


def test_dense_embeddings_do_not_depend_on_the_counting(tmp_path):
    """embed() encodes a batch per call to count them; the batches are those of one encode() call,
    so the embeddings are the same to the bit."""
    from contextlab.data.packing.dense import _load_model, default_model_path, embed

    texts = [" ".join(["word"] * n) + f" {n}" for n in (3, 40, 7, 7, 19, 1, 60, 7, 12)]
    model = _load_model(default_model_path(), "cpu")
    whole = model.encode(texts, batch_size=2, normalize_embeddings=True, convert_to_numpy=True)
    assert np.array_equal(embed(texts, batch=2), whole.astype(np.float32))
    assert embed([]).shape == (0, whole.shape[1])


def test_pack_stats_names_each_retrievers_similarity_measure(tmp_path, capsys):
    """A repo pack's 'mean similarity 0.919' did not say it is 1 / (1 + folder steps), on another scale
    than bm25's score / self-score: the line (and the JSON) name the measure; ep has none."""
    files = {"a/x1.py": "alpha beta", "a/x2.py": "alpha gamma", "a/b/y.py": "beta delta", "c/z.py": "gamma"}
    store = make_store(tmp_path, files)
    want = {"bm25": "BM25 score / self-score", "repo": "1 / (1 + folder steps)"}
    for retriever, measure in want.items():
        cfg = PackConfig(method="splice", retriever=retriever, context=99, separator="none", val_fraction=0)
        packed = pack(store, tmp_path / retriever, cfg, progress=False).packed
        s = pack_stats(packed)
        assert s["similarity_measure"] == measure
        assert cmd_pack_stats([str(packed.path), "--no-plot", "--no-progress"]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("neighbours"))
        assert line.startswith(
            f"neighbours     mean similarity {s['mean_neighbour_similarity']:.3f} ({measure}), "
        )
    sims = np.asarray(pack(store, tmp_path / "r", cfg, progress=False).packed.similarity)
    # repo: the same folder 1, a subfolder or parent 1/2, a sibling folder 1/3, its subfolder 1/4
    assert set(np.round(sims[np.isfinite(sims)], 4)) <= {1.0, 0.5, round(1 / 3, 4), 0.25}
    ep = pack_stats(
        pack(store, tmp_path / "ep", PackConfig(context=99, val_fraction=0), progress=False).packed
    )
    assert ep["similarity_measure"] is None and ep["mean_neighbour_similarity"] is None
    assert "mean similarity n/a," in format_pack_stats(ep)
    from contextlab.data.packing import RETRIEVERS

    assert RETRIEVERS["dense"].similarity == "cosine of the embeddings"


NO_CACHE_LOCATION = """
import numpy as np
import numba.core.caching as caching
impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl
impl._locator_classes = []  # no folder to cache in: a read-only install run by a user without a home
from contextlab.data.packing import retrievers
r = retrievers.BM25Retriever([f"w{i % 7} w{i % 5} w{i % 3} w{i}" for i in range(40)])
terms = r.q_terms[r.q_indptr[3] : r.q_indptr[4]]
fast = retrievers._accumulate(terms, r.indptr, r.indices, r.data, r.n)
slow = retrievers._accumulate_numpy(terms, r.indptr, r.indices, r.data, r.n)
print(len(r.query(3, 5)), np.allclose(fast, slow), type(retrievers._accumulate_kernel()).__module__)
"""


def test_bm25_runs_where_numba_can_cache_nowhere():
    """numba's ``cache=True`` raised "cannot cache function ...: no locator available" when neither the
    install nor the home folder can be written, at import time: every ``train`` and ``data pack``
    ended in that traceback. The kernel is now made on first use and compiled uncached there."""
    res = subprocess.run(
        [sys.executable, "-c", NO_CACHE_LOCATION], capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr[-3000:]
    count, same, kernel = res.stdout.split()
    assert count == "5" and same == "True" and kernel.startswith("numba"), res.stdout


def test_importing_the_packers_and_the_trainer_leaves_numba_unimported():
    code = "import sys, contextlab.data.packing, contextlab.train.trainer; print('numba' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.stdout.strip() == "False", res.stderr[-3000:]


def test_a_packing_of_documents_long_against_the_context_is_told_it_had_little_to_arrange(tmp_path, capsys):
    """Documents of ~300 bytes packed at context 63 fill one sequence each (or several): the pack and
    pack-stats say that splice chose the neighbours of few sequences; at a context that holds several
    documents, and for ep (which arranges nothing by design), they say nothing."""
    rng = np.random.default_rng(0)
    files = {f"d/doc{i:02d}.txt": " ".join(rng.choice(["ab", "cd", "ef"], size=100)) for i in range(12)}
    store = make_store(tmp_path, files)
    args = [str(store.path), "--method", "splice", "--no-progress"]
    assert cmd_pack([*args, "--context", "63", "--out", str(tmp_path / "long")]) == 0
    out = capsys.readouterr().out
    assert (
        "% of sequences hold (a piece of) one document: 100% of the tokens are in documents that fill a "
        "sequence alone (half of them in documents of 299 tokens or more), against context 63" in out
    )
    s = pack_stats(PackedStore(tmp_path / "long"))
    assert s["single_document_sequences"] >= 0.5 and s["median_document_tokens"] == 299
    assert s["retrieved_entries"] == 0  # one document fills each sequence: nothing was retrieved
    assert "splice chose no neighbour at all: this pack is ep's" in format_pack_stats(s)
    from contextlab.data.packing.stats import few_to_arrange

    assert "differs little from ep here" in few_to_arrange({**s, "retrieved_entries": 3})
    assert cmd_pack([*args, "--context", "2047", "--out", str(tmp_path / "wide")]) == 0
    assert "note:" not in capsys.readouterr().out
    assert pack_stats(PackedStore(tmp_path / "wide"))["single_document_sequences"] < 0.5
    assert cmd_pack([*args[:2], "ep", "--context", "63", "--out", str(tmp_path / "ep")]) == 0
    assert "note:" not in capsys.readouterr().out


def test_near_duplicates_icp_left_out_are_counted_and_said(tmp_path, capsys):
    """--icp-dedup left 10% of a corpus's documents out of every sequence and no summary said it."""
    chain = {
        f"c/{i}.txt": t
        for i, t in enumerate(["ant bee", "bee cow", "cow dog", "dog elk", "elk fox", "dog elk"])
    }
    store = make_store(tmp_path, chain)
    out = tmp_path / "p"
    args = [
        str(store.path),
        "--method",
        "icp",
        "--icp-dedup",
        "0.99",
        "--context",
        "15",
        "--val-fraction",
        "0",
    ]
    assert cmd_pack([*args, "--separator", "none", "--no-progress", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    pk = PackedStore(out)
    n = int(store.lengths()[5])  # the duplicate of document 3
    assert pk.meta["dropped_near_duplicates"] == 1 and pk.meta["dropped_near_duplicate_tokens"] == n
    assert (
        f"; left out: 1 near-duplicate document, {n:,} tokens (--icp-dedup 0.99: packed in no sequence)"
        in said
    )
    stats = pack_stats(pk)
    assert stats["dropped_near_duplicates"] == 1 and stats["dropped_near_duplicate_tokens"] == n
    assert f"left out       1 near-duplicate document, {n:,} tokens" in format_pack_stats(stats)


def test_the_power_law_mle_reads_a_seeded_subsample_of_the_sequences(tmp_path):
    """The MLE scans every x_min (~44 ms a sequence: 90 s for 2,000 of them); it reads --mle-sequences of
    the sampled sequences, seeded, while the least-squares slope reads them all."""
    from tests.conftest import shakespeare

    store = make_store(tmp_path, {f"p/{i}.txt": shakespeare(6000)[i * 300 :] for i in range(12)})
    packed = pack(store, tmp_path / "p", PackConfig(method="ep", context=511, val_fraction=0), progress=False)
    packed = packed.packed
    every = pack_stats(packed, mle_sequences=0)
    some = pack_stats(packed, mle_sequences=4)
    assert every["zipf"] == some["zipf"] and every["zipf"]["n_sequences"] > 4
    assert every["zipf_mle"]["n_sequences"] == every["zipf"]["n_sequences"]  # these all have counts to fit
    assert (
        some["zipf_mle"]["n_sequences"] == 4
        and pack_stats(packed, mle_sequences=4)["zipf_mle"] == some["zipf_mle"]
    )


def test_an_mle_that_fits_few_of_the_sequences_it_tried_says_so_and_reads_least_squares_on_them(tmp_path):
    """A user's pack-stats printed an MLE of 24 sequences without saying it tried 200 (176 had fewer
    than 10 distinct counts) beside a least-squares mean of all: the line now says both, and the
    least-squares mean of the very sequences the MLE fitted."""
    from tests.conftest import shakespeare

    text = shakespeare(20_000)
    docs = {f"p/{i}.txt": text[i * 300 : i * 300 + 3_000] for i in range(6)}  # long sequences: counts to fit
    docs |= {f"q/{i}.txt": "ab " * (40 + i) for i in range(40)}  # a few distinct counts only
    store = make_store(tmp_path, docs)
    packed = pack(store, tmp_path / "p", PackConfig(method="ep", context=255, val_fraction=0), progress=False)
    s = pack_stats(packed.packed, mle_sequences=0)
    m = s["zipf_mle"]
    assert 0 < m["n_sequences"] < m["n_sampled"] == s["zipf"]["n_sequences"]
    picked = [i for i in range(packed.packed.n_sequences) if packed.packed.sequence_lengths()[i] == 256]
    fits = [i for i in picked if np.isfinite(power_law_fit(packed.packed.sequence_tokens(i)[0])[0])]
    same = np.mean([zipf_coefficient(packed.packed.sequence_tokens(i)[0]) for i in fits])
    assert len(fits) == m["n_sequences"] and m["least_squares_mean_same_sequences"] == pytest.approx(same)
    line = next(x for x in format_pack_stats(s).splitlines() if x.startswith("zipf (MLE)"))
    assert f"{m['n_sequences']:,} sequences of {m['n_sampled']:,} tried: the other " in line
    assert line.endswith(f"counts to fit; least squares on the same {m['n_sequences']:,}: {same:.3f})")


def test_a_pack_with_no_full_sequence_says_nothing_of_it_trains(tmp_path, capsys):
    """'1 sequences (0 full)' was all a pack of a context longer than its corpus said: training reads
    full sequences only, so such a pack trains on nothing."""
    store = make_store(tmp_path, {"a/x.txt": "a small text only"})
    args = [str(store.path), "--method", "ep", "--val-fraction", "0", "--no-progress"]
    # a store shorter than one sequence is refused before anything is written (it was packed, exit 0)
    with pytest.raises(UserError, match=r"holds 17 tokens, fewer than one sequence of --context 1,000 \+ 1"):
        cmd_pack([*args, "--context", "1000", "--out", str(tmp_path / "p")])
    assert not (tmp_path / "p").exists()
    assert cmd_pack([*args, "--context", "7", "--out", str(tmp_path / "q")]) == 0
    assert "no sequence is full" not in capsys.readouterr().out


def test_a_bm25_index_build_has_a_bar_of_its_own(tmp_path, monkeypatch):
    """The pack's bar of packed documents sat at 0 while BM25 decoded and indexed a shard (9 s of
    Django's 11): the build now shows a bar over the documents read, then 'indexing'."""
    from contextlab.data.packing import retrievers
    from contextlab.data.shards import progress

    seen = []

    class Bar:
        def __init__(self, total, enabled, desc):
            seen.append(("open", total, enabled, desc))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def update(self, n):
            seen.append(("update", n))

        def set_description(self, desc):
            seen.append(("desc", desc))

    monkeypatch.setattr(progress, "progress_bar", Bar)
    store = make_store(tmp_path, mixed_corpus(300))
    ids = np.arange(300)
    retrievers.build_bm25(store, ids, PackConfig(method="splice"), progress=True)
    assert seen[0] == ("open", 300, True, "bm25: reading documents") and ("desc", "bm25: indexing") in seen
    assert sum(n for kind, n, *_ in seen if kind == "update") == 300


def test_a_retrieving_pack_of_one_large_shard_is_told_the_shard_count_that_fits(
    tmp_path, monkeypatch, capsys
):
    """Retrieval runs within a shard and costs more per document as the shard grows (32,777 documents:
    35 s in one shard, 13 s in four); the default of one shard is said past 20,000 documents, with a
    --shards of about 15,000 each. Only said: the shard count changes the packing."""
    import importlib

    pack_mod = importlib.import_module("contextlab.data.packing.pack")  # the module, not the function

    monkeypatch.setattr(pack_mod, "LARGE_SHARD", 20)
    store = make_store(tmp_path, mixed_corpus(60))
    pack(store, tmp_path / "one", PackConfig(method="splice", context=63), progress=False)
    err = capsys.readouterr().err
    assert "note: 1 shard of up to 60 documents: retrieval costs more per document" in err
    assert "--shards 1 packs shards of about 15,000" in err
    pack(store, tmp_path / "four", PackConfig(method="splice", context=63, shards=4), progress=False)
    pack(store, tmp_path / "ep", PackConfig(method="ep", context=63), progress=False)
    pack(store, tmp_path / "repo", PackConfig(method="splice", retriever="repo", context=63), progress=False)
    assert "retrieval costs more" not in capsys.readouterr().err


def test_a_share_short_of_all_or_none_is_never_said_as_all_or_none():
    """A user's note said "100% of the tokens are in documents that fill a sequence alone" of 0.9982."""
    from contextlab.data.packing.stats import whole_percent

    assert [whole_percent(x) for x in (0.9982, 1.0, 0.003, 0.0, 0.5, 0.861)] == [
        "99.8%",
        "100%",
        "0.3%",
        "0%",
        "50%",
        "86%",
    ]
