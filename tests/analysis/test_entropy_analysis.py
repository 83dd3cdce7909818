"""`analyze entropy` end to end: a parity run trained by the real trainer, the text protocol, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from contextlab.analysis import entropy, entropy_samples, intrinsic
from contextlab.cli import main
from contextlab.config import from_dict
from contextlab.data import synthetic as syn
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.store import TokenStore
from contextlab.errors import UserError
from tests.conftest import shakespeare
from tests.eval.conftest import byte_adapter, tiny_gpt

QUICK = [
    "--n-components",
    "4,8,0",
    "--thresholds",
    "0.01,0.1",
    "--kde-dims",
    "3",
    "--estimators",
    "twonn",
    "--no-progress",
]


@pytest.fixture(scope="module")
def parity(tmp_path_factory):
    """A 16-bit parity train/val pair and a run trained on it for a few steps with objective last_token."""
    from contextlab.train.config import RunConfig
    from contextlab.train.trainer import train

    root = tmp_path_factory.mktemp("parity")
    base = dict(n_bits=16, n_tasks=10, min_far_bit=4, min_visible=4)
    syn.write_parity_store(
        syn.ParityConfig(**base, n_samples=400, mask_fraction=0.5), root / "train", progress=False
    )
    syn.write_parity_store(syn.ParityConfig(**base, n_samples=160, seed=1), root / "val", progress=False)
    cfg = {
        "model": {"size": "tiny-2x128", "n_layer": 1, "n_head": 2, "n_embd": 32},
        "data": {"store": str(root / "train"), "val_store": str(root / "val"), "mode": "long_docs"},
        "objective": {"name": "last_token"},
        "optim": {"lr": 3e-3, "warmup_steps": 1},
        "train": {
            "out_dir": str(root / "run"),
            "context": 17,
            "tokens_per_step": 17 * 16,
            "max_steps": 4,
            "val_every": 0,
            "val_tokens": 17 * 16,
            "ckpt_every": 0,
            "threads": 1,
            "peak_flops": 1e12,
            "progress": False,
            "dtype": "fp32",
            "log_every": 2,
        },
    }
    result = train(from_dict(RunConfig, cfg))
    return root, result


def test_last_token_objective_scores_only_the_answer():
    from contextlab.objectives.last_token import LastToken

    model = tiny_gpt(0, context=32)
    tokens = torch.randint(0, 257, (3, 12))
    obj = LastToken(LastToken.Options())
    loss, _ = obj(model, tokens)
    logits = model(tokens[:, :-1]).logits[:, -1]  # (B, V)
    want = float(torch.nn.functional.cross_entropy(logits.detach(), tokens[:, -1]))
    assert float(loss.detach()) == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="n_last"):
        LastToken.Options(n_last=0)


def test_parity_run_gives_the_bayes_table_and_correlations(parity, tmp_path, capsys):
    root, result = parity
    # the trainer's validation loss is the answer's cross-entropy on the val store
    assert 0 < result.val_loss < np.log(257) + 0.5
    out = tmp_path / "ent"
    assert (
        main(
            [
                "analyze",
                "entropy",
                "--model",
                str(root / "run"),
                "--data",
                str(root / "val"),
                "--contexts",
                "4,8,12,16",
                "--samples",
                "150",
                "--out",
                str(out),
                *QUICK,
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "Bayes" in printed and "Pearson r vs CE" in printed and "CE/task" in printed
    head = next(line for line in printed.splitlines() if line.lstrip().startswith("l "))
    assert head.split()[-1] == "twonn" and "mle" not in head  # a column for each estimator asked for
    # the settings line comes first, before minutes of collecting (a user waited without one)
    assert printed.splitlines()[0].startswith("entropy: protocol parity · contexts 4,8,12,16 · samples 150")
    doc = json.loads((out / "entropy.json").read_text())
    assert doc["format"] == "contextlab-eval-result" and doc["options"]["samples"] == 150
    res = doc["results"]
    tasks = syn.parity_of_store(TokenStore(root / "val"))[1]
    assert [r["context"] for r in res["contexts"]] == [4, 8, 12, 16]
    for r in res["contexts"]:
        assert r["bayes_risk"] == pytest.approx(syn.bayes_risk(tasks, r["context"]))
        assert r["abs_diff"] == pytest.approx(abs(r["ce"] - r["bayes_risk"]))
        assert r["excess"] == pytest.approx(r["ce"] - r["bayes_on_samples"])
        assert r["abs_diff_task_weighted"] == pytest.approx(abs(r["ce_task_weighted"] - r["bayes_risk"]))
        assert set(r["entropy"]) == {"4", "8", "32"} and set(r["dimension"]) == {"0.01", "0.1"}
        assert "kde_entropy" in r and "twonn" in r and "mle" not in r
    assert res["summary"]["max_abs_diff_bayes"] == pytest.approx(max(r["abs_diff"] for r in res["contexts"]))
    s = res["summary"]  # the headline |r| of 4 contexts with its p-value and interval, and how many it beat
    best = res["fits_vs_ce"][s["best_measure"]]
    assert s["best_p_value"] == best["p_value"] and s["measures_compared"] >= 2
    assert 0 <= s["best_abs_r_interval95"][0] <= s["best_abs_r"] <= s["best_abs_r_interval95"][1] <= 1
    assert set(res["fits_vs_ce"]) == {
        "entropy@4",
        "entropy@8",
        "entropy@32",
        "dimension@0.01",
        "dimension@0.1",
        "kde_entropy",
        "twonn",
    }
    spectra = np.load(out / "entropy.relative_eigenvalues.npy")
    assert spectra.shape == (4, 32) and np.allclose(spectra[:, 0], 1.0)
    assert (out / "entropy.png").stat().st_size > 10_000


def test_parity_features_are_the_hidden_states_of_the_masked_rows(parity):
    from contextlab.eval import load_model

    root, _ = parity
    adapter = load_model(root / "run", batch_size=16)
    store = TokenStore(root / "val")
    o = entropy.Options(contexts=[5, 16], samples=40, position=-2, seed=3)
    col = entropy_samples.collect_parity(adapter, store, o, progress=False)
    pick = np.sort(np.random.default_rng(3).choice(160, size=40, replace=False))
    docs = np.stack([np.asarray(store.doc(int(d)), dtype=np.int64) for d in pick])
    rows = syn.mask_tokens(docs, 16, 5)
    assert (rows[:, :11] == syn.MASK).all() and (rows[:, 11:] == docs[:, 11:]).all()
    h = adapter.hidden_states(rows[:, :-1], layer=-1)[:, -2].numpy()
    assert np.allclose(col.features[0], h, atol=1e-5)
    lp = adapter.token_logprobs(rows)[:, -1].double().numpy()
    assert np.allclose(col.losses[0], -lp, atol=1e-6)
    tasks = syn.parity_of_store(store)[1]
    assert col.bayes == [syn.bayes_risk(tasks, c) for c in (5, 16)]
    # the Bayes predictor's loss on these very samples: log 2 where the task's far bit is hidden, else 0
    far = tasks.far[docs[:, 16] - syn.TASK_BASE]
    assert np.array_equal(col.bayes_losses[0], np.where(far > 5, np.log(2.0), 0.0))
    assert np.array_equal(col.bayes_losses[1], np.where(far > 16, np.log(2.0), 0.0))


def test_text_protocol_matches_the_bayes_fit_losses(tmp_path):
    from contextlab.eval.bayes_fit import last_token_losses, sample_targets

    src = tmp_path / "src"
    src.mkdir()
    text = shakespeare()
    for i in range(4):
        (src / f"d{i}.txt").write_text(text[i * 3000 : i * 3000 + 600])
    store = ingest(src, tmp_path / "st", IngestConfig(tokenizer="byte"), progress=False).store
    adapter = byte_adapter(tiny_gpt(1, context=64), batch_size=8)
    o = entropy.Options(
        contexts=[4, 16, 48], samples=60, seed=2, estimators=[], kde_dims=0, n_components=[5, 0]
    )
    col = entropy_samples.collect_text(adapter, store, o, progress=False)
    targets = sample_targets(store, 60, 48, 2)
    assert np.allclose(col.losses, last_token_losses(adapter, store, targets, [4, 16, 48]), atol=1e-5)
    d, t = targets[7]
    ids = np.asarray(store.doc(d)[t - 16 : t], dtype=np.int64)
    assert np.allclose(col.features[1][7], adapter.hidden_states(ids, layer=-1)[0, -1].numpy(), atol=1e-5)
    results, arrays = entropy.analyze(col, o, progress=False)
    assert "bayes_risk" not in results["contexts"][0]
    rel = intrinsic.relative_eigenvalues(col.features[2])
    assert results["contexts"][2]["entropy"]["5"] == pytest.approx(intrinsic.pca_entropy(rel, 5))
    assert arrays["relative_eigenvalues"].shape == (3, 59)


def test_bad_input_gives_one_clear_line(parity, tmp_path, capsys):
    root, _ = parity
    run, val = str(root / "run"), str(root / "val")

    def err(*argv):
        assert main(["analyze", "entropy", *argv, "--no-progress"]) == 2
        return capsys.readouterr().err.strip()

    assert "at least 3 distinct context lengths" in err("--model", run, "--data", val, "--contexts", "4,8,8")
    assert "supports at most 17" in err(
        "--model", run, "--data", val, "--contexts", "4,8,20", "--protocol", "text"
    )
    assert "store not found" in err("--model", run, "--data", str(tmp_path / "nope"), "--contexts", "4,8,12")
    assert "model not found" in err("--model", str(tmp_path / "nope"), "--data", val, "--contexts", "4,8,12")
    assert "visible bits in 0..16" in err("--model", run, "--data", val, "--contexts", "4,8,40")
    assert "too few for PCA" in err("--model", run, "--data", val, "--contexts", "4,8,12", "--samples", "12")
    assert "unmasked samples" in err(
        "--model",
        run,
        "--data",
        str(root / "train"),
        "--contexts",
        "4,8,12",
        "--samples",
        "390",
        "--n-components",
        "4",
        "--estimators",
        "",
    )
    assert "config key 'samples' must be int" in err(
        "--model", run, "--data", val, "--contexts", "4", "--samples", "many"
    )
    with pytest.raises(SystemExit) as exc:  # a flag of a few values lists them under its own name
        main(["analyze", "entropy", "--model", run, "--data", val, "--contexts", "4", "--protocol", "bits"])
    assert exc.value.code == 2
    assert "argument --protocol: invalid choice: 'bits' (choose from 'auto', 'text', 'parity')" in (
        capsys.readouterr().err
    )
    assert "unknown intrinsic-dimension estimator" in err(
        "--model", run, "--data", val, "--contexts", "4,8,12", "--samples", "120", "--estimators", "pca9"
    )
    with pytest.raises(UserError, match="supports at most 17"):
        from contextlab.eval import load_model

        entropy_samples._check_contexts(load_model(run), [40], 0, "visible tokens")


def test_task_weighted_loss_removes_task_sampling_noise():
    tasks = syn.make_tasks(syn.ParityConfig(n_bits=30, n_tasks=40))
    rng = np.random.default_rng(0)
    l = 18
    exact = syn.bayes_risk(tasks, l)
    plain, weighted = [], []
    for _ in range(200):  # the Bayes predictor's loss on 1,000 samples, many times over
        strata = rng.choice(len(tasks.freq), size=1000, p=tasks.freq)
        loss = np.where(tasks.far[strata] > l, np.log(2.0), 0.0)
        plain.append(loss.mean())
        if len(np.unique(strata)) == len(tasks.freq):  # every task drawn
            weighted.append(entropy.task_weighted(loss, strata, tasks.freq))
    assert np.std(plain) > 0.01  # the plain mean wanders with which tasks were drawn
    assert len(weighted) > 100 and np.allclose(weighted, exact, atol=1e-12, rtol=0)  # stratified: exact
    # by hand: each task's mean, weighted by its frequency over the drawn tasks
    strata = np.array([0, 0, 1, 3])
    loss = np.array([1.0, 3.0, 5.0, 7.0])
    w = np.array([0.5, 0.25, 0.2, 0.05])
    assert entropy.task_weighted(loss, strata, w) == pytest.approx((0.5 * 2 + 0.25 * 5 + 0.05 * 7) / 0.8)


def test_default_components_past_the_model_width_are_left_out_with_a_line():
    """A model of width 32 has 32 PCA components: the default --n-components 10,20,50,100,0 keeps 10, 20
    and all of them and says which were left out (it used to fail with 'lower --n-components or raise
    --samples', and more samples cannot help); none left is one line."""
    rng = np.random.default_rng(0)
    feats = [rng.normal(size=(200, 32)).astype(np.float32) * (1 + i) for i in range(3)]
    col = entropy_samples.Collected(
        [4, 8, 16], feats, rng.random((3, 200)) + np.arange(3)[:, None], None, {"protocol": "text"}
    )
    o = entropy.Options(contexts=[4, 8, 16], samples=200, kde_dims=0, estimators=[])
    res, _ = entropy.analyze(col, o, progress=False)
    assert all(set(r["entropy"]) == {"10", "20", "32"} for r in res["contexts"])
    assert res["text"][0] == (
        "intrinsic entropy over 50, 100 components left out: the hidden states have 32 PCA components "
        "(min(samples - 1, width))"
    )
    with pytest.raises(UserError, match="have 32 PCA components .* give values up to 32, or 0 for all"):
        entropy.analyze(
            col,
            entropy.Options(contexts=[4, 8, 16], samples=200, n_components=[64], kde_dims=0, estimators=[]),
            progress=False,
        )


def test_a_measure_constant_over_contexts_has_no_correlation_and_says_why():
    """Features equal up to a power-of-two scale (exact in floating point) give the same spectrum, so
    every measure is constant: r is null with `constant` (not NaN, which the result file blamed on
    non-finite weights) and a line says why."""
    base = np.random.default_rng(1).normal(size=(200, 32)).astype(np.float32)
    losses = np.random.default_rng(2).random((3, 200)) + np.arange(3)[:, None]
    col = entropy_samples.Collected(
        [4, 8, 16], [base * 2.0**i for i in range(3)], losses, None, {"protocol": "text"}
    )
    o = entropy.Options(contexts=[4, 8, 16], samples=200, n_components=[10, 0], kde_dims=0, estimators=[])
    res, _ = entropy.analyze(col, o, progress=False)
    assert all(f["r"] is None and f["constant"] for f in res["fits_vs_ce"].values())
    assert "best_measure" not in res["summary"]
    assert res["text"][-1].startswith("entropy@10, entropy@32, dimension@")
    assert res["text"][-1].endswith(
        "the same at every context length, so no correlation with the loss exists (their r is null)"
    )


def test_an_estimator_with_no_finite_value_at_a_context_is_named_and_fitted_without_it():
    """Many samples sharing one hidden state (short contexts of a parity store) give MLE no finite
    estimate: the analysis used to end in a LinAlgError traceback from the fit; now the context is
    named in a line and the fit uses the other contexts."""
    rng = np.random.default_rng(3)
    repeated = np.repeat(rng.normal(size=(5, 32)), 40, axis=0).astype(np.float32)  # 5 distinct states
    feats = [repeated] + [rng.normal(size=(200, 32)).astype(np.float32) * (1 + i) for i in range(3)]
    losses = rng.random((4, 200)) + np.arange(4)[::-1, None]
    col = entropy_samples.Collected([2, 4, 8, 16], feats, losses, None, {"protocol": "text"})
    o = entropy.Options(
        contexts=[2, 4, 8, 16], samples=200, n_components=[10], kde_dims=0, estimators=["mle"]
    )
    res, _ = entropy.analyze(col, o, progress=False)
    assert res["contexts"][0]["mle"] is None  # null, not a NaN the result file would blame on the model
    fit = res["fits_vs_ce"]["mle"]
    assert np.isfinite(fit["r"]) and np.isfinite(fit["slope"])
    assert fit == intrinsic.linear_fit(
        [r["mle"] for r in res["contexts"][1:]], [r["ce"] for r in res["contexts"][1:]]
    )
    line = next(line for line in res["text"] if line.startswith("mle: no estimate at context 2 ("))
    assert "(too few distinct hidden states there for it: 5 at 2)" in line
    assert res["contexts"][0]["distinct_samples"] == 5 and res["contexts"][1]["distinct_samples"] == 200
    assert any(
        "mle: samples sharing a hidden state with an earlier one (195 at context 2) were read once" in t
        for t in res["text"]
    )


def test_an_entropy_over_more_components_than_distinct_states_has_no_value_there():
    """5 distinct hidden states span 4 components: an entropy over the first 10 would be mostly
    log(1e-12) per empty component, and that floor drove a parity run's headline correlation (|r| 0.939,
    0.695 without it). It is null there, named with its floored count, and fitted on the others."""
    rng = np.random.default_rng(3)
    repeated = np.repeat(rng.normal(size=(5, 32)), 40, axis=0).astype(np.float32)
    feats = [repeated] + [rng.normal(size=(200, 32)).astype(np.float32) * (1 + i) for i in range(3)]
    losses = rng.random((4, 200)) + np.arange(4)[::-1, None]
    col = entropy_samples.Collected([2, 4, 8, 16], feats, losses, None, {"protocol": "text"})
    o = entropy.Options(contexts=[2, 4, 8, 16], samples=200, n_components=[3, 10], kde_dims=0, estimators=[])
    res, _ = entropy.analyze(col, o, progress=False)
    first = res["contexts"][0]
    assert first["entropy"]["10"] is None and first["entropy_floored"] == {"10": 6}
    assert first["entropy"]["3"] is not None  # 3 components are all above the floor
    assert all(r["entropy"]["10"] is not None and "entropy_floored" not in r for r in res["contexts"][1:])
    want = intrinsic.linear_fit(
        [r["entropy"]["10"] for r in res["contexts"][1:]], [r["ce"] for r in res["contexts"][1:]]
    )
    assert res["fits_vs_ce"]["entropy@10"] == want
    line = next(t for t in res["text"] if t.startswith("entropy@10: no estimate at context 2 ("))
    assert "below the 1e-12 floor (6 at 2)" in line and line.endswith("its fit uses the other contexts")


@pytest.mark.parametrize("name", ["ppl", "contextwise", "bayes-fit"])
def test_text_evaluations_refuse_a_parity_store_naming_what_measures_it(parity, name, tmp_path, capsys):
    """ppl, contextwise and bayes-fit average the loss over every token of a parity store (task ids,
    random bits, one answer): a user got `C0 5.39, r2 0.89` for a task whose Bayes risk runs 0.69 -> 0.
    One line names the store's kind and the command that measures its task."""
    root, _ = parity
    args = ["eval", name, "--model", str(root / "run"), "--data", str(root / "val"), "--out", str(tmp_path)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"is a synthetic parity store: {name} over its tokens" in err[0], err
    assert "contextlab analyze entropy --model MODEL --data STORE" in err[0]
    assert not list(tmp_path.iterdir())


def test_an_estimator_constant_where_finite_has_no_fit_and_says_so(monkeypatch):
    """MLE with no value at the shortest context and 0.0 at the others (a user's parity run): r is null
    with `constant`, the line says the other contexts give no fit (it claimed a fit was made, and the
    Pearson line printed +nan)."""
    values = iter([float("nan"), 0.0, 0.0, 0.0])
    monkeypatch.setattr(intrinsic, "skdim_dimensions", lambda X, names, distinct=None: {"mle": next(values)})
    rng = np.random.default_rng(4)
    feats = [rng.normal(size=(200, 32)).astype(np.float32) * (1 + i) for i in range(4)]
    col = entropy_samples.Collected([2, 4, 6, 8], feats, rng.random((4, 200)), None, {"protocol": "text"})
    o = entropy.Options(contexts=[2, 4, 6, 8], samples=200, n_components=[10], kde_dims=0, estimators=["mle"])
    res, _ = entropy.analyze(col, o, progress=False)
    assert res["fits_vs_ce"]["mle"] == {
        "slope": None,
        "intercept": None,
        "r": None,
        "r2": None,
        "constant": True,
    }
    line = next(t for t in res["text"] if t.startswith("mle: no estimate at context 2 ("))
    assert line.endswith(
        "the other contexts give it no fit (fewer than two finite values, or all equal: r is null)"
    )


def test_contexts_left_out_are_fitted_to_the_model_or_the_parity_store(parity, tmp_path, capsys):
    assert entropy_samples.text_contexts(256) == [8, 16, 32, 64, 128, 256]
    assert entropy_samples.text_contexts(100) == [8, 16, 32, 64, 100]  # the context itself ends it
    assert entropy_samples.text_contexts(17) == [8, 16, 17] and entropy_samples.text_contexts(12) == [
        3,
        6,
        12,
    ]
    assert entropy_samples.parity_contexts(16) == [0, 2, 4, 6, 8, 10, 12, 14, 16]
    root, _ = parity
    out = tmp_path / "fitted"
    argv = ["analyze", "entropy", "--model", str(root / "run"), "--data", str(root / "val")]
    assert main([*argv, "--samples", "150", "--out", str(out), *QUICK]) == 0
    first = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("entropy:"))
    assert first.startswith("entropy: protocol parity · contexts 0,2,4,…,14,16 · samples 150")
    doc = json.loads((out / "entropy.json").read_text())
    assert doc["options"]["contexts"] == []  # recorded as asked: fitted (a rerun fits them again)
    assert [r["context"] for r in doc["results"]["contexts"]] == entropy_samples.parity_contexts(16)


def test_a_layer_normed_cloud_keeps_its_entropy_over_every_component():
    """A LayerNorm output lies in a hyperplane: its last component is ~1e-15 at every context. That floor,
    from the features and not from too few samples, keeps the entropy over all components (it voided it
    at every context of a GPT-2-style model)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 64))
    X = (X - X.mean(1, keepdims=True)) / X.std(1, keepdims=True)  # layer-normed rows: a hyperplane
    m, rel = intrinsic.measures(
        X.astype(np.float32), n_components=[10, 0], thresholds=[0.01], kde_dims=0, estimators=[]
    )
    assert rel[-1] < intrinsic.EIG_FLOOR and m["entropy_floored"] == {"64": 1}
    assert m["entropy"]["64"] is not None and m["distinct_samples"] == 1000


def test_a_measure_of_two_values_is_not_ranked_the_best(monkeypatch):
    """A user's `best_measure: dimension@0.002, |r| 0.944` was an integer dimension of 47, 48, 48, 48, 48,
    48: one step, between the contexts where the loss moved most. A measure of two distinct values is
    flagged and not ranked; the printed count of measures ranked is the summary's."""
    from contextlab.cli.analyze import _table

    steps = iter([47.0, 48.0, 48.0, 48.0, 48.0, 48.0])
    monkeypatch.setattr(intrinsic, "skdim_dimensions", lambda X, names, distinct=None: {"mle": next(steps)})
    rng = np.random.default_rng(5)
    feats = [rng.normal(size=(200, 32)).astype(np.float32) * (1 + 0.1 * i) for i in range(6)]
    losses = rng.random((6, 200)) * 0.1 + np.array([5.0, 4.2, 4.1, 4.05, 4.02, 4.0])[:, None]
    contexts = [2, 4, 8, 16, 32, 64]
    col = entropy_samples.Collected(contexts, feats, losses, None, {"protocol": "text"})
    o = entropy.Options(contexts=contexts, samples=200, n_components=[10], kde_dims=0, estimators=["mle"])
    res, _ = entropy.analyze(col, o, progress=False)
    fit = res["fits_vs_ce"]["mle"]
    assert fit["two_values"] is True and abs(fit["r"]) > 0.9  # the step lines up with the loss's drop
    s = res["summary"]
    ranked = [k for k, f in res["fits_vs_ce"].items() if f["r"] is not None and not f.get("two_values")]
    assert s["best_measure"] != "mle" and s["measures_compared"] == len(ranked) >= 1
    line = next(t for t in res["text"] if ": two distinct values over 6 contexts, one step" in t)
    assert "mle" in line.split(":")[0].split(", ")
    printed = _table(res)
    assert f"the best of the {s['measures_compared']} measures ranked" in printed
    assert "(2 values: one step)" in printed


def test_samples_that_repeat_targets_of_a_short_store_are_said(tmp_path):
    """1,000 samples of a store with 283 positions past the longest context were 722 repeats, which
    PCA, the dimensions and the KDE read as samples of their own; only the neighbour estimators'
    line spoke of repeats."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "d.txt").write_text(shakespeare()[:136])  # 136 bytes: 120 positions past context 16
    store = ingest(src, tmp_path / "st", IngestConfig(tokenizer="byte"), progress=False).store
    adapter = byte_adapter(tiny_gpt(1, context=64), batch_size=8)
    o = entropy.Options(contexts=[4, 8, 16], samples=200, seed=0, estimators=[], kde_dims=0, n_components=[0])
    col = entropy_samples.collect_text(adapter, store, o, progress=False)
    distinct = len({tuple(r) for r in np.stack(col.features[2]).round(6).tolist()})
    assert col.info["target_positions"] == 120 and col.info["distinct_targets"] <= 120
    res, _ = entropy.analyze(col, o, progress=False)
    (line,) = [t for t in res["text"] if "distinct targets" in t]
    k = col.info["distinct_targets"]
    assert distinct <= k and line.startswith(f"the 200 samples hold {k} distinct targets ({200 - k} repeats")
    assert "give a store with more text, or lower --samples" in line


def test_components_past_the_samples_are_left_out_as_the_help_says():
    """--samples 200 --n-components 500 was refused ("too few for PCA over 500 components") where the
    help says an n past the samples is left out with a line."""
    rng = np.random.default_rng(1)
    feats = [rng.normal(size=(60, 128)).astype(np.float32) * (1 + i) for i in range(3)]
    col = entropy_samples.Collected([4, 8, 16], feats, rng.random((3, 60)), None, {"protocol": "text"})
    o = entropy.Options(contexts=[4, 8, 16], samples=60, n_components=[10, 500, 0], kde_dims=0, estimators=[])
    res, _ = entropy.analyze(col, o, progress=False)
    assert set(res["contexts"][0]["entropy"]) == {"10", "59"}
    assert res["text"][0].startswith(
        "intrinsic entropy over 500 components left out: the hidden states have 59"
    )
