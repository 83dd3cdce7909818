"""``visible --task loss``: fractions of the model's context, 1 = all of it, tokens above 1.

A user's trial ran the default ``--visible 0.125,0.25,0.5,0.75,1.0``: every fraction was dropped
and 1.0 read as one token, so the curve had one point and ``value_full_context`` was the loss with
one visible token. Here the tiny Hugging Face Llama (context 64) sweeps a byte store."""

from __future__ import annotations

import numpy as np
import pytest

from contextlab.errors import UserError
from contextlab.eval import bayes_fit, visible
from tests.eval.conftest import tiny_llama_adapter


def losses_at(adapter, store, samples: int, ks: list[int]) -> np.ndarray:
    """Mean last-token loss of the sweep's targets (seed 0, positions >= the longest k) at every k."""
    targets = bayes_fit.sample_targets(store, samples, max(ks), 0)
    return bayes_fit.last_token_losses(adapter, store, targets, ks).mean(1)


def test_loss_lengths_read_fractions_of_the_full_length_and_add_one_token():
    assert visible.loss_lengths([0.125, 0.25, 0.5, 0.75, 1.0], 64) == [1, 8, 16, 32, 48, 64]
    assert visible.loss_lengths([0.3, 2, 1, 100, 0.01], 64) == [1, 2, 20, 64, 100]  # 0.3 * 64 = 19.2 -> 20
    assert visible.loss_lengths([1.0], 2048) == [1, 2048]  # 1.0 is everything, never one token
    with pytest.raises(UserError, match=r"^--visible 0.5,0 has a value <= 0; give tokens \(> 1\)"):
        visible.loss_lengths([0.5, 0.0], 64)


def test_the_default_sweep_has_every_point_and_the_full_context_value(byte_store, capsys):
    adapter = tiny_llama_adapter(context=64)
    out = visible.run(adapter, visible.Options(task="loss", samples=24), str(byte_store.path))
    r = out.results
    ks = [1, 2, 4, 8, 16, 32, 48, 64]  # the fractions, and every power of 2 (a user's grid skipped 2-16)
    assert [p["visible"] for p in r["points"]] == ks
    want = losses_at(adapter, byte_store, 24, ks)
    np.testing.assert_allclose([p["loss"] for p in r["points"]], want, rtol=1e-6)
    assert r["summary"]["value_full_context"] == pytest.approx(want[-1], rel=1e-6)  # 64 tokens seen
    assert r["summary"]["value_full_context"] != pytest.approx(want[0])  # not the one-token loss
    assert r["context_gain"]["visible"] == [1, 64] and r["context_gain"]["full_context"]
    assert r["summary"]["context_gain"] == pytest.approx(want[0] - want[-1], rel=1e-6)
    line = capsys.readouterr().out.splitlines()[0]  # the settings line lists what runs
    assert line == (
        "visible: task loss · visible tokens 1,2,4,8,16,32,48,64 · of context 64 · samples 24 · "
        f"data {byte_store.path}"
    )


def test_mixed_lists_and_lengths_the_store_or_model_cannot_give(byte_store, tmp_path):
    adapter = tiny_llama_adapter(context=64)
    r = visible.run(
        adapter, visible.Options(task="loss", visible=[4, 0.5, 1], samples=16), str(byte_store.path)
    )
    assert [p["visible"] for p in r.results["points"]] == [1, 4, 32, 64]
    assert r.results["summary"]["value_full_context"] == pytest.approx(
        losses_at(adapter, byte_store, 16, [64])[0], rel=1e-6
    )
    with pytest.raises(
        UserError, match=r"visible context 100 runs llama on 100 tokens .*; lower the largest --visible$"
    ):
        visible.run(adapter, visible.Options(task="loss", visible=[0.5, 100]), str(byte_store.path))
    long_model = tiny_llama_adapter(context=1024)  # the store's documents hold at most 500 tokens
    with pytest.raises(UserError) as err:
        visible.run(long_model, visible.Options(task="loss"), str(byte_store.path))
    assert str(err.value) == (
        "visible (task loss) needs documents longer than its longest visible length (1,024 tokens; 1 and "
        "the fractions of --visible count from the model's context of 1,024) but the longest in "
        f"{byte_store.path} has 500; give --visible in tokens below 500, or a store of longer documents"
    )


def test_the_chance_level_counts_the_candidates_the_task_built(capsys):
    """kv fitted to a short context builds sets of fewer keys (4 here, not 5): its chance is 1/4, which
    a model that cannot retrieve scores; it said 0.2, so such a model looked above chance."""
    from tests.eval.conftest import byte_adapter, tiny_gpt

    adapter = byte_adapter(tiny_gpt(0, context=560), batch_size=16)
    (samples, _), default = visible._task_samples(adapter, visible.Options(task="kv", visible=[1.0]), None)
    assert default == 5 and {len(s.candidates) for s in samples} == {4}
    assert visible.candidates_per_sample(samples, default) == 4
    out = visible.run(adapter, visible.Options(task="kv", visible=[1.0]), None)
    assert out.results["points"][0]["chance"] == 0.25
    summary = out.results["summary"]  # the headline carries its interval, n and chance
    assert summary["chance"] == 0.25 and summary["n"] == len(samples)
    assert summary["value_full_context_ci95"] == out.results["points"][0]["likelihood_accuracy_ci95"]
