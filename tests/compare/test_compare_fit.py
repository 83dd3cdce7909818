"""Paired comparison of Bayes-risk fits: known shifts recovered, documents as clusters, real results."""

from __future__ import annotations

import numpy as np
import pytest

from contextlab.compare.paired import Options, compare_runs
from contextlab.eval import bayes_fit
from contextlab.eval.paired_stats import cluster_t, per_cluster
from contextlab.eval.results import write_result
from tests.eval.conftest import byte_adapter, tiny_gpt

LENGTHS = [1, 2, 4, 8, 16, 32]


def fit_result(run, losses: np.ndarray, targets: np.ndarray) -> dict:
    """A bayes-fit result in RUN/eval with per-target losses (L, N), its summary fitted as the eval does."""
    mean, sem = losses.mean(1), losses.std(1, ddof=1) / np.sqrt(losses.shape[1])
    fit = bayes_fit.fit_power_law(LENGTHS, mean, sem)
    write_result(
        run / "eval",
        "bayes-fit",
        results={"summary": fit, "lengths": LENGTHS, "loss": mean.tolist(), "fit": fit},
        options={"lengths": LENGTHS, "samples": losses.shape[1], "seed": 0},
        model={"id": run.name, "path": str(run)},
        data={"store": "s", "hash": "f" * 64},
        seconds=0.0,
        arrays={"targets": targets, "target_losses": losses},
    )
    return fit


def synthetic(seed: int, n_docs: int = 40, per_doc: int = 5):
    """Losses 2 + 3 / l^0.6 per target, a per-document offset and per-target noise; targets (doc, pos)."""
    rng = np.random.default_rng(seed)
    docs = np.repeat(np.arange(n_docs), per_doc)
    targets = np.stack([docs, 100 + np.arange(len(docs))], 1).astype(np.int64)
    curve = 2 + 3 / np.power(np.asarray(LENGTHS, float), 0.6)  # (L,)
    losses = curve[:, None] + rng.normal(0, 0.3, n_docs)[docs] + rng.normal(0, 0.2, (len(LENGTHS), len(docs)))
    return losses, targets


def test_a_constant_shift_moves_c0_by_the_shift_and_leaves_gamma(tmp_path):
    losses, targets = synthetic(0)
    noise = np.random.default_rng(1).normal(0, 0.02, losses.shape)
    fa = fit_result(tmp_path / "a", losses - 0.1 + noise, targets)
    fb = fit_result(tmp_path / "b", losses, targets)
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", ["bayes-fit"], Options(resamples=200), None)
    r = doc["results"]
    for p in ("C0", "gamma"):  # the point estimates are the two reported fits
        assert r["fit"][p]["a"] == pytest.approx(fa[p], rel=1e-6) and r["fit"][p]["b"] == pytest.approx(fb[p])
    c0, gamma = r["fit"]["C0"], r["fit"]["gamma"]
    assert c0["diff"] == pytest.approx(-0.1, abs=0.01) and c0["interval95"][0] < -0.1 < c0["interval95"][1]
    assert c0["interval95"][1] < 0 and gamma["interval95"][0] < 0 < gamma["interval95"][1]
    assert r["fit"]["resamples"] + r["fit"]["failed"] == 200
    docs = targets[:, 0]
    for i, row in enumerate(r["by_length"]):  # per length: the paired cluster t interval over documents
        ref = cluster_t(*per_cluster(losses[i] - 0.1 + noise[i] - losses[i], docs))
        assert row["diff"] == pytest.approx(ref["diff"]) and row["interval95"] == pytest.approx(
            ref["interval95"]
        )
        assert row["n_clusters"] == 40 and row["interval95"][0] < -0.1 < row["interval95"][1]
    assert doc["lines"][0].startswith("bayes-fit C0 A - B = -0.1")


def test_the_bootstrap_resamples_documents_not_targets(tmp_path):
    """Targets of one document share its offset: resampling documents gives a wider interval for C0
    than the same differences would get if every target were its own document."""
    losses_a, targets = synthetic(2, n_docs=20, per_doc=10)
    losses_b, _ = synthetic(3, n_docs=20, per_doc=10)
    fit_result(tmp_path / "a", losses_a, targets)
    fit_result(tmp_path / "b", losses_b, targets)
    own = targets.copy()
    own[:, 0] = np.arange(len(own))  # every target its own document
    fit_result(tmp_path / "c", losses_a, own)
    fit_result(tmp_path / "d", losses_b, own)
    o = Options(resamples=300)
    _, (clustered,) = compare_runs(tmp_path / "a", tmp_path / "b", ["bayes-fit"], o, tmp_path / "o1")
    _, (flat,) = compare_runs(tmp_path / "c", tmp_path / "d", ["bayes-fit"], o, tmp_path / "o2")
    width = [np.diff(d["results"]["fit"]["C0"]["interval95"])[0] for d in (clustered, flat)]
    assert clustered["results"]["fit"]["C0"]["diff"] == pytest.approx(flat["results"]["fit"]["C0"]["diff"])
    assert width[0] > 1.5 * width[1]


def test_real_bayes_fit_results_of_two_models_pair_and_compare(tmp_path, byte_store):
    from contextlab.eval import evaluate

    runs = [tmp_path / "a", tmp_path / "b"]
    options = bayes_fit.Options(lengths=[1, 2, 4, 8], samples=12)
    for seed, run in enumerate(runs):
        evaluate("bayes-fit", byte_adapter(tiny_gpt(seed)), options, str(byte_store.path), run / "eval")
    _, (doc,) = compare_runs(*runs, ["bayes-fit"], Options(resamples=100), tmp_path / "o")
    for row, la, lb in zip(
        doc["results"]["by_length"], *(np.load(run / "eval" / "bayes-fit.target_losses.npy") for run in runs)
    ):
        assert row["diff"] == pytest.approx(float((la - lb).mean()))
    la, lb = (np.load(run / "eval" / "bayes-fit.target_losses.npy") for run in runs)
    gain = doc["results"][
        "context_gain"
    ]  # the context gains' paired difference: (1 - 8 visible) of A minus B's
    assert gain["diff"] == pytest.approx(float(((la[0] - la[-1]) - (lb[0] - lb[-1])).mean()))
    assert gain["a"] - gain["b"] == pytest.approx(gain["diff"]) and gain["visible"] == [1, 8]
    assert (tmp_path / "o" / "compare_bayes-fit.png").stat().st_size > 1000


def test_an_ill_determined_fit_is_named_in_the_notes(tmp_path):
    """A side whose C0 or gamma its refits spread over more than half its value gets a note (a user read
    'C0 A - B = +0.016 [-0.003, +36.673]' with gamma 0.43 +- 0.78 and no word of warning); a degenerate
    one says its differences get no interval; a well determined pair of fits gets none."""
    from contextlab.compare.fit import ill_determined

    loose = {"C0": 2.0, "C0_err": 0.1, "gamma": 0.43, "gamma_err": 0.78}
    tight = {"C0": 2.0, "C0_err": 0.1, "gamma": 0.6, "gamma_err": 0.05}
    assert ill_determined([tight, loose], ("a", "b"), stopped=False) == [
        "the fit of b is loose (gamma 0.43 ± 0.78, the spread of its refits over documents): its C0 and "
        "gamma, and their differences, are wide; more visible lengths (--lengths) or targets (--samples) "
        "narrow them"
    ]
    stuck = {"C0": -1035.0, "C0_err": 9e5, "gamma": 0.0, "gamma_err": 3.0}
    (note,) = ill_determined([tight, stuck], ("a", "b"), stopped=True)
    assert note.startswith("the fit of b is degenerate (C0 -1.04e+03 ± 9e+05, gamma 0 ± 3)")
    assert "get no interval" in note
    losses, targets = synthetic(0)
    fit_result(tmp_path / "a", losses - 0.1, targets)
    fit_result(tmp_path / "b", losses, targets)
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", ["bayes-fit"], Options(resamples=1000), None)
    assert not any("the fit of" in n for n in doc["notes"]) and "point" not in doc["results"]["fit"]


def test_a_fit_loose_by_curve_fit_alone_is_bootstrapped():
    """curve_fit's covariance treats the lengths' means as independent, though they are losses of the same
    targets: it called gamma loose (0.995 +- 0.62 once) where the document bootstrap pins it (sd 0.25).
    Only a degenerate fit (gamma at a bound, a covariance far above the value) skips the bootstrap."""
    fit = {"C0": 4.4, "C0_err": 0.1, "C": 0.7, "C_err": 0.2, "gamma": 0.995, "gamma_err": 0.62}
    assert not bayes_fit.degenerate(fit) and not bayes_fit.degenerate({**fit, "gamma_err": 9e5})
    assert bayes_fit.degenerate({**fit, "gamma": 0.0}) and bayes_fit.degenerate({**fit, "C0_err": np.inf})
    assert bayes_fit.degenerate({**fit, "wild": True})  # its first refits spread over twice the value


def test_a_fit_curve_fit_calls_degenerate_but_the_documents_pin_down_is_bootstrapped(tmp_path):
    """A user's fit: gamma 0.594 ± 2.4 by curve_fit's covariance, so 'degenerate' and no bootstrap, and
    compare gave C0 and gamma no interval; the user's bootstrap over documents gave gamma [0.37, 1.24]. The
    targets' own losses vary far more than the curve moves, and every length scores the same targets."""
    lengths = [1, 2, 4, 8, 16, 32, 64, 128, 255]
    x = np.asarray(lengths, float)[:, None]
    rng = np.random.default_rng(0)
    docs = rng.integers(24, size=256)
    losses = 5.0 + 0.2 / x**0.6 + rng.normal(0, 3.0, 256)[None, :] + rng.normal(0, 0.05, (9, 256))
    point = bayes_fit.fit_power_law(lengths, losses.mean(1), losses.std(1, ddof=1) / 16)
    assert point["gamma_err"] > 2 * point["gamma"]  # what the screen read as degenerate
    got = bayes_fit.bootstrap_fit(lengths, losses, docs, point, 0)
    assert got["errors"] == "bootstrap over 24 documents, 1000 refits" and not bayes_fit.degenerate(got)
    lo, hi = got["gamma_interval95"]
    assert lo < 0.6 < hi and hi - lo < 0.3 and got["gamma_err"] < point["gamma_err"] / 10


def test_a_loose_fit_is_not_bootstrapped_and_its_differences_say_why(tmp_path):
    """A flat curve (a model that gains nothing from context) has no C0 or gamma to speak of: its refits
    ended wherever the optimizer stopped, and took minutes; now the differences get no interval and the
    line says why, while the per-length differences keep theirs."""
    losses, targets = synthetic(0)
    flat = 4.0 + np.random.default_rng(1).normal(0, 0.2, losses.shape)
    fit_result(tmp_path / "a", losses, targets)
    fit_result(tmp_path / "b", flat, targets)
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", ["bayes-fit"], Options(resamples=1000), None)
    fit = doc["results"]["fit"]
    assert fit["resamples"] == 0 and fit["C0"]["interval95"] is None and fit["gamma"]["interval95"] is None
    assert fit["C0"]["diff"] == pytest.approx(fit["C0"]["a"] - fit["C0"]["b"])
    c0 = next(line for line in doc["lines"] if line.startswith("bayes-fit C0"))
    assert "[no interval: a fit is degenerate, not bootstrapped] over 40 documents (A " in c0
    assert "bootstrap of" not in c0
    assert any(n.startswith("the fit of b is degenerate") and "get no interval" in n for n in doc["notes"])
    assert all(row["interval95"] is not None for row in doc["results"]["by_length"])


def test_fits_over_too_few_documents_get_no_bootstrap_interval(tmp_path):
    """Resampling one document gives that document every time: the interval had zero width and the side
    read as tight. Below bayes-fit's MIN_DOCUMENTS the differences have no interval, said."""
    losses, targets = synthetic(0, n_docs=2, per_doc=20)
    fit_result(tmp_path / "a", losses - 0.1, targets)
    fit_result(tmp_path / "b", losses, targets)
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", ["bayes-fit"], Options(resamples=200), None)
    fit = doc["results"]["fit"]
    assert fit["resamples"] == 0 and fit["C0"]["interval95"] is None
    assert fit["C0"]["no_interval"] == "2 document(s), too few to resample"
