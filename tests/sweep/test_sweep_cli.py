"""``contextlab sweep``: a sweep the compute-optimal analysis cannot read skips the analysis with
its one-line reason, while any other error in the analysis is a bug and propagates."""

from __future__ import annotations

import csv
from types import SimpleNamespace

import pytest

from contextlab.cli.sweep import cmd_sweep
from contextlab.sweep import compute_optimal, grid


def _fake_sweep(monkeypatch, tmp_path, rows: list[dict]):
    results = tmp_path / "results.csv"
    with open(results, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    section = SimpleNamespace(out_dir=str(tmp_path), analysis_axis="", analysis_metric="", analysis_window=3)
    monkeypatch.setattr(grid, "run_sweep", lambda path, overrides, only=None: results)
    monkeypatch.setattr(grid, "load_sweep", lambda path, overrides=(): (section, []))


def test_a_sweep_without_a_context_axis_skips_the_analysis(monkeypatch, tmp_path, capsys):
    _fake_sweep(monkeypatch, tmp_path, [{"run": "a", "status": "done", "model.size": "s", "val_loss": "3.0"}])
    assert cmd_sweep(["sweep.toml"]) == 0
    out = capsys.readouterr().out
    assert "compute-optimal analysis skipped: the results need 'train.context'" in out
    assert not (tmp_path / "compute_optimal.json").exists()


def test_a_bug_in_the_analysis_is_not_swallowed(monkeypatch, tmp_path):
    _fake_sweep(
        monkeypatch, tmp_path, [{"run": "a", "status": "done", "train.context": "64", "val_loss": "3"}]
    )

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(compute_optimal, "compute_optimal", broken)
    with pytest.raises(ZeroDivisionError, match="a bug"):
        cmd_sweep(["sweep.toml"])
