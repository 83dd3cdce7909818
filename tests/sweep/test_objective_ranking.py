"""A sweep over objectives is ranked by the left-to-right loss they share, never by val_loss."""

from __future__ import annotations

import csv

from contextlab.rundir import summarize
from contextlab.sweep.objectives import objective_ranking


def write(path, rows):
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    return path


def test_objectives_rank_by_the_shared_loss_and_mlm_is_listed_unranked(tmp_path):
    rows = [  # val_loss alone would put mlm first and fim before clm
        {
            "run": "a",
            "status": "done",
            "objective.name": "clm",
            "best_val_loss": 2.0,
            "best_val_lm_loss": 2.0,
        },
        {
            "run": "b",
            "status": "done",
            "objective.name": "fim",
            "best_val_loss": 1.5,
            "best_val_lm_loss": 2.2,
        },
        {"run": "c", "status": "done", "objective.name": "mlm", "best_val_loss": 0.9, "best_val_lm_loss": ""},
    ]
    lines = objective_ranking(write(tmp_path / "r.csv", rows))
    assert "by best_val_lm_loss" in lines[0] and "not by val_loss" in lines[0]
    assert lines[1:] == [
        "  1. a (clm): 2.0000",
        "  2. b (fim): 2.2000",
        "  -  c (mlm): not a left-to-right model, not ranked",
    ]


def test_one_objective_needs_no_ranking(tmp_path):
    rows = [{"run": "a", "status": "done", "train.context": 64, "best_val_loss": 2.0}]
    assert objective_ranking(write(tmp_path / "r.csv", rows)) == []


def test_summary_carries_the_left_to_right_loss():
    rows = [
        {"step": 1, "loss": 3.0, "val_loss": 2.5, "val_lm_loss": 2.9},
        {"step": 2, "loss": 2.0, "val_loss": 2.6, "val_lm_loss": 2.7},
    ]
    s = summarize(rows)
    assert (s["best_val_loss"], s["val_lm_loss"], s["best_val_lm_loss"]) == (2.5, 2.7, 2.7)
    assert "val_lm_loss" not in summarize([{"step": 1, "loss": 1.0, "val_loss": 0.5}])  # mlm: none
