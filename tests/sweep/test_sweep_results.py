"""results.csv is rewritten after every run; a run's files are read again only when they changed."""

from __future__ import annotations

import csv
import dataclasses
import json

from contextlab.config import dumps_toml, from_dict
from contextlab.sweep import results
from contextlab.sweep.spec import load_sweep
from contextlab.train.config import RunConfig
from tests.sweep.conftest import SWEEP


def _runs(tmp_path, n: int):
    f = tmp_path / "s.toml"
    f.write_text(
        SWEEP.format(out=tmp_path / "out", store=tmp_path / "st", lr="", contexts=list(range(8, 8 + n)))
    )
    return load_sweep(f)


def _metrics(run, losses):
    lines = [json.dumps({"step": i + 1, "tokens": 128 * (i + 1), "loss": x}) for i, x in enumerate(losses)]
    (run.dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def test_each_rewrite_reads_only_the_runs_whose_files_changed(tmp_path, monkeypatch):
    section, runs = _runs(tmp_path, 3)
    for run in runs:
        run.dir.mkdir(parents=True)
        _metrics(run, [3.0, 2.5])
    read = []
    summary = results.run_summary
    monkeypatch.setattr(results, "run_summary", lambda d: read.append(d.name) or summary(d))

    def write():
        read.clear()
        with open(results.write_results(section, runs)) as f:
            return {row["run"]: row for row in csv.DictReader(f)}

    rows = write()
    assert sorted(read) == sorted(r.name for r in runs) and rows[runs[1].name]["train_loss"] == "2.5"
    assert write() == rows and read == []  # nothing changed: nothing read again, the same file
    _metrics(runs[1], [3.0, 2.5, 2.25])  # one run logged a step
    rows = write()
    assert read == [runs[1].name] and rows[runs[1].name]["train_loss"] == "2.25"
    (runs[2].dir / "eval").mkdir()
    (runs[2].dir / "eval" / "ppl.json").write_text(json.dumps({"ppl": 11.0}))
    rows = write()
    assert read == [runs[2].name] and rows[runs[2].name]["ppl.ppl"] == "11.0"
    (runs[2].dir / "eval" / "ppl.json").write_text(json.dumps({"ppl": 12.0}))  # same size, new value
    assert write()[runs[2].name]["ppl.ppl"] == "12.0"
    (runs[0].dir / "eval").mkdir()
    (runs[0].dir / "eval" / "kv.json").write_text(json.dumps({"acc": 0.5}))
    (runs[0].dir / "eval" / "kv.json").unlink()  # an evaluation removed again
    assert "kv.acc" not in write()[runs[0].name]


def test_a_changed_config_is_compared_again(tmp_path):
    """The stale check follows the sweep file's config, not only the run's files."""
    section, runs = _runs(tmp_path, 1)
    run = runs[0]
    run.dir.mkdir(parents=True)
    _metrics(run, [3.0])

    (run.dir / "config.toml").write_text(dumps_toml(dataclasses.asdict(from_dict(RunConfig, run.config))))
    results.write_results(section, runs)
    with open(results.write_results(section, runs)) as f:
        assert next(csv.DictReader(f))["status"] == "pending"
    run.config["optim"]["lr"] = 0.125
    with open(results.write_results(section, runs)) as f:
        row = next(csv.DictReader(f))
    assert row["status"] == "stale" and "optim.lr" in row["error"]
