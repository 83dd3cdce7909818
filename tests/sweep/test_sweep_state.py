"""Sweeps on the step runner: a finished run whose config changed runs again (and the sweep says
why); runs finished by a sweep from before the state file are kept."""

from __future__ import annotations

import csv
import json

import pytest

from contextlab.data.ingest import IngestConfig, ingest
from contextlab.sweep.runner import STATE_FILE, run_sweep
from contextlab.sweep.spec import load_sweep
from tests.conftest import shakespeare
from tests.sweep.conftest import TINY_MODEL_AND_DATA

SWEEP = (
    """
[sweep]
name = "tiny"
out_dir = "{out}"
"""
    + TINY_MODEL_AND_DATA
    + """
[base.optim]
warmup_steps = 1

[base.train]
tokens_per_step = 128
max_steps = 2
val_tokens = 128
peak_flops = 1e12
dtype = "fp32"
log_every = 1

[grid]
"train.seq_len" = [16]
"""
)


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory):
    src = tmp_path_factory.mktemp("src") / "s.txt"
    src.write_text(shakespeare(20_000))
    store = ingest(src, tmp_path_factory.mktemp("st") / "s", IngestConfig(), progress=False).store
    f = tmp_path_factory.mktemp("sw") / "s.toml"
    f.write_text(SWEEP.format(out=f.parent / "out", store=store.path))
    return f


def _steps(results) -> int:
    return int(next(csv.DictReader(open(results)))["steps"])


def test_a_changed_config_reruns_a_finished_run_and_an_old_sweep_is_adopted(sweep_file, capsys):
    results = run_sweep(sweep_file, progress=False)
    _, (run,) = load_sweep(sweep_file)
    state = json.loads((sweep_file.parent / "out" / STATE_FILE).read_text())
    assert set(state["steps"]) == {"seq_len-16"} and _steps(results) == 2
    metrics = run.dir / "metrics.jsonl"
    mtime = metrics.stat().st_mtime
    run_sweep(sweep_file, progress=False)  # unchanged: skipped
    assert metrics.stat().st_mtime == mtime
    capsys.readouterr()
    results = run_sweep(sweep_file, ["base.train.max_steps=3"], progress=False)
    assert "seq_len-16: its inputs changed since it ran; running it again" in capsys.readouterr().err
    assert _steps(results) == 3  # the run resumed from its checkpoint and trained one more step
    (sweep_file.parent / "out" / STATE_FILE).unlink()  # a sweep directory from before the state file
    mtime = metrics.stat().st_mtime
    run_sweep(sweep_file, ["base.train.max_steps=3"], progress=False)
    assert metrics.stat().st_mtime == mtime  # sweep_status.json says done: adopted, not run again
    assert "seq_len-16" in json.loads((sweep_file.parent / "out" / STATE_FILE).read_text())["steps"]
