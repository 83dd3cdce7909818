"""The compute-optimal analysis names its budget and its models: a budget set in [base] (not a grid
axis) is the runs' real budget, printed as a config writes it; a model key is named with its value."""

from __future__ import annotations

import csv
import json

from contextlab.sweep import compute_optimal
from contextlab.sweep.compute_optimal import analyze
from contextlab.sweep.results import write_results
from contextlab.sweep.spec import Run, SweepSection


def test_the_budget_set_in_base_labels_the_analysis(tmp_path, monkeypatch, capsys):
    """max_flops set in [base] (no grid axis) was labelled budget 0; a grid over n_embd printed 'best 64'."""
    from contextlab.cli.sweep import _analysis

    section = SweepSection(out_dir=str(tmp_path))
    runs = []
    for n_embd in (64, 128):
        for ctx in (32, 64):
            d = tmp_path / "runs" / f"c{ctx}_e{n_embd}"
            (d / "eval").mkdir(parents=True)
            loss = {(32, 64): 2.6, (64, 64): 2.5, (32, 128): 2.9, (64, 128): 2.8}[(ctx, n_embd)]
            (d / "eval" / "contextwise.json").write_text(json.dumps({"best_context_loss": loss}))
            (d / "sweep_status.json").write_text('{"status": "done"}')
            config = {"train": {"context": ctx, "max_flops": 1.5e11}, "model": {"n_embd": n_embd}}
            runs.append(Run(d.name, {"train.context": ctx, "model.n_embd": n_embd}, config, d))
    rows = list(csv.DictReader(open(write_results(section, runs))))
    assert {r["train.max_flops"] for r in rows} == {"150000000000.0"}
    titles, labels = [], []
    real_save = compute_optimal.save_png

    def spy(fig, path):
        for ax in fig.axes:
            titles.append(ax.get_title())
            labels.extend(line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_"))
        return real_save(fig, path)

    monkeypatch.setattr(compute_optimal, "save_png", spy)
    _analysis(tmp_path, section)
    out = capsys.readouterr().out
    assert (
        "train.max_flops 1.5e11: best n_embd 64 at context 64 (contextwise.best_context_loss 2.5000)" in out
    )
    saved = json.loads((tmp_path / "compute_optimal.json").read_text())
    assert list(saved["optimal"]) == ["150000000000.0"] and saved["budget_key"] == "train.max_flops"
    assert "train.max_flops 1.5e11" in titles and "n_embd 64" in labels
    from contextlab.report.html import build_report

    page = build_report(tmp_path).read_text()  # the compute-optimal table: the budget and the model key
    assert "<th>train.max_flops</th><th>n_embd</th><th>context</th>" in page
    assert '<td class="n">1.5e11</td><td class="n">64</td><td class="n">64</td>' in page


def test_a_budget_grid_axis_wins_over_one_set_in_base():
    from contextlab.sweep.compute_optimal import budget_label, number_text, size_label

    rows = [
        {
            "status": "done",
            "train.context": str(c),
            "model.size": "s",
            "train.max_flops": "1e12",
            "train.max_steps": str(steps),
            "contextwise.best_context_loss": str(loss),
        }
        for c, steps, loss in ((16, 10, 3.0), (32, 10, 3.1), (16, 20, 2.9), (32, 20, 2.7))
    ]
    res = analyze(rows)
    assert res["budget_key"] == "train.max_steps" and list(res["optimal"]) == ["10.0", "20.0"]
    assert [number_text(v) for v in (1.5e11, 2e-3, 0.5, 64, 1e5, 25000.0)] == [
        "1.5e11",
        "2e-3",
        "0.5",
        "64",
        "1e5",
        "25000",
    ]
    assert budget_label("train.max_flops", "150000000000.0") == "train.max_flops 1.5e11"
    assert (
        size_label("model.size", "tiny-2x128") == "tiny-2x128"
        and size_label("model.n_embd", 64) == "n_embd 64"
    )
