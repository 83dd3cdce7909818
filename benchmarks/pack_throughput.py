"""SPLICE-BM25 packing throughput (bm25s vs rank_bm25 as the retriever) and burstiness (Zipf) SPLICE vs EP.

    python benchmarks/make_chapters.py --out /tmp/chapters
    contextlab data ingest /tmp/chapters --tokenizer gpt2:../shared/data/gpt2_tokenizer \
        --out /tmp/store_chapters
    python benchmarks/pack_throughput.py --store /tmp/store_chapters \
        [--extra /tmp/store_stdlib /tmp/store_django]

1. End to end: ``pack(method=splice, retriever=bm25, k=1)`` over the whole store (decode,
   bm25s tokenize + index, every query, write), in a fresh process: documents/s and peak
   RSS. 2. Side by side, the same SPLICE loop (same tokenization, same query = distinct
   terms, same exclusion of used documents) with ``bm25s`` (our retriever) and with
   ``rank_bm25.BM25Okapi`` as the retriever, for a fixed number of SPLICE steps, alternated
   and repeated (medians), since rank_bm25 scores every document in Python (seconds per
   query at 10K documents). rank_bm25's end-to-end rate is extrapolated as its index time
   + n_docs / its step rate. 3. Zipf coefficient (seed Table 9) and domains/directories per
   sequence of SPLICE vs EP on each store. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from contextlab.data.packing import PackConfig, PackedStore, pack, pack_stats
from contextlab.data.packing.retrievers import BM25Retriever, Retriever, bm25_tokenize, decode_texts
from contextlab.data.packing.sequencer import Sequencer
from contextlab.data.packing.shards import domain_codes
from contextlab.data.packing.splice import pack_splice
from contextlab.data.store import TokenStore


class RankBM25Retriever(Retriever):
    """The same contract as BM25Retriever, on rank_bm25 (scores every document per query)."""

    def __init__(self, term_lists: list[list[str]]):
        from rank_bm25 import BM25Okapi

        t0 = time.perf_counter()
        self.model = BM25Okapi([t if t else [""] for t in term_lists])
        self.queries = [sorted(set(t)) for t in term_lists]
        self.used = np.zeros(len(term_lists), dtype=bool)
        self.build_seconds = time.perf_counter() - t0

    def remove(self, i: int) -> None:
        self.used[i] = True

    def query(self, d: int, k: int) -> list[tuple[int, float]]:
        s = np.asarray(self.model.get_scores(self.queries[d]), dtype=np.float64)
        s[self.used] = 0.0
        top = np.argsort(-s, kind="stable")[:k]
        return [(int(j), float(s[j])) for j in top if s[j] > 0]


class _Stop(Exception):
    pass


def splice_steps(store: TokenStore, retriever, steps: int, seed: int, context: int) -> tuple[int, float]:
    """Run SPLICE k=1 until ``steps`` documents are placed; (documents placed, seconds)."""
    n = store.n_docs
    seq = Sequencer(
        store.lengths(),
        domain_codes(store, 0, n),
        row_len=context + 1,  # the sequencer counts the inputs and the shifted last target
        separator=True,
        remainder="next",
        order="identity",
        rng=np.random.default_rng([seed, 0]),
    )
    placed = [0]

    def counting(i: int) -> None:
        placed[0] += 1
        if placed[0] >= steps:
            raise _Stop

    seq.on_take.append(counting)
    cfg = PackConfig(val_fraction=0, method="splice", k=1, context=context)
    t0 = time.perf_counter()
    try:
        pack_splice(seq, retriever, cfg)
    except _Stop:
        pass
    return placed[0], time.perf_counter() - t0


def _end_to_end(store: str, out: str, context: int, q) -> None:
    t0 = time.perf_counter()
    rep = pack(
        store,
        out,
        PackConfig(val_fraction=0, method="splice", retriever="bm25", k=1, context=context),
        progress=False,
        overwrite=True,
    )
    q.put(
        (
            time.perf_counter() - t0,
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            rep.packed.meta["index_bytes_max"],
        )
    )


def end_to_end(store: str, out: str, context: int) -> tuple[float, int, int]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_end_to_end, args=(store, out, context, q))
    p.start()
    res = q.get()
    p.join()
    return res


def compare_stats(
    store_path: str, work: Path, context: int, max_seq: int, splice_out: str | None = None
) -> dict:
    store = TokenStore(store_path)
    out = {}
    runs = [
        ("ep", PackConfig(val_fraction=0, method="ep", context=context)),
        ("splice_bm25", PackConfig(val_fraction=0, method="splice", retriever="bm25", context=context)),
    ]
    if any("/" in (m.get("path") or "") for m in store.docs_meta()[:50]):
        runs.append(
            ("splice_repo", PackConfig(val_fraction=0, method="splice", retriever="repo", context=context))
        )
    for name, cfg in runs:
        if name == "splice_bm25" and splice_out:
            packed = PackedStore(splice_out)
        else:
            packed = pack(
                store, work / f"{Path(store_path).name}_{name}", cfg, progress=False, overwrite=True
            ).packed
        s = pack_stats(packed, max_sequences=max_seq)
        out[name] = {
            "zipf": s["zipf"]["mean"],
            "zipf_std": s["zipf"]["std"],
            "docs_per_seq": s["docs_per_sequence"]["mean"],
            "domains_per_seq": s["domains_per_sequence"],
            "dirs_per_seq": s["directories_per_sequence"],
            "mean_sim": s["mean_neighbour_similarity"],
            "frac_ge2_related": s["frac_sequences_ge2_related"],
        }
        print(
            f"  {Path(store_path).name:<24} {name:<12} "
            f"zipf {s['zipf']['mean']:.3f} +- {s['zipf']['std']:.3f}  "
            f"docs/seq {s['docs_per_sequence']['mean']:.2f}  domains/seq {s['domains_per_sequence']:.2f}  "
            f"dirs/seq {s['directories_per_sequence']:.2f}  "
            f">=2 related {100 * s['frac_sequences_ge2_related']:.0f}%",
            flush=True,
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, help="the chapters token store")
    ap.add_argument("--extra", nargs="*", default=[], help="more stores for the Zipf / span comparison")
    ap.add_argument("--context", type=int, default=2047, help="the training context the data is packed for")
    ap.add_argument("--steps", type=int, default=400, help="SPLICE steps per bm25s side-by-side repeat")
    ap.add_argument("--rank-steps", type=int, default=8, help="SPLICE steps per rank_bm25 repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-seq", type=int, default=1000, help="sequences sampled for the Zipf coefficient")
    ap.add_argument("--work", default=None, help="where packed stores go (default: a temporary directory)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="pack_bench_"))
    work.mkdir(parents=True, exist_ok=True)
    store = TokenStore(args.store)
    print(
        f"store {store.path}: {store.n_docs:,} documents, {store.n_tokens:,} tokens "
        f"({store.tokenizer_spec['name']})"
    )

    splice_out = str(work / "chapters_splice_bm25")
    secs, peak, index_bytes = end_to_end(str(store.path), splice_out, args.context)
    e2e = store.n_docs / secs
    print(
        f"end to end SPLICE-BM25 k=1: {secs:,.1f} s, {e2e:,.1f} docs/s, peak RSS {peak / 2**20:,.0f} MiB, "
        f"index {index_bytes / 2**20:,.1f} MiB",
        flush=True,
    )

    t0 = time.perf_counter()
    texts = decode_texts(store, np.arange(store.n_docs))
    ids, vocab = bm25_tokenize(texts)
    inv = {v: k for k, v in vocab.items()}
    term_lists = [[inv[t] for t in doc] for doc in ids]
    del texts
    print(f"decoded + tokenized for the side-by-side run in {time.perf_counter() - t0:,.1f} s", flush=True)
    t0 = time.perf_counter()
    BM25Retriever([" ".join(t) for t in term_lists])
    ours_build = time.perf_counter() - t0
    rank = RankBM25Retriever(term_lists)
    print(f"index: bm25s {ours_build:,.1f} s, rank_bm25 {rank.build_seconds:,.1f} s", flush=True)
    rates = {"bm25s": [], "rank_bm25": []}
    for rep in range(args.repeats):
        for name in ("bm25s", "rank_bm25"):
            # fresh exclusion state per repeat; same seed = the same SPLICE steps for both retrievers
            r = (
                BM25Retriever([" ".join(t) for t in term_lists])
                if name == "bm25s"
                else RankBM25Retriever(term_lists)
            )
            n, s = splice_steps(
                store, r, args.steps if name == "bm25s" else args.rank_steps, rep, args.context
            )
            rates[name].append(n / s)
            print(f"  repeat {rep}: {name:<9} {n} docs in {s:,.2f} s = {n / s:,.2f} docs/s", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    step_ratio = med["bm25s"] / med["rank_bm25"]
    rank_e2e = store.n_docs / (rank.build_seconds + store.n_docs / med["rank_bm25"])
    ratio = e2e / rank_e2e
    print(
        f"SPLICE steps: bm25s {med['bm25s']:,.1f} docs/s vs rank_bm25 {med['rank_bm25']:,.3f} docs/s "
        f"= {step_ratio:,.0f}x; end to end {e2e:,.1f} vs {rank_e2e:,.3f} docs/s (extrapolated) "
        f"= {ratio:,.0f}x"
    )

    print("Zipf (lower = burstier) and spans, SPLICE vs EP:")
    results = {
        Path(args.store).name: compare_stats(str(store.path), work, args.context, args.max_seq, splice_out)
    }
    for extra in args.extra:
        results[Path(extra).name] = compare_stats(extra, work, args.context, args.max_seq)
    chap = results[Path(args.store).name]
    print(
        json.dumps(
            {"details": results, "step_rates": med, "peak_rss_bytes": peak, "index_bytes": index_bytes}
        )
    )
    print(
        json.dumps(
            {
                "bench": "pack_throughput",
                "splice_bm25_docs_per_s": round(e2e, 2),
                "ratio_vs_rank_bm25": round(ratio, 1),
                "zipf_splice": round(chap["splice_bm25"]["zipf"], 4),
                "zipf_ep": round(chap["ep"]["zipf"], 4),
            }
        )
    )


if __name__ == "__main__":
    main()
