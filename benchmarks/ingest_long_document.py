"""Peak memory of ingesting one long single-line document (issue 21, item 12).

Writes a single-line text of ``--mb`` MB (random words, spaces, some non-ASCII) in a temp
dir, ingests it with ``python -m contextlab data ingest`` in a subprocess, and reads that
process's peak RSS from ``os.wait4``. Before that, on a small file (``--check-mb``), it
checks that the streamed ids equal those of the whole-document path (the text cut at the
tokenizer's cut points and encoded in one batch, as ingest did before streaming).
``--whole`` measures the old whole-document path instead (``--long-doc-mb`` above the file).
The last line printed is one JSON object: ``file_mb``, ``peak_rss_mb``, ``rss_over_file``,
``mb_per_s``.

    python benchmarks/ingest_long_document.py [--mb 1024] [--tokenizer gpt2:../shared/data/gpt2_tokenizer]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["context", "window", "token", "über", "naïve", "—", "data", "of", "the", "1024", "  ", "x"]


def write_single_line(path: Path, mb: float, seed: int = 0) -> None:
    """About ``mb`` MB of words on one line, written block by block (16 distinct 1 MB blocks)."""
    rng = np.random.default_rng(seed)
    blocks = [" ".join(rng.choice(WORDS, size=170_000)) + " " for _ in range(16)]
    target = int(mb * 1e6)
    with open(path, "w", encoding="utf-8") as f:
        written, i = 0, 0
        while written < target:
            data = blocks[i % 16][: target - written]
            f.write(data)
            written += len(data.encode())
            i += 1


def run_ingest(src: Path, out: Path, tokenizer: str, long_doc_mb: float) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of one ``contextlab data ingest`` process."""
    cmd = [sys.executable, "-m", "contextlab", "data", "ingest", str(src), "--out", str(out)]
    cmd += ["--tokenizer", tokenizer, "--long-doc-mb", str(long_doc_mb), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"ingest failed: {' '.join(cmd)}")
    return usage.ru_maxrss / 1024, seconds  # ru_maxrss is in KiB on Linux


def check_same_ids(tmp: Path, tokenizer: str, mb: float) -> None:
    """Streamed ids of a small single-line file == the whole-document path's ids."""
    sys.path.insert(0, str(ROOT / "src"))
    from contextlab.data.store import TokenStore
    from contextlab.data.tokenizers import load_tokenizer

    src = tmp / "small.txt"
    write_single_line(src, mb, seed=1)
    run_ingest(src, tmp / "small_store", tokenizer, long_doc_mb=mb / 8)  # streamed in 16 MB chunks or less
    tok = load_tokenizer(tokenizer)
    whole = tok.encode_pieces([src.read_text(encoding="utf-8")], 1 << 16)[0]  # the old way
    got = TokenStore(tmp / "small_store").doc(0)
    if not np.array_equal(np.asarray(got, dtype=np.int64), whole.astype(np.int64)):
        raise SystemExit("streamed ids differ from the whole-document ids")
    print(f"check: {len(whole):,} ids of a {mb} MB single-line file equal the whole-document path's")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=1024, help="size of the single-line file in MB")
    p.add_argument("--tokenizer", default=f"gpt2:{ROOT.parent / 'shared' / 'data' / 'gpt2_tokenizer'}")
    p.add_argument("--check-mb", type=float, default=4, help="size of the file for the id check")
    p.add_argument("--whole", action="store_true", help="measure the whole-document path instead")
    p.add_argument("--tmp", help="folder for the temp dir (needs about 4x --mb of disk)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(dir=args.tmp) as d:
        tmp = Path(d)
        check_same_ids(tmp, args.tokenizer, args.check_mb)
        src = tmp / "long.txt"
        write_single_line(src, args.mb)
        file_mb = src.stat().st_size / 1e6
        long_doc_mb = file_mb * 2 if args.whole else 64.0
        rss, seconds = run_ingest(src, tmp / "store", args.tokenizer, long_doc_mb)
        result = {
            "file_mb": round(file_mb, 1),
            "peak_rss_mb": round(rss, 1),
            "rss_over_file": round(rss / file_mb, 3),
            "mb_per_s": round(file_mb / seconds, 2),
            "tokenizer": args.tokenizer.split(":")[0],
            "path": "whole" if args.whole else "streamed",
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
