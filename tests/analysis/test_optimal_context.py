"""The optimal-context sweep: the MLP learns parity, cells resume, a changed config is refused."""

from __future__ import annotations

import json

import pytest

from contextlab.data import synthetic as syn
from contextlab.errors import UserError
from contextlab.eval import optimal_context as oc


def _cfg(tmp_path, **kw) -> oc.SweepConfig:
    base = dict(
        n_bits=12,
        n_tasks=4,
        min_far_bit=3,
        data_sizes=[512, 2048],
        contexts=[2, 12],
        val_samples=1000,
        hidden=64,
        lr=3e-3,
        batch_size=64,
        eval_every=20,
        patience=6,
        max_steps=400,
        out_dir=str(tmp_path / "sweep"),
    )
    return oc.SweepConfig(**{**base, **kw})


def test_mlp_reaches_the_bayes_risk_when_it_sees_every_bit(tmp_path):
    cfg = _cfg(tmp_path)
    tasks = syn.make_tasks(cfg.parity())
    import numpy as np

    train = syn.sample(cfg.parity(), tasks, 2048, np.random.default_rng(0))
    val = syn.sample(cfg.parity(), tasks, 1000, np.random.default_rng(1))
    full = oc.fit_cell(cfg, train, val, 12, seed=0)
    assert full["best_val_loss"] < 0.1  # Bayes risk 0 with all 12 bits: the XORs are learned
    blind = oc.fit_cell(cfg, train, val, 2, seed=0)
    assert blind["best_val_loss"] > syn.bayes_risk(tasks, 2) - 0.05  # no model beats the Bayes risk


def test_sweep_writes_results_and_resumes(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, max_steps=40)
    res = oc.run_sweep(cfg, progress=False)
    assert set(res["cells"]) == {"512/2", "512/12", "2048/2", "2048/12"}
    assert set(res["optimal_context"]) == {"512", "2048"}
    tasks = syn.make_tasks(cfg.parity())
    assert res["bayes_risk"]["2"] == pytest.approx(syn.bayes_risk(tasks, 2))
    for D, best in res["optimal_context"].items():
        row = [res["cells"][f"{D}/{l}"]["best_val_loss"] for l in cfg.contexts]
        assert best["val_loss"] == min(row)
    saved = json.loads((tmp_path / "sweep" / "results.json").read_text())
    assert saved["cells"] == json.loads(json.dumps(res["cells"]))
    assert set(res["feature_fits"]) == {"512", "2048"}
    cell = res["cells"]["2048/12"]["features"]
    assert set(cell["entropy"]) == {
        "10",
        "20",
        "50",
        "64",
    }  # hidden=64: all = 64 components and cell["dimension"]["0.002"] >= 1
    assert -1 <= res["feature_fits"]["2048"]["entropy@10"]["r"] <= 1
    monkeypatch.setattr(oc, "fit_cell", lambda *a, **k: pytest.fail("a finished cell was trained again"))
    assert oc.run_sweep(cfg, progress=False)["cells"] == res["cells"]
    with pytest.raises(UserError, match="different config"):
        oc.run_sweep(_cfg(tmp_path, max_steps=40, lr=1e-3), progress=False)
    assert oc.optimal_context_png(res, tmp_path / "oc.png").stat().st_size > 10_000
    with pytest.raises(ValueError, match="contexts must lie"):
        _cfg(tmp_path, contexts=[13])
