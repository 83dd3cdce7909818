"""Intrinsic entropy and intrinsic dimension of a cloud of feature vectors (numpy only).

The measures of the intrinsic-entropy seed (§2.2.2, Appendix C, Appendix J.2), each a
plain function of an (N, D) matrix so the tests can feed them data of known geometry:

* ``relative_eigenvalues``: PCA eigenvalues (covariance spectrum, descending) divided by
  the largest. Scale-free, so features of different context lengths compare directly.
* ``pca_entropy``: sum of log relative eigenvalues over the first n components, the
  seed's "log of the volume" proxy S = sum log rel_eig + const.
* ``threshold_dimension``: how many relative eigenvalues are >= a threshold.
* ``kde_entropy``: leave-one-out Gaussian-KDE estimate of the differential entropy of
  the top-k principal coordinates (scaled like the relative eigenvalues).
* ``skdim_dimensions``: TwoNN, MLE and local-PCA estimates from ``scikit-dimension``. The two
  nearest-neighbour estimators (TwoNN, MLE) read each distinct point once: a repeated point (two
  samples with one hidden state, common at short contexts) has a neighbour at distance 0, and one
  such pair made scikit-dimension's MLE exactly 0.0 for the whole cloud.
* ``linear_fit``: least-squares line and Pearson r, to correlate a measure with the loss.

Trade-offs: eigenvalues come from the D x D covariance or the N x N Gram matrix,
whichever is smaller (the same nonzero spectrum); both cost one dense eigensolve. A
zero eigenvalue would make the log-sum infinite, so relative eigenvalues are floored at
``EIG_FLOOR`` (1e-12) before the log; an entropy over n components of a cloud of fewer than n + 1
distinct points is then mostly log(1e-12) per missing component, so ``measures`` gives it no value
there (None, with the count in ``entropy_floored``) rather than let the floor's sum drive its
correlation with the loss (a parity run's |r| 0.939 was 0.695 without the two floored contexts, and
0.898 with a floor of 1e-20). A component floored in a cloud of enough distinct points is one the
features lack at every context (a LayerNorm output lies in a hyperplane) and stays in the sum. The
KDE is exact (all pairs, in row chunks) rather than tree-based: O(N^2 k) is a second for N = 2,000
and has no tuning knobs.
"""

from __future__ import annotations

import math

import numpy as np

from contextlab.errors import UserError

EIG_FLOOR = 1e-12
SKDIM_ESTIMATORS = ("twonn", "mle", "lpca")


def _check_matrix(X: np.ndarray, need: int = 3) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise UserError(f"features must be a 2-d (samples, width) matrix, got shape {X.shape}")
    if X.shape[0] < need:
        raise UserError(f"{X.shape[0]} samples are too few for PCA (need at least {need}); raise --samples")
    if not np.isfinite(X).all():
        raise UserError("the features contain NaN or inf; evaluate in fp32 (--dtype fp32)")
    return X


def eigenvalues(X: np.ndarray) -> np.ndarray:
    """PCA eigenvalues of the centred (N, D) features, descending, length min(N - 1, D), clipped at 0."""
    X = _check_matrix(X)
    N, D = X.shape
    Xc = X - X.mean(0, keepdims=True)
    if D <= N:
        eig = np.linalg.eigvalsh(Xc.T @ Xc / (N - 1))  # (D,)
    else:
        eig = np.linalg.eigvalsh(Xc @ Xc.T / (N - 1))  # (N,): the same nonzero spectrum
    eig = np.clip(eig[::-1], 0.0, None)
    return eig[: min(N - 1, D)]


def relative_eigenvalues(X: np.ndarray) -> np.ndarray:
    """``eigenvalues(X) / eigenvalues(X)[0]`` (the largest is 1)."""
    eig = eigenvalues(X)
    if eig[0] <= 0:
        raise UserError("the features do not vary across samples (all PCA eigenvalues are 0)")
    return eig / eig[0]


def pca_entropy(rel: np.ndarray, n: int = 0) -> float:
    """Sum of log relative eigenvalues over the first n components (n = 0: all of them)."""
    n = n or len(rel)
    if n > len(rel):
        raise UserError(
            f"intrinsic entropy over {n} components needs at least {n} PCA components, but there are "
            f"{len(rel)} (= min(samples - 1, width)); lower --n-components or raise --samples"
        )
    return float(np.log(np.maximum(rel[:n], EIG_FLOOR)).sum())


def threshold_dimension(rel: np.ndarray, threshold: float) -> int:
    """Number of relative eigenvalues >= threshold (the index where the spectrum crosses it)."""
    return int((rel >= threshold).sum())


def kde_entropy(X: np.ndarray, dims: int, chunk: int = 512) -> float:
    """Leave-one-out Gaussian-KDE entropy (nats) of the top ``dims`` principal coordinates.

    Coordinates are divided by the square root of the largest eigenvalue (the scale of the
    relative eigenvalues). The kernel covariance is Scott's factor squared times the
    (diagonal) covariance of the coordinates, as ``scipy.stats.gaussian_kde`` uses;
    entropy = -mean_i log p_{-i}(x_i).
    """
    X = _check_matrix(X, need=max(3, dims + 2))
    N = X.shape[0]
    Xc = X - X.mean(0, keepdims=True)
    _, s, vt = np.linalg.svd(Xc, full_matrices=False)
    k = min(dims, len(s))
    Z = Xc @ vt[:k].T  # (N, k) principal coordinates
    Z = Z / max(s[0] / math.sqrt(N - 1), 1e-300)
    var = Z.var(0, ddof=1)  # (k,)
    keep = var > 0
    Z, var = Z[:, keep], var[keep]
    k = Z.shape[1]
    h2 = N ** (-2.0 / (k + 4)) * var  # (k,) kernel variances, Scott's rule
    W = Z / np.sqrt(h2)  # whitened by the kernel: the kernel is N(0, I) here
    sq = (W * W).sum(1)  # (N,)
    log_norm = -0.5 * (k * math.log(2 * math.pi) + np.log(h2).sum()) - math.log(N - 1)
    logp = np.empty(N)
    for a in range(0, N, chunk):
        d2 = sq[a : a + chunk, None] + sq[None, :] - 2.0 * W[a : a + chunk] @ W.T  # (c, N)
        d2[np.arange(d2.shape[0]), np.arange(a, a + d2.shape[0])] = np.inf  # leave one out
        m = -0.5 * np.maximum(d2, 0.0)
        top = m.max(1, keepdims=True)
        logp[a : a + chunk] = (top[:, 0] + np.log(np.exp(m - top).sum(1))) + log_norm
    return float(-logp.mean())


def skdim_dimensions(
    X: np.ndarray, names: list[str] | tuple[str, ...] = SKDIM_ESTIMATORS, distinct: np.ndarray | None = None
) -> dict[str, float]:
    """Global intrinsic-dimension estimates from scikit-dimension: twonn, mle and/or lpca. ``distinct``:
    ``distinct_rows(X)`` when the caller has it (the neighbour estimators read it)."""
    unknown = [n for n in names if n not in SKDIM_ESTIMATORS]
    if unknown:
        raise UserError(
            f"unknown intrinsic-dimension estimator(s) {', '.join(unknown)}; choose from "
            f"{', '.join(SKDIM_ESTIMATORS)}"
        )
    if not names:
        return {}
    try:
        import warnings

        from skdim import id as skid
    except ImportError:
        raise UserError(
            "the TwoNN/MLE/lPCA estimators need scikit-dimension: pip install scikit-dimension "
            "(it is in the dev extra), or pass --estimators '' to skip them"
        ) from None
    X = _check_matrix(X, need=12)
    make = {
        "twonn": lambda: skid.TwoNN(),
        "mle": lambda: skid.MLE(),  # its K = 20 nearest neighbours
        "lpca": lambda: skid.lPCA(verbose=False),
    }
    if distinct is None and set(names) & set(NEIGHBOUR_ESTIMATORS):
        distinct = distinct_rows(X)
    out = {}
    for name in names:
        points = distinct if name in NEIGHBOUR_ESTIMATORS else X
        if len(points) < NEIGHBOUR_ESTIMATORS.get(name, 0):
            out[name] = float("nan")  # too few distinct points: no estimate (the analysis says so)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[name] = float(make[name]().fit(points).dimension_)
    return out


NEIGHBOUR_ESTIMATORS = {
    "twonn": 12,
    "mle": 21,
}  # estimators of nearest-neighbour distances: distinct points needed


def distinct_rows(X: np.ndarray) -> np.ndarray:
    """The distinct rows of ``X`` (each repeated row once), in their first order."""
    _, first = np.unique(np.asarray(X), axis=0, return_index=True)
    return np.asarray(X)[np.sort(first)]


def linear_fit(x, y) -> dict:
    """Least-squares y = slope * x + intercept and the Pearson r over the points where both are finite
    (an estimator can give no finite value at a context); NaN when fewer than two remain or x or y is
    constant."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    finite = np.isfinite(x) & np.isfinite(y)
    x, y = x[finite], y[finite]
    nan = float("nan")
    none = {"slope": nan, "intercept": nan, "r": nan, "r2": nan, "p_value": None, "r_interval95": None}
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return none
    slope, intercept = np.polyfit(x, y, 1)
    r = float(np.corrcoef(x, y)[0, 1])
    return {
        "slope": float(slope),
        "intercept": float(intercept),
        "r": r,
        "r2": r * r,
        **correlation_uncertainty(r, len(x)),
    }


def correlation_uncertainty(r: float, n: int) -> dict:
    """The two-sided p-value of Pearson's ``r`` over ``n`` points (t with n - 2 degrees of freedom;
    None for n < 3) and its 95% interval (Fisher's z, None for n < 4): six contexts give |r| 0.8 by
    chance often enough that an r without them reads as a finding it is not."""
    from scipy import stats

    p = None
    if n >= 3:
        t = r * np.sqrt((n - 2) / max(1e-300, 1 - r * r))
        p = float(2 * stats.t.sf(abs(t), n - 2))
    interval = None
    if n >= 4:
        z, half = np.arctanh(np.clip(r, -0.999999, 0.999999)), 1.959963984540054 / np.sqrt(n - 3)
        interval = [float(np.tanh(z - half)), float(np.tanh(z + half))]
    return {"p_value": p, "r_interval95": interval}


def measures(
    X: np.ndarray, *, n_components: list[int], thresholds: list[float], kde_dims: int, estimators: list[str]
) -> tuple[dict, np.ndarray]:
    """All measures of one feature cloud: ({"entropy": {n: S}, "dimension": {thr: d}, ...},
    relative eigenvalues)."""
    rel = relative_eigenvalues(X)
    distinct = distinct_rows(X)  # what TwoNN and MLE read, and what bounds the rank of the cloud
    entropy, floored = {}, {}
    for n in n_components:
        key, value = str(n or len(rel)), pca_entropy(rel, n)  # (raises when n exceeds the components)
        below = int((rel[: n or len(rel)] < EIG_FLOOR).sum())
        # fewer distinct points than n + 1: components past their span are zero for want of samples, and
        # the sum is the floor's (a floored component of the feature space itself, LayerNorm's lost
        # direction, is there at every context alike and kept)
        short = len(distinct) < (n or len(rel)) + 1
        entropy[key] = None if below and short else value
        if below:
            floored[key] = below
    out: dict = {
        "entropy": entropy,
        "dimension": {f"{t:g}": threshold_dimension(rel, t) for t in thresholds},
        "floored_components": int((rel < EIG_FLOOR).sum()),
        "distinct_samples": len(distinct),
    }
    if floored:
        out["entropy_floored"] = floored  # per n: how many of the first n components are below the floor
    if kde_dims:
        out["kde_entropy"] = kde_entropy(X, kde_dims)
    if set(estimators) & set(NEIGHBOUR_ESTIMATORS):
        out.update(skdim_dimensions(X, estimators, distinct))
    else:
        out.update(skdim_dimensions(X, estimators))
    return out, rel


def measure_series(per: list[dict]) -> dict[str, list[float]]:
    """Every measure as one value per context: 'entropy@n', 'dimension@thr', 'kde_entropy', 'twonn', ..."""
    out: dict[str, list[float]] = {}
    for key in per[0]["entropy"]:
        out[f"entropy@{key}"] = [r["entropy"][key] for r in per]
    for key in per[0]["dimension"]:
        out[f"dimension@{key}"] = [float(r["dimension"][key]) for r in per]
    for key in ("kde_entropy", *SKDIM_ESTIMATORS):
        if key in per[0]:
            out[key] = [r[key] for r in per]
    return out
