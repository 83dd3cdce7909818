"""Ingest throughput and peak memory from 10 MB to 5 GB of text: is memory flat in corpus size?

For each size S (``--sizes-mb``): sample S MB of real documents (``corpus_sampler.py``:
book paragraphs and standard-library functions, seeded) into one JSONL file, then run
``contextlab.data.ingest`` with GPT-2 tokens over it in a fresh process
(``ingest_throughput.run_ingest``: peak RSS = VmHWM). Each size is one resumable step: its
figures go to ``WORK/result_ingest_S.json`` and a re-run skips it; the sampled corpus is
reused. The JSONL is one file, so this measures one ingest process reading one stream (the
store is written and fsynced in ``batch_mb`` batches).

The last line is one JSON object: MB/s and peak RSS per size, and ``rss_ratio_max_vs_min``
(peak RSS at the largest size / at the smallest; 1.0 = flat).

    python benchmarks/ingest_scaling.py --work /tmp/scale --sizes-mb 10,1000
    python benchmarks/ingest_scaling.py --work /tmp/scale --sizes-mb 5000      # ~5 GB, on its own
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_sampler import add_source_args, default_pools, iter_docs, write_corpus
from ingest_throughput import run_ingest

ROOT = Path(__file__).resolve().parents[1]
GPT2 = ROOT.parent / "shared" / "data" / "gpt2_tokenizer"


def run_size(args, mb: float) -> dict:
    """Sample (once) and ingest ``mb`` MB of text; the figures, cached in result_ingest_MB.json."""
    from contextlab.io import atomic_write_json

    work, seed, tokenizer = Path(args.work), args.seed, args.tokenizer
    tag = f"{mb:g}"
    result_file = work / f"result_ingest_{tag}.json"
    settings = {"mb": mb, "seed": seed, "tokenizer": tokenizer}
    if result_file.is_file() and json.loads(result_file.read_text()).get("settings") == settings:
        print(f"{tag} MB: done before ({result_file})", flush=True)
        return json.loads(result_file.read_text())
    corpus, info_file = work / f"text_{tag}mb.jsonl", work / f"text_{tag}mb.json"
    if not info_file.is_file():
        pools = default_pools(args.books, args.code)
        info = write_corpus(corpus, iter_docs(pools, seed), n_bytes=int(mb * 1e6), progress=args.progress)
        info_file.write_text(json.dumps(info))
    store = work / f"ingest_store_{tag}"
    seconds, rss, mb_read = run_ingest(corpus, store, tokenizer)
    if not args.keep_stores:
        shutil.rmtree(store, ignore_errors=True)
    out = {
        "settings": settings,
        "corpus": json.loads(info_file.read_text()),
        "seconds": seconds,
        "mb_read": mb_read,
        "mb_per_s": mb_read / seconds,
        "peak_rss_mb": rss / 1e6,
    }
    atomic_write_json(result_file, out)
    print(
        f"{tag:>6} MB: {seconds:,.1f} s, {out['mb_per_s']:,.2f} MB/s, peak RSS {out['peak_rss_mb']:,.0f} MB",
        flush=True,
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/scale", help="sampled corpora, stores and result files")
    ap.add_argument("--sizes-mb", default="10,1000,5000", help="MB of text per step, comma-separated")
    ap.add_argument("--seed", type=int, default=0, help="corpus sampling seed")
    ap.add_argument("--tokenizer", default=f"gpt2:{GPT2}", help="tokenizer spec for the ingest")
    ap.add_argument("--keep-stores", action="store_true", help="keep the token stores (default: removed)")
    ap.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    add_source_args(ap)
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = {}
    for mb in sorted(float(s) for s in args.sizes_mb.split(",") if s):
        r = run_size(args, mb)
        rows[f"{mb:g}"] = {k: round(r[k], 2) for k in ("mb_read", "seconds", "mb_per_s", "peak_rss_mb")}
    rss = [r["peak_rss_mb"] for r in rows.values()]
    print(
        json.dumps(
            {
                "bench": "ingest_scaling",
                "sizes": rows,
                "rss_ratio_max_vs_min": round(rss[-1] / rss[0], 3) if rss else None,
            }
        )
    )


if __name__ == "__main__":
    main()
