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
    assert lines[1:4] == [
        "  1. a (clm): 2.0000",
        "  2. b (fim): 2.2000",
        "  -  c (mlm): not a left-to-right model, not ranked",
    ]
    assert lines[4].startswith("  these losses have no interval") and len(lines) == 5


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


def test_a_run_that_did_not_finish_is_listed_apart_with_how_far_it_got(tmp_path):
    """A ContextLM run killed at step 100 of 164 (61% of its FLOPs) was ranked 2nd at its partial loss,
    reading as a 0.125-nat GPT lead where the finished run's was 0.049."""
    rows = [
        {
            "run": "gpt",
            "status": "done",
            "objective.name": "clm",
            "train.max_flops": 2.4e12,
            "steps": 198,
            "flops": 2.3955e12,
            "best_val_lm_loss": 2.1206,
        },
        {
            "run": "cxl",
            "status": "failed",
            "objective.name": "contextlm",
            "train.max_flops": 2.4e12,
            "steps": 100,
            "flops": 1.46e12,
            "best_val_lm_loss": 2.2459,
        },
        {
            "run": "fim",
            "status": "done",
            "objective.name": "fim",
            "train.max_flops": 2.4e12,
            "steps": 190,
            "flops": 2.3974e12,
            "best_val_lm_loss": 2.1317,
        },
    ]
    lines = objective_ranking(write(tmp_path / "results.csv", rows))
    assert lines[1:3] == ["  1. gpt (clm): 2.1206", "  2. fim (fim): 2.1317"]
    assert lines[3] == (
        "  -  cxl (contextlm): not ranked, failed at step 100 (61% of its train.max_flops): its loss is of "
        "a shorter run"
    )
    assert lines[4].endswith(f"contextlab compare {tmp_path / 'runs' / 'fim'} {tmp_path / 'runs' / 'gpt'}")
    assert "no interval" in lines[4]
