"""The benchmarks run: each at a toy size, its last line one JSON object with its key figures
(timings are never asserted; this only keeps a benchmark from rotting unnoticed)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO


def last_json(args: list[str]) -> dict:
    res = subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_eval_throughput_runs_and_reports_its_ratio():
    out = last_json(
        [
            "benchmarks/eval_throughput.py",
            *("--size", "tiny-2x128", "--vocab", "300", "--context", "32", "--docs", "4"),
            *("--batch-size", "2", "--repeats", "1", "--threads", "1"),
        ]
    )
    assert out["bench"] == "eval_throughput" and out["ratio_vs_forward"] > 0 and out["context"] == 32


def test_objective_overhead_runs_and_reports_its_ratios():
    out = last_json(
        [
            "benchmarks/objective_overhead.py",
            *("--size", "tiny-2x128", "--vocab", "300", "--context", "32", "--rows", "2"),
            *("--rounds", "1", "--steps", "2", "--warmup", "1", "--threads", "1"),
        ]
    )
    assert {"contextlm_time_ratio", "contextlm_mem_ratio", "mtp_time_ratio", "mtp_mem_ratio"} <= set(out)


def test_generate_throughput_runs_and_reports_its_ratios():
    out = last_json(
        [
            "benchmarks/generate_throughput.py",
            *("--size", "tiny-2x128", "--vocab", "300", "--prompt", "16", "--new", "4"),
            *("--batches", "1,2", "--repeats", "1", "--threads", "1"),
        ]
    )
    assert out["bench"] == "generate_throughput" and out["kv_speedup_vs_recompute"] > 0
    assert out["ratio_vs_transformers"] > 0 and all(r["identical_to_recompute"] for r in out["by_batch"])
