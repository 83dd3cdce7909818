"""The bootstrap's refits of C0 + C / l^gamma, all resamples at once (``contextlab.eval.refits``),
against ``curve_fit`` on each resample: the same fits where the points pin them down, and never a
worse one where they do not (``curve_fit`` started at the reported fit may stop short there)."""

from __future__ import annotations

import numpy as np
import pytest

from contextlab.errors import UserError
from contextlab.eval import bayes_fit as bf
from contextlab.eval.refits import refit_resamples

LENGTHS = [1, 2, 4, 8, 16, 32, 64, 128, 255]


def _curve(level: float, c: float, gamma: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = np.asarray(LENGTHS, float)[:, None]
    losses = level + c / x**gamma + rng.normal(0, 1, (len(LENGTHS), 512))
    return bf.document_sums(losses, rng.integers(36, size=512))


def _weighted_error(params, sums, sq, counts, w) -> float:
    n = (counts * w).sum()
    mean = (sums * w).sum(1) / n
    sem = np.sqrt(np.maximum((sq * w).sum(1) / n - mean**2, 0) / (n - 1))
    return float(
        (((mean - bf.power_law(np.asarray(LENGTHS, float), *params)) / np.maximum(sem, 1e-6)) ** 2).sum()
    )


def _curve_fits(sums, sq, counts, weights):
    point = bf.fit_of_sums(LENGTHS, sums, sq, counts)
    rows = []
    for w in weights:
        try:
            f = bf.fit_of_sums(LENGTHS, sums * w, sq * w, counts * w, point)
            rows.append([f["C0"], f["C"], f["gamma"]])
        except UserError:
            rows.append([np.nan] * 3)
    return np.asarray(rows)


def test_the_refits_are_curve_fits_of_each_resample_where_the_points_pin_the_fit_down():
    sums, sq, counts = _curve(4.5, 2.0, 0.6)
    weights = bf.resample_weights(len(counts), 100, 0)
    ours = refit_resamples(LENGTHS, sums, sq, counts, weights, bf.GAMMA_BOUNDS)
    theirs = _curve_fits(sums, sq, counts, weights)
    assert np.isfinite(ours).all() and np.isfinite(theirs).all()
    assert np.abs(ours[:, 2] - theirs[:, 2]).max() < 1e-4  # gamma (3e-6 measured)
    assert np.abs(ours[:, :2] - theirs[:, :2]).max() < 1e-3  # C0 and C
    assert ours.std(0, ddof=1) == pytest.approx(theirs.std(0, ddof=1), rel=1e-4)


def test_on_a_flat_curve_no_refit_is_worse_than_curve_fits_and_some_are_better():
    sums, sq, counts = _curve(7.6, 0.025, 0.6)  # a random or barely trained model's curve
    weights = bf.resample_weights(len(counts), 60, 0)
    ours = refit_resamples(LENGTHS, sums, sq, counts, weights, bf.GAMMA_BOUNDS)
    theirs = _curve_fits(sums, sq, counts, weights)
    lo, hi = bf.GAMMA_BOUNDS
    assert ((ours[:, 2] >= lo) & (ours[:, 2] <= hi)).all()
    gaps = []
    for w, a, b in zip(weights, ours, theirs):
        if np.isfinite(b).all():
            gaps.append(_weighted_error(a, sums, sq, counts, w) - _weighted_error(b, sums, sq, counts, w))
    assert max(gaps) < 1e-6 and min(gaps) < -1e-3, (max(gaps), min(gaps))


def test_a_resample_with_nothing_to_fit_is_a_row_of_nan_and_is_counted():
    sums, sq, counts = _curve(4.5, 2.0, 0.6)
    weights = bf.resample_weights(len(counts), 5, 0)
    weights[2] = np.zeros_like(weights[2])  # no document drawn
    rows = refit_resamples(LENGTHS, sums, sq, counts, weights, bf.GAMMA_BOUNDS)
    assert np.isnan(rows[2]).all() and np.isfinite(np.delete(rows, 2, axis=0)).all()
    refits, failed = bf.refits_of_sums(LENGTHS, sums, sq, counts, weights)
    assert failed == 1 and len(refits) == 4 and set(refits[0]) == {"C0", "C", "gamma"}
