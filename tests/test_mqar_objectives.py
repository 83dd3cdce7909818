"""scripts/mqar_objectives.py: the equal-FLOPs budget split, the held-out columns, the paired
differences clustered by sequence, the table and the JSON line, the FLOPs per token of each arm."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from contextlab.data import mqar
from contextlab.models.flops import flops_per_token
from contextlab.models.gpt import size_config
from tests.conftest import REPO


@pytest.fixture
def script(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    return importlib.import_module("mqar_objectives")


def test_arm_sets_name_the_objective_and_its_options(script):
    assert script.arm_sets("gpt", 4, 1, 2) == ["objective.name=clm"]
    assert script.arm_sets("contextlm", 4, 1, 2) == [
        "objective.name=contextlm",
        "objective.options.chunk_size=4",
        "objective.options.predictor_layers=1",
    ]
    assert script.arm_sets("mtp", 4, 1, 3) == ["objective.name=mtp", "objective.options.n_future=3"]


def test_split_budget_gives_every_arm_the_gpt_steps_flops(script):
    split = script.split_budget({"gpt": 100.0, "contextlm": 112.0, "mtp": 150.0}, 10, 30)
    assert split["max_flops"] == pytest.approx(30_000.0, rel=1e-9)
    assert split["steps"] == {
        "gpt": 30,
        "contextlm": 26,
        "mtp": 20,
    }  # 30000 / 1120 = 26.8; / 1500 = 20 exactly
    assert split["tokens"] == {"gpt": 300, "contextlm": 260, "mtp": 200}
    assert split["flops"] == {"gpt": 30_000.0, "contextlm": 29_120.0, "mtp": 30_000.0}
    assert all(f <= split["max_flops"] for f in split["flops"].values())


def test_split_budget_never_loses_the_gpt_a_step_to_rounding(script):
    rng = np.random.default_rng(0)
    for fpt, tps, steps in zip(
        rng.uniform(1e5, 1e7, 300), rng.integers(1, 10_000, 300), rng.integers(1, 5000, 300)
    ):
        assert script.split_budget({"gpt": float(fpt)}, int(tps), int(steps))["steps"]["gpt"] == steps


def test_columns_score_each_stage_model_on_its_own_pairs_and_the_final_one_on_all(script):
    assert script.columns([4, 16]) == {
        "stage_4": (4, 4, False),
        "stage_4_first": (4, 4, True),
        "pairs_16": (16, 16, False),
        "pairs_16_first": (16, 16, True),
        "pairs_4": (16, 4, False),
    }
    assert list(script.columns([4, 16])) == [
        "stage_4",
        "stage_4_first",
        "pairs_16",
        "pairs_16_first",
        "pairs_4",
    ]
    assert script.columns([16]) == {"pairs_16": (16, 16, False), "pairs_16_first": (16, 16, True)}


def test_no_binding_accuracy_is_elimination_among_the_prompts_values(script):
    assert script.no_binding_accuracy(4) == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)  # 0.5208
    assert round(script.no_binding_accuracy(16), 4) == 0.2113
    assert script.no_binding_accuracy(16, first=True) == 1 / 16
    assert script.no_binding_accuracy(1) == 1.0


def test_first_answers_mark_the_first_of_each_sequence(script):
    assert script.first_answers(np.array([0, 0, 0, 1, 2, 2])).tolist() == [
        True,
        False,
        False,
        True,
        True,
        False,
    ]
    assert script.first_answers(np.array([], int)).tolist() == []


def test_answer_clusters_follow_the_answers_of_each_row(script):
    rows = np.array([[0, 10, 1, 11, 1, 11, 0, 10], [2, 12, 3, 13, 3, 13, 9, 9]])  # keys < 4
    assert script.answer_clusters(rows, 4).tolist() == [0, 0, 1]


def test_paired_diff_resamples_whole_sequences(script):
    a = np.array([1, 1, 0, 0], bool)
    b = np.array([0, 1, 0, 1], bool)
    d = script.paired_diff(a, b, np.array([0, 0, 1, 1]), resamples=2000, seed=0)
    # per-sequence differences +1 and -1 over 2 answers each: a resample holds both (0) or one twice (±0.5)
    assert d["diff"] == 0.0 and d["interval95"] == [-0.5, 0.5] and d["n_clusters"] == 2
    same = script.paired_diff(a, a, np.array([0, 0, 1, 1]), resamples=100, seed=0)
    assert same["diff"] == 0.0 and same["interval95"] == [0.0, 0.0]


def test_summarise_table_and_json(script):
    hits = {
        "gpt": {"pairs_4": np.array([1, 0, 1, 0], bool)},
        "mtp": {"pairs_4": np.array([1, 1, 1, 0], bool)},
    }
    acc, diffs = script.summarise(hits, {"pairs_4": np.array([0, 0, 1, 1])}, resamples=500, seed=0)
    assert acc["gpt"]["pairs_4"]["accuracy"] == 0.5 and acc["mtp"]["pairs_4"]["accuracy"] == 0.75
    assert list(diffs) == ["mtp"] and diffs["mtp"]["pairs_4"]["diff"] == 0.25
    assert diffs["mtp"]["pairs_4"]["interval95"] == [0.0, 0.5]  # sequence 0 gains +0.5, sequence 1 nothing
    lines = script.table_lines(acc, diffs, {"pairs_4": "4 pairs (4), final model"})
    lo, hi = acc["mtp"]["pairs_4"]["ci95"]
    assert lines[2] == "| 4 pairs (4), final model | gpt | 0.500 [0.150, 0.850] | — |"
    assert (
        lines[3]
        == f"| 4 pairs (4), final model | mtp | 0.750 [{lo:.3f}, {hi:.3f}] | +0.250 [+0.000, +0.500] |"
    )
    out = script.result_json(
        acc, diffs, {"pairs_4": 3e10}, {"gpt": {"pairs_4": 100}}, {"gpt": {"pairs_4": 2}}, {"gpt": 1.5}
    )
    assert out == {
        "gpt": {"pairs_4": 0.5},
        "mtp": {"pairs_4": 0.75},
        "diff_mtp_gpt": {"pairs_4": [0.25, 0.0, 0.5]},
        "flops": 3e10,
        "flops_by_stage": {"pairs_4": 3e10},
        "tokens": {"gpt": {"pairs_4": 100}},
        "steps": {"gpt": {"pairs_4": 2}},
        "minutes": {"gpt": 1.5},
    }
    one = {"diff": 0.1, "interval95": None}
    assert "+0.100 [+nan, +nan]" in script.table_lines(acc, {"mtp": {"pairs_4": one}}, {"pairs_4": "x"})[3]
    assert math.isnan(
        script.result_json(acc, {"mtp": {"pairs_4": one}}, {}, {}, {}, {})["diff_mtp_gpt"]["pairs_4"][1]
    )


def test_budget_lines(script):
    lines = script.budget_lines(
        {"gpt": {"pairs_4": 2.5e6}, "mtp": {"pairs_4": 3.75e6}},
        {"gpt": {"pairs_4": 30}, "mtp": {"pairs_4": 20}},
        {"gpt": {"pairs_4": 1200}, "mtp": {"pairs_4": 800}},
        {"gpt": 1.25, "mtp": 1.5},
    )
    assert lines == [
        "| arm | pairs_4: FLOPs/token | steps | tokens | minutes |",
        "|---|---|---|---|---|",
        "| gpt | 2,500,000 | 30 | 1,200 | 1.2 |",
        "| mtp | 3,750,000 | 20 | 800 | 1.5 |",
    ]


def test_run_shape_counts_what_the_trainer_counts(script, tmp_path):
    cfg = mqar.MQARConfig(pairs=4, keys=8, values=8, docs=4, seed=0)  # rows of 16 tokens, vocabulary 18
    store = mqar.write_mqar_store(cfg, tmp_path / "s", progress=False)
    base = [f"data.store={store}", f"data.val_store={store}", "train.rows_per_step=4"]
    gpt = size_config("tiny-2x128", 18, 15, n_layer=2, n_head=2, n_embd=128)
    fpt, tps = script.run_shape(str(REPO / "recipes/mqar_cpu.toml"), base + script.arm_sets("gpt", 4, 1, 2))
    assert (fpt, tps) == (flops_per_token(gpt, 15), 60)  # context 15 (the rows' inputs), 4 rows
    ctx, _ = script.run_shape(
        str(REPO / "recipes/mqar_cpu.toml"), base + script.arm_sets("contextlm", 4, 1, 2)
    )
    mtp, _ = script.run_shape(str(REPO / "recipes/mqar_cpu.toml"), base + script.arm_sets("mtp", 4, 1, 2))
    block = 6 * (4 * 128 * 128 + 2 * 128 * 512 + 2 * 128)  # one block's parameters, 6 FLOPs each
    assert (
        ctx - fpt == (block + 3 * 4 * 128 * 3) / 4
    )  # 1 predictor block over 15 // 4 = 3 chunks, 1 per 4 tokens
    assert mtp - fpt == block + 3 * 4 * 128 * 15 + 6 * 128 * 18  # one more head block and output layer


def test_help_explains_every_option(script):
    text = script.parser().format_help()
    for flag in (
        "--arms", "--pairs", "--gpt-steps", "--chunk-size", "--predictor-layers", "--n-future", "--recipe",
        "--data", "--runs", "--tag", "--answers", "--docs", "--val-docs", "--threads", "--seed",
        "--resamples", "--bootstrap-seed", "--set",
    ):  # fmt: skip
        assert flag in text
    assert all(a.help for a in script.parser()._actions)
    assert "python scripts/mqar_objectives.py" in script.__doc__
