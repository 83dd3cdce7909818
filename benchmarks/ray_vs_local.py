"""Ingest and pack on a local Ray instance vs local processes: wall time and byte-identical output.

    python benchmarks/make_chapters.py --books BOOKS20 --out /tmp/raybench/chapters
    python benchmarks/ray_vs_local.py --source /tmp/raybench/chapters \
        --tokenizer gpt2:../shared/data/gpt2_tokenizer --work /tmp/raybench --cpus 2 --repeats 3

Each command runs as a user runs it, ``python -m contextlab data ...`` in a fresh process, so
the Ray figures include starting a local Ray instance (``--ray --ray-cpus N``) and its worker
processes. Ingest: the one-process ingest vs ``--ray`` (parts as Ray tasks), once each. Pack
(SPLICE-BM25): ``--workers N`` vs ``--ray --ray-cpus N``, alternated ``--repeats`` times
(medians). Every output is compared file by file (meta.json without its timings and creation
time). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
sys.path.insert(0, SRC)

from contextlab.io import tree_digest  # noqa: E402  (this checkout's package, installed or not)


def timed(args: list[str], out: Path) -> float:
    """Run ``contextlab ARGS --out OUT`` in a fresh process (OUT removed first): wall seconds."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "contextlab", *args, "--out", str(out), "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - t0
    if res.returncode:
        sys.exit(f"failed: contextlab {' '.join(args)}\n{res.stderr[-3000:]}")
    print(res.stdout.strip().splitlines()[-1], file=sys.stderr)
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, help="a corpus folder (e.g. make_chapters.py output)")
    ap.add_argument("--tokenizer", default="byte", help="ingest --tokenizer")
    ap.add_argument("--work", required=True, help="a scratch folder for the stores")
    ap.add_argument("--cpus", type=int, default=2, help="--workers N and --ray-cpus N")
    ap.add_argument("--shards", type=int, default=8, help="pack --shards")
    ap.add_argument("--parts", type=int, default=8, help="ingest --ray-parts")
    ap.add_argument("--context", type=int, default=2047, help="pack --context")
    ap.add_argument("--repeats", type=int, default=3, help="alternated pack runs of each kind")
    args = ap.parse_args(argv)
    work, n = Path(args.work), str(args.cpus)
    ingest = ["data", "ingest", args.source, "--tokenizer", args.tokenizer]
    ingest_local = timed(ingest, work / "store_local")
    ingest_ray = timed(
        [*ingest, "--ray", "--ray-cpus", n, "--ray-parts", str(args.parts)], work / "store_ray"
    )
    store = str(work / "store_local")
    pack = ["data", "pack", store, "--method", "splice", "--retriever", "bm25", "--val-fraction", "0"]
    pack += ["--context", str(args.context), "--shards", str(args.shards)]
    local, ray = [], []
    for _ in range(args.repeats):
        local.append(timed([*pack, "--workers", n], work / "packed_local"))
        ray.append(timed([*pack, "--ray", "--ray-cpus", n], work / "packed_ray"))
    meta = json.loads((work / "store_local" / "meta.json").read_text())
    result = {
        "bench": "ray_vs_local",
        "docs": meta["n_docs"],
        "tokens": meta["n_tokens"],
        "cpus": args.cpus,
        "shards": args.shards,
        "ingest_local_s": round(ingest_local, 2),
        "ingest_ray_s": round(ingest_ray, 2),
        "ingest_identical": tree_digest(work / "store_local") == tree_digest(work / "store_ray"),
        "pack_local_s": [round(s, 2) for s in local],
        "pack_ray_s": [round(s, 2) for s in ray],
        "pack_local_median_s": round(statistics.median(local), 2),
        "pack_ray_median_s": round(statistics.median(ray), 2),
        "pack_ray_over_local": round(statistics.median(ray) / statistics.median(local), 3),
        "pack_identical": tree_digest(work / "packed_local") == tree_digest(work / "packed_ray"),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
