"""A sweep on Ray (each run a task) records what the local runner records: the same results.csv
rows (timings aside), the same RUN/sweep_status.json fields, the same failure; a rerun on Ray
skips the finished run, as the local runner does."""

from __future__ import annotations

import csv
import json

import pytest

from contextlab.data.ingest import IngestConfig, ingest
from contextlab.sweep.ray_runner import RayRuns
from contextlab.sweep.results import status
from contextlab.sweep.runner import run_sweep
from contextlab.sweep.spec import load_sweep
from tests.conftest import shakespeare
from tests.sweep.conftest import TINY_MODEL_AND_DATA

SWEEP = (
    """
[sweep]
name = "tiny"
out_dir = "{out}"
parallel = 2
threads_per_run = 1
"""
    + TINY_MODEL_AND_DATA
    + """
[base.optim]
warmup_steps = 2

[base.train]
tokens_per_step = 256
max_steps = 3
val_tokens = 256
peak_flops = 1e12
dtype = "fp32"
log_every = 1

[grid]
"train.context" = [16, 48]  # 48: tokens_per_step is no multiple of its rows, so that run fails
"""
)
TIMINGS = ("elapsed_s", "seconds")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    src = tmp_path_factory.mktemp("src") / "s.txt"
    src.write_text(shakespeare(20_000))
    return ingest(src, tmp_path_factory.mktemp("st") / "s", IngestConfig(), progress=False).store


def rows(results, out) -> dict[str, dict]:
    """results.csv by run, timings left out and the sweep's folder written OUT."""
    return {
        r["run"]: {k: v.replace(str(out), "OUT") for k, v in r.items() if not k.endswith(TIMINGS)}
        for r in csv.DictReader(open(results))
    }


def test_a_sweep_on_ray_records_what_the_local_runner_records(cluster, store, tmp_path):
    files = {}
    for name in ("local", "ray"):
        files[name] = tmp_path / f"{name}.toml"
        files[name].write_text(SWEEP.format(out=tmp_path / name, store=store.path))
    local = rows(run_sweep(files["local"], progress=False), tmp_path / "local")
    on_ray = rows(run_sweep(files["ray"], progress=False, ray=RayRuns(address=cluster)), tmp_path / "ray")
    assert on_ray == local
    assert on_ray["context-16"]["status"] == "done" and float(on_ray["context-16"]["val_loss"]) > 0
    assert on_ray["context-48"]["status"] == "failed" and "multiple of" in on_ray["context-48"]["error"]
    _, runs = load_sweep(files["ray"])
    for run in runs:
        local_status = json.loads((tmp_path / "local" / "runs" / run.name / "sweep_status.json").read_text())
        assert {k: v for k, v in status(run).items() if k != "seconds"} == {
            k: v for k, v in local_status.items() if k != "seconds"
        }
    logs = [(run.dir / "sweep.log").stat().st_size for run in runs]
    done = (runs[0].dir / "metrics.jsonl").stat().st_mtime_ns
    # a rerun skips the finished run (and, told not to retry, the failed one): nothing starts
    run_sweep(files["ray"], ["sweep.retry_failed=false"], progress=False, ray=RayRuns(address=cluster))
    assert (runs[0].dir / "metrics.jsonl").stat().st_mtime_ns == done
    assert [(run.dir / "sweep.log").stat().st_size for run in runs] == logs
    assert status(runs[1])["status"] == "failed" and status(runs[0])["status"] == "done"
