"""``contextlab sweep``: a sweep the compute-optimal analysis cannot read skips the analysis with
its one-line reason, while any other error in the analysis is a bug and propagates."""

from __future__ import annotations

import csv
from types import SimpleNamespace

import pytest

from contextlab.cli.sweep import cmd_sweep
from contextlab.sweep import compute_optimal, runner, spec


def _fake_sweep(monkeypatch, tmp_path, rows: list[dict], mean_loss: bool = False):
    results = tmp_path / "results.csv"
    with open(results, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    section = SimpleNamespace(
        out_dir=str(tmp_path),
        analysis_axis="",
        analysis_metric="",
        analysis_window=3,
        analysis_rank_by_mean_loss=mean_loss,
    )
    monkeypatch.setattr(runner, "run_sweep", lambda path, overrides, only=None, **kwargs: results)
    monkeypatch.setattr(spec, "load_sweep", lambda path, overrides=(): (section, []))


def test_a_sweep_without_a_context_axis_skips_the_analysis(monkeypatch, tmp_path, capsys):
    _fake_sweep(monkeypatch, tmp_path, [{"run": "a", "status": "done", "model.size": "s", "val_loss": "3.0"}])
    assert cmd_sweep(["sweep.toml"]) == 0
    out = capsys.readouterr().out
    assert "compute-optimal analysis skipped: the grid does not vary train.context" in out
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


def test_training_contexts_are_ranked_by_val_loss_only_when_asked(monkeypatch, tmp_path, capsys):
    """Without the contextwise evaluation the analysis refuses, naming the fix; asked explicitly it
    ranks by val_loss and prints the warning first."""
    rows = [
        {"run": f"c{c}", "status": "done", "train.context": str(c), "model.size": "s", "val_loss": str(v)}
        for c, v in ((64, 3.1), (256, 3.0))
    ]
    _fake_sweep(monkeypatch, tmp_path, rows)
    assert cmd_sweep(["sweep.toml"]) == 0
    out = capsys.readouterr().out
    assert "compute-optimal analysis skipped: will not rank training contexts by val_loss" in out
    assert "add contextwise to sweep.evals" in out and not (tmp_path / "compute_optimal.json").exists()
    _fake_sweep(monkeypatch, tmp_path, rows, mean_loss=True)
    assert cmd_sweep(["sweep.toml"]) == 0
    lines = capsys.readouterr().out.splitlines()
    warning = next(i for i, line in enumerate(lines) if line.startswith("warning: val_loss averages"))
    best = next(i for i, line in enumerate(lines) if "best s at context 256 (val_loss 3.0000)" in line)
    assert warning < best
    # the largest context tried: a user's optimum at the grid's edge was printed as if found
    assert lines[best].endswith(
        "; the largest context tried, so the optimum may lie past it: add longer contexts"
    )


def test_the_help_explains_every_key_of_a_sweep_file(capsys):
    import dataclasses

    from contextlab.sweep.spec import SweepSection

    with pytest.raises(SystemExit):
        cmd_sweep(["--help"])
    text = capsys.readouterr().out
    assert all(f"  sweep.{f.name} = " in text for f in dataclasses.fields(SweepSection))
    assert "[base]   a run config" in text and "[grid]" in text
    assert max(len(line) for line in text.splitlines()) <= 110  # wrapped, not one line per paragraph
