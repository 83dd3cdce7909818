"""Peak memory of ``contextlab data export`` on two packed stores of different sizes (issue 19, part 2).

Builds (once; kept in ``--work`` and reused) SPLICE-BM25 packed stores of Gutenberg chapters
(``benchmarks/make_chapters.py``) of the first N books for each N of ``--books`` (10, 40, 127),
GPT-2 tokens, ``--context`` 2047; then exports each to Parquet and to Megatron in a fresh
subprocess and reads that process's peak RSS from ``os.wait4`` (and, sampled from /proc, the
peaks of its anonymous and file-backed parts). A baseline process that only imports the exporter
and opens the largest packed store gives the fixed cost. Flat memory means the peaks match while
the rows grow. ``mb_per_s`` is the MB written (files on disk) per second of export time by the
largest Parquet export. The last line printed is one JSON object ("small" = the fewest books,
"large" = the most).

    python benchmarks/export_memory.py --work /tmp/export_bench [--books 10 40 127]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
BASELINE = (
    "import sys; from contextlab.data.export import export; import pyarrow.parquet; "
    "from contextlab.data.packing.packed_store import PackedStore; "
    "PackedStore(sys.argv[1]).sequence_lengths()"
)


def _status_kb(pid: int) -> dict[str, int]:
    """RssAnon and RssFile of a live process, in KiB ({} once it has exited)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    fields = (line.split(":") for line in text.splitlines())
    return {k: int(v.split()[0]) for k, v in fields if k in ("RssAnon", "RssFile")}


def run(cmd: list[str]) -> dict:
    """One process running ``cmd``: its peak RSS (``ru_maxrss`` from ``os.wait4``, MB), the peaks of
    the anonymous and the file-backed parts of its RSS sampled every 10 ms from /proc (MB; the
    memory-mapped token store is file-backed), its seconds and its stdout."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, text=True)
    anon = file = 0
    while True:
        kb = _status_kb(proc.pid)
        anon, file = max(anon, kb.get("RssAnon", 0)), max(file, kb.get("RssFile", 0))
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.01)
    seconds = time.perf_counter() - t0
    out = proc.stdout.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    proc.returncode = 0
    # ru_maxrss is in KiB on Linux
    return {
        "rss": usage.ru_maxrss / 1024,
        "anon": anon / 1024,
        "file": file / 1024,
        "seconds": seconds,
        "stdout": out,
    }


def contextlab(*args: str) -> dict:
    return run([sys.executable, "-m", "contextlab", *args, "--no-progress"])


def packed_store(work: Path, books: int, args: argparse.Namespace) -> Path:
    """A SPLICE-BM25 packed store of the first ``books`` books' chapters (built once)."""
    chapters, src = work / "chapters", work / f"books_{books}"
    store, packed = work / f"store_{books}", work / f"packed_{books}"
    if (packed / "meta.json").exists():
        return packed
    if not chapters.exists():
        run([sys.executable, str(ROOT / "benchmarks/make_chapters.py"), "--out", str(chapters)])
    if not src.exists():
        for book in sorted(p for p in chapters.iterdir() if p.is_dir())[:books]:
            shutil.copytree(book, src / book.name)
    if not (store / "meta.json").exists():
        contextlab("data", "ingest", str(src), "--tokenizer", args.tokenizer, "--out", str(store))
    pack = ["--method", "splice", "--retriever", "bm25", "--context", str(args.context)]
    pack += ["--val-fraction", "0"]  # every document packed and exported, as when its figures were taken
    contextlab("data", "pack", str(store), *pack, "--out", str(packed))
    return packed


def measure(packed: Path, out: Path, fmt: str, batch_rows: int) -> dict:
    """Export ``packed`` in a fresh process; the rate uses the export's own time (the summary line's
    seconds, without the interpreter start and imports)."""
    res = contextlab(
        "data", "export", str(packed), "--out", str(out), "--format", fmt, "--batch-rows", str(batch_rows),
        "--overwrite",
    )  # fmt: skip
    record = json.loads((out / "export.json").read_text())
    res["mb"] = sum(f.stat().st_size for f in out.iterdir()) / 1e6
    res["export_seconds"] = float(re.findall(r"([0-9.,]+) s$", res["stdout"].strip())[-1].replace(",", ""))
    res["rows"] = record["splits"]["train"]["rows"]
    print(
        f"{fmt:<8} {packed.name:<11} rows {res['rows']:>6,}  peak RSS {res['rss']:6.1f} MB "
        f"(anonymous {res['anon']:6.1f}, file-backed {res['file']:6.1f})  "
        f"{res['mb']:6.1f} MB in {res['export_seconds']:5.1f} s"
    )
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="folder for the corpora, stores and exports (reused)")
    ap.add_argument(
        "--books", type=int, nargs="+", default=[10, 40, 127], help="books per packed store, smallest first"
    )
    ap.add_argument("--batch-rows", type=int, default=256, help="the export's --batch-rows")
    ap.add_argument("--context", type=int, default=2047)
    ap.add_argument("--tokenizer", default="gpt2:/work/shared/data/gpt2_tokenizer")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    stores = [packed_store(work, n, args) for n in args.books]
    base = run([sys.executable, "-c", BASELINE, str(stores[-1])])
    print(f"baseline (imports, open the largest packed store): peak RSS {base['rss']:.1f} MB")
    res = {
        (fmt, k): measure(p, work / f"out_{p.name}_{fmt}", fmt, args.batch_rows)
        for fmt in ("parquet", "megatron")
        for k, p in enumerate(stores)
    }
    last = len(stores) - 1
    summary = {"baseline_rss_mb": round(base["rss"], 1), "books": args.books}
    for fmt, key in (("parquet", ""), ("megatron", "megatron_")):
        small, large = res[fmt, 0], res[fmt, last]
        summary |= {
            f"{key}peak_rss_mb_small": round(small["rss"], 1),
            f"{key}peak_rss_mb_large": round(large["rss"], 1),
            f"{key}peak_rss_mb_all": [round(res[fmt, k]["rss"], 1) for k in range(len(stores))],
            f"{key}peak_anon_mb_all": [round(res[fmt, k]["anon"], 1) for k in range(len(stores))],
            f"{key}mb_per_s": round(large["mb"] / large["export_seconds"], 2),
        }
    summary |= {"rows_small": res["parquet", 0]["rows"], "rows_large": res["parquet", last]["rows"]}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
