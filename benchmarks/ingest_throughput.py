"""Ingest throughput and memory: ``contextlab data ingest`` vs plain ``tokenizers``.

Side by side on the same text and the same cores:

1. plain HF ``tokenizers`` ``encode_batch`` (and ``encode_batch_fast``; the faster is the
   reference) with the GPT-2 vocabulary over the Gutenberg
   books held in memory (the reference: pure tokenization, no reading, no writing);
2. ``contextlab data ingest --tokenizer gpt2:DIR`` over the same books (reads the files,
   strips the Project Gutenberg header/footer, tokenizes, writes and fsyncs a store);
3. ``contextlab data ingest --tokenizer hf:tokenizer.json`` with the very same HF
   tokenizer as (1), which isolates the pipeline's own overhead.

Each ingest runs in a fresh process (``python -m contextlab``) so its peak RSS can be read
from the OS; peak RSS is compared between a 10 MB subset and the full 67 MB of books.
Throughput is the median of ``--repeats`` runs. Prints a table, then one JSON line:
``{"bench": "ingest_throughput", "ratio_vs_tokenizers": ..., "rss_ratio_full_vs_10mb": ...}``.

    python benchmarks/ingest_throughput.py [--repeats 3] [--shared ../shared]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def hf_gpt2_tokenizer(gpt2_dir: Path, out: Path):
    """The GPT-2 vocabulary as a plain HF ``tokenizers`` object (and its tokenizer.json)."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    encoder = json.loads((gpt2_dir / "encoder.json").read_text())
    merges = [
        tuple(line.split())
        for line in (gpt2_dir / "vocab.bpe").read_text(encoding="utf-8").splitlines()[1:]
        if line.strip()
    ]
    tok = Tokenizer(BPE(vocab=encoder, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(out))
    return tok


def run_ingest(source: Path, out: Path, spec: str) -> tuple[float, int, float]:
    """(seconds, peak RSS in bytes, MB read) of one ingest in a fresh process."""
    if out.exists():
        shutil.rmtree(out)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child would report its parent's peak
    code = (
        "import sys, time, json\n"
        "from contextlab.data.ingest import ingest, IngestConfig\n"
        "t = time.perf_counter()\n"
        f"r = ingest({str(source)!r}, {str(out)!r}, IngestConfig(tokenizer={spec!r}), progress=False)\n"
        "dt = time.perf_counter() - t\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
        "print(json.dumps({'seconds': dt, 'rss': int(hwm) * 1024,"
        " 'mb': r.bytes_read / 1e6, 'tokens': r.store.n_tokens}))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    row = json.loads(res.stdout.strip().splitlines()[-1])
    return row["seconds"], row["rss"], row["mb"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared"))
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    data = Path(args.shared) / "data"
    books = data / "gutenberg_books" / "texts"
    gpt2_dir = data / "gpt2_tokenizer"
    work = Path(tempfile.mkdtemp(prefix="ingest-bench-"))
    try:
        hf_tok = hf_gpt2_tokenizer(gpt2_dir, work / "gpt2-tokenizer.json")
        from contextlab.data.sources import open_source

        texts = [d.text for d in open_source(books)]
        mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
        refs = {}
        for name in ("encode_batch", "encode_batch_fast"):
            fn = getattr(hf_tok, name, None)
            if fn is None:
                continue
            rates = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                out = fn(texts, add_special_tokens=False)
                rates.append(mb / (time.perf_counter() - t))
                del out  # HF Encoding objects are large: do not hold 18M of them
            refs[name] = statistics.median(rates)
        ref_name = max(refs, key=refs.get)  # compare against the faster of the two
        ref_mbs = refs[ref_name]

        # a ~10 MB subset of the same books, for the memory comparison
        subset = work / "subset"
        subset.mkdir()
        size = 0
        for f in sorted(books.iterdir()):
            if size >= 10e6:
                break
            shutil.copy(f, subset / f.name)
            size += f.stat().st_size

        rows = {}
        for label, spec in (
            ("gpt2 (tiktoken engine)", f"gpt2:{gpt2_dir}"),
            ("hf tokenizer.json (same engine as reference)", f"hf:{work / 'gpt2-tokenizer.json'}"),
        ):
            runs = [run_ingest(books, work / "store", spec) for _ in range(args.repeats)]
            secs = statistics.median(r[0] for r in runs)
            rows[label] = {"mb_per_s": runs[0][2] / secs, "rss_mb": max(r[1] for r in runs) / 1e6}
        small = [run_ingest(subset, work / "small", f"gpt2:{gpt2_dir}") for _ in range(args.repeats)]
        rss_small = max(r[1] for r in small)
        rss_full = rows["gpt2 (tiktoken engine)"]["rss_mb"] * 1e6
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"cores: {os.cpu_count()}   text: {mb:.1f} MB of Gutenberg books (stripped), repeats: {args.repeats}"
    )
    print(f"{'pipeline':<48} {'MB/s':>8} {'ratio':>7} {'peak RSS MB':>12}")
    for name, rate in refs.items():
        print(
            f"{'tokenizers ' + name + ' (GPT-2, in memory)':<48} {rate:>8.2f} "
            f"{rate / ref_mbs:>7.2f} {'-':>12}"
        )
    for label, row in rows.items():
        print(
            f"{'contextlab ingest, ' + label:<48} {row['mb_per_s']:>8.2f} {row['mb_per_s'] / ref_mbs:>7.2f} "
            f"{row['rss_mb']:>12.0f}"
        )
    print(
        f"peak RSS: 10 MB subset {rss_small / 1e6:.0f} MB, full books {rss_full / 1e6:.0f} MB "
        f"(ratio {rss_full / rss_small:.3f})"
    )
    result = {
        "bench": "ingest_throughput",
        "ratio_vs_tokenizers": round(rows["gpt2 (tiktoken engine)"]["mb_per_s"] / ref_mbs, 3),
        "ratio_same_engine": round(
            rows["hf tokenizer.json (same engine as reference)"]["mb_per_s"] / ref_mbs, 3
        ),
        "ingest_mb_per_s": round(rows["gpt2 (tiktoken engine)"]["mb_per_s"], 2),
        "tokenizers_mb_per_s": round(ref_mbs, 2),
        "tokenizers_reference": ref_name,
        "rss_ratio_full_vs_10mb": round(rss_full / rss_small, 3),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
