"""Intrinsic entropy / dimension measures on data of known geometry."""

from __future__ import annotations

import math

import numpy as np
import pytest

from contextlab.analysis import intrinsic
from contextlab.errors import UserError


def _rotation(d: int, seed: int) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q


def test_pca_entropy_of_gaussian_matches_the_analytic_value():
    lam = np.array([4.0, 2.5, 1.0, 0.6, 0.3, 0.1, 0.05, 0.02])  # known covariance spectrum
    R = _rotation(len(lam), 0)
    X = np.random.default_rng(1).normal(size=(40_000, len(lam))) * np.sqrt(lam) @ R.T  # cov = R diag(lam) R^T
    rel = intrinsic.relative_eigenvalues(X)
    assert rel[0] == 1.0 and np.all(np.diff(rel) <= 0)
    for n in (3, 5, 8):
        analytic = float(np.log(lam[:n] / lam[0]).sum())
        assert intrinsic.pca_entropy(rel, n) == pytest.approx(analytic, abs=0.06), n
    assert intrinsic.pca_entropy(rel, 0) == intrinsic.pca_entropy(rel, 8)
    with pytest.raises(UserError, match="needs at least 9 PCA components"):
        intrinsic.pca_entropy(rel, 9)


def test_eigenvalues_from_gram_equal_those_from_covariance():
    X = np.random.default_rng(2).normal(size=(20, 50))  # N < D: Gram path
    eig = intrinsic.eigenvalues(X)
    full = np.linalg.eigvalsh(np.cov(X.T))[::-1][:19]
    assert len(eig) == 19 and np.allclose(eig, full, atol=1e-10)


@pytest.mark.parametrize("k", [1, 4, 9])
def test_threshold_dimension_of_a_k_dimensional_subspace_is_k(k):
    rng = np.random.default_rng(k)
    basis = _rotation(40, k)[:, :k]  # (D, k) orthonormal
    scales = np.linspace(1.0, 0.6, k)  # every direction keeps >= 0.36 of the top variance
    X = (rng.normal(size=(3000, k)) * scales) @ basis.T + 1e-4 * rng.normal(size=(3000, 40))
    rel = intrinsic.relative_eigenvalues(X)
    for thr in (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25):
        assert intrinsic.threshold_dimension(rel, thr) == k


def test_kde_entropy_of_gaussian_is_its_cross_entropy_with_the_smoothed_gaussian():
    """For Gaussian data the leave-one-out KDE estimate tends to E_p[-log (p * kernel)], which is analytic."""
    N, k = 3000, 3
    X = np.random.default_rng(3).normal(size=(N, k)) * np.array([1.0, 0.7, 0.4])
    h2 = N ** (-2.0 / (k + 4))  # Scott's factor squared: the kernel covariance is h2 * the data covariance
    var = intrinsic.relative_eigenvalues(X)  # the coordinates are scaled by the largest eigenvalue
    expected = float(sum(0.5 * math.log(2 * math.pi * v * (1 + h2)) + 0.5 / (1 + h2) for v in var))
    assert intrinsic.kde_entropy(X, k) == pytest.approx(expected, abs=0.05)
    flat = X * np.array([1.0, 1.0, 0.1])  # a flatter cloud has less entropy (relative to its largest axis)
    assert intrinsic.kde_entropy(flat, k) < intrinsic.kde_entropy(X, k) - 1.5


def test_skdim_estimators_find_the_subspace_dimension():
    rng = np.random.default_rng(4)
    X = rng.uniform(-1, 1, size=(1500, 5)) @ _rotation(20, 5)[:, :5].T  # 5-d cube inside 20-d
    dims = intrinsic.skdim_dimensions(X)
    assert set(dims) == {"twonn", "mle", "lpca"}
    for name, d in dims.items():
        assert abs(d - 5) < 1.0, (name, d)
    with pytest.raises(UserError, match="unknown intrinsic-dimension estimator"):
        intrinsic.skdim_dimensions(X, ["pca2"])


def test_a_repeated_point_does_not_zero_the_neighbour_estimators():
    """One pair of identical samples (two windows with one hidden state) made scikit-dimension's MLE
    exactly 0.0 for the whole cloud, a number a user's parity and text analyses reported as the
    dimension. The neighbour estimators now read each distinct point once."""
    from skdim import id as skid

    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, size=(1500, 5)) @ _rotation(20, 5)[:, :5].T
    X[1] = X[0]
    assert skid.MLE().fit(X).dimension_ == 0.0  # the library itself: why the rows are made distinct
    dims = intrinsic.skdim_dimensions(X)
    assert all(abs(d - 5) < 1.0 for d in dims.values()), dims
    assert len(intrinsic.distinct_rows(X)) == 1499
    few = np.repeat(X[:15], 4, axis=0)  # 15 distinct points: TwoNN reads them, MLE (20 neighbours) cannot
    got = intrinsic.skdim_dimensions(few, ["twonn", "mle"])
    assert np.isfinite(got["twonn"]) and np.isnan(got["mle"])


def test_linear_fit_and_small_inputs():
    x = np.array([1.0, 2.0, 3.0, 5.0])
    fit = intrinsic.linear_fit(x, 2.0 - 0.5 * x)
    assert fit["slope"] == pytest.approx(-0.5) and fit["intercept"] == pytest.approx(2.0)
    assert fit["r"] == pytest.approx(-1.0)
    assert math.isnan(intrinsic.linear_fit(x, np.ones(4))["r"])
    with pytest.raises(UserError, match="too few for PCA"):
        intrinsic.relative_eigenvalues(np.ones((2, 5)))
    with pytest.raises(UserError, match="do not vary"):
        intrinsic.relative_eigenvalues(np.ones((10, 5)))


def test_missing_scikit_dimension_is_one_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "skdim", None)  # import skdim now raises ImportError
    X = np.random.default_rng(5).normal(size=(50, 4))
    with pytest.raises(UserError, match="pip install scikit-dimension"):
        intrinsic.skdim_dimensions(X, ["twonn"])
    assert intrinsic.skdim_dimensions(X, []) == {}


def test_a_correlation_carries_its_p_value_and_interval():
    """A user's entropy analysis headlined |r| 0.976 over 6 contexts whose loss moved less than its
    stderr, with no interval or p-value: each fit now carries both (scipy's pearsonr p, Fisher's z)."""
    import numpy as np
    from scipy import stats

    from contextlab.analysis.intrinsic import linear_fit

    rng = np.random.default_rng(0)
    x = np.arange(6.0)
    y = 0.3 * x + rng.normal(0, 1, 6)
    fit = linear_fit(x, y)
    want = stats.pearsonr(x, y)
    assert fit["r"] == pytest.approx(want.statistic) and fit["p_value"] == pytest.approx(want.pvalue)
    lo, hi = want.confidence_interval(0.95)
    assert fit["r_interval95"] == pytest.approx([lo, hi], rel=1e-6)
    assert linear_fit([1.0, 2.0], [3.0, 1.0])["p_value"] is None  # two points: r is +-1, no test
