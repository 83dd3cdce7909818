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


def test_last_token_loss_runs_and_its_two_ways_agree():
    out = last_json(
        [
            "benchmarks/last_token_loss.py",
            *("--vocab", "300", "--length", "16", "--rows", "2", "--repeats", "1", "--threads", "1"),
        ]
    )
    assert out["bench"] == "last_token_loss" and out["hf_speedup"] > 0 and out["contextlab_speedup"] > 0
    assert out["hf_max_abs_diff"] < 1e-4 and out["contextlab_max_abs_diff"] < 1e-4


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


def test_gpu_learning_runs_its_variants_and_names_the_setting_to_train_with(tmp_path):
    """The GPU learning check at a toy size on the CPU: each variant trains in its own process with its
    one change applied, and the verdict follows the rule its docstring states."""
    from contextlab.data.ingest import IngestConfig, ingest
    from tests.conftest import shakespeare

    (tmp_path / "corpus").mkdir()
    for i in range(4):
        (tmp_path / "corpus" / f"p{i}.txt").write_text(shakespeare(40_000)[i * 10_000 : (i + 1) * 10_000])
    ingest(tmp_path / "corpus", tmp_path / "store", IngestConfig(tokenizer="byte"), progress=False)
    out = last_json(
        [
            "benchmarks/gpu_learning.py",
            *("--store", str(tmp_path / "store"), "--out", str(tmp_path / "check")),
            *("--variants", "eager,eager_unfused_adamw,eager_doc_mask", "--device", "cpu"),
            *("--size", "tiny-2x128"),
            *("--context", "32", "--rows", "4", "--micro", "2", "--steps", "8", "--warmup", "2"),
            *("--val-tokens", "256", "--threads", "1", "--parallel", "2", "--learns-below", "100"),
        ]
    )
    assert out["bench"] == "gpu_learning"
    assert set(out["variants"]) == {"eager", "eager_unfused_adamw", "eager_doc_mask"}
    assert all(v["learns"] and v["loss_last_quarter"] > 0 for v in out["variants"].values())
    assert out["train_with"] == "eager"  # "compiled" was not run, and eager learns under this threshold
    assert "patch applied: unfused_adamw" in (tmp_path / "check" / "eager_unfused_adamw.log").read_text()
    assert "patch applied: doc_mask" in (tmp_path / "check" / "eager_doc_mask.log").read_text()
    resolved = (tmp_path / "check" / "runs" / "eager_doc_mask" / "config.toml").read_text()
    assert "doc_mask = true" in resolved and "doc_mask = false" not in resolved  # the patch restores it
    saved = json.loads((tmp_path / "check" / "learning.json").read_text())
    assert len(saved["curves"]["eager"]) >= 2


def test_profile_quick_runs_and_reports_its_seconds():
    out = last_json(["benchmarks/profile_quick.py", "--models", "gpt", "--context", "64", "--chars", "8000"])
    assert (
        out["bench"] == "profile_quick" and out["gpt"]["seconds"] > 0 and "contextwise" in out["gpt"]["steps"]
    )


def test_retrieval_scoring_runs_and_both_sides_agree():
    out = last_json(
        [
            "benchmarks/retrieval_scoring.py",
            *("--size", "tiny-2x128", "--vocab", "300", "--prompt", "32", "--prompts", "3"),
            *("--new", "4", "--batch-size", "2", "--repeats", "1", "--threads", "1"),
        ]
    )
    assert out["bench"] == "retrieval_scoring" and out["same_winners"] and out["gen_identical"]
    assert out["max_abs_diff_contextlab"] < 1e-3 and out["max_abs_diff_hf"] < 1e-3
    assert out["speedup_contextlab"] > 0 and out["speedup_hf"] > 0
