"""Small statistics every measurement reports: Wilson intervals, means with standard errors, one-line texts.

An accuracy is read with its uncertainty or not at all: ``proportion`` gives the 95% Wilson
score interval (Wilson 1927), which stays inside [0, 1] and keeps its coverage at the small
n and extreme rates that retrieval tasks produce (0/30, 30/30), where the normal interval
``p +- 1.96 se`` collapses to a point. ``mean_stderr`` is the plain mean with its standard
error (sample standard deviation / sqrt(n)). Trade-off: closed forms with no resampling, so
they are cheap enough to attach to every number. Outcomes that share a cluster (the rotations of
one candidate set, a test question asked with several example sets) are correlated: for a model
that retrieves part of the time positively, so an interval that took them as independent would be
too narrow; ``proportion(..., clusters=...)`` widens it by the clusters' design effect.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``successes / n`` (``(nan, nan)`` when n = 0)."""
    if n <= 0:
        return float("nan"), float("nan")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)  # exact ends, not 1.7e-18 of rounding
    hi = 1.0 if successes >= n else min(1.0, centre + half)
    return lo, hi


def proportion(
    outcomes: Sequence[bool] | Sequence[float] | np.ndarray, z: float = Z95, clusters=None
) -> dict:
    """Mean of 0/1 outcomes with its Wilson interval: {"accuracy", "n", "ci95": [lo, hi]}.

    ``clusters``: a label per outcome for outcomes that are not independent (the rotations of one
    candidate set, one test question asked with several example sets). The interval is then Wilson's
    at the effective sample size ``n_effective`` = p(1-p) / (the cluster-robust variance of p), at
    most n (Kish's design effect): as wide as the clusters' agreement says, and never narrower than
    independent outcomes give. With one cluster, one outcome a cluster, or p at 0 or 1 (no variance
    to read), n is used."""
    c = np.asarray(outcomes, dtype=float)
    n = len(c)
    acc = float(c.mean()) if n else float("nan")
    if clusters is None:
        lo, hi = wilson(float(c.sum()), n, z)
        return {"accuracy": acc, "n": n, "ci95": [lo, hi]}
    n_eff = effective_n(c, np.asarray(clusters))
    lo, hi = wilson(acc * n_eff, n_eff, z) if n else (float("nan"), float("nan"))
    return {"accuracy": acc, "n": n, "ci95": [lo, hi], "n_effective": n_eff}


def effective_n(outcomes: np.ndarray, clusters: np.ndarray) -> float:
    """n divided by the design effect of ``clusters``: p(1-p) over the cluster-robust variance of the
    mean (the sum over clusters of (s_g - p n_g)^2 / n^2, times G/(G-1)), between 1 and n."""
    n = len(outcomes)
    _, inverse = np.unique(clusters, return_inverse=True)
    sums, counts = np.bincount(inverse, outcomes), np.bincount(inverse).astype(float)
    G = len(sums)
    p = float(outcomes.mean()) if n else 0.0
    var = float(((sums - p * counts) ** 2).sum()) / n**2 * G / (G - 1) if G > 1 and n else 0.0
    if G < 2 or n == G or var <= 0 or p in (0.0, 1.0):  # G == n: every outcome its own cluster
        return float(n)
    return float(min(n, max(1.0, p * (1 - p) / var)))


def mean_stderr(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """(mean, standard error of the mean); the error is nan for fewer than two values."""
    v = np.asarray(values, dtype=float)
    if len(v) == 0:
        return float("nan"), float("nan")
    se = float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else float("nan")
    return float(v.mean()), se


def contains(interval: Sequence[float], value: float) -> bool:
    """Whether ``value`` lies in the closed interval [lo, hi]."""
    return interval[0] <= value <= interval[1]


def accuracy_line(
    name: str,
    accuracy: float,
    ci95: Sequence[float],
    n: int,
    chance: float | None = None,
    calibrated: float | None = None,
    n_effective: float | None = None,
) -> str:
    """'accuracy 0.20 [0.16, 0.25] of n=500, chance 0.20, calibrated +0.01 nats' (parts given only; an
    ``n_effective`` below n, the interval's, is said: 'of n=500 (as 120 independent)')."""
    text = f"{name} {accuracy:.2f} [{ci95[0]:.2f}, {ci95[1]:.2f}] of n={n}"
    if n_effective is not None and n_effective < n - 0.5:
        text += f" (as {n_effective:.0f} independent)"
    if chance is not None:
        text += f", chance {chance:.2f}"
    if calibrated is not None and not math.isnan(calibrated):
        text += f", calibrated {calibrated:+.2f} nats"
    return text


def paired_t(early: np.ndarray, late: np.ndarray, docs) -> dict:
    """Per-document paired difference ``early - late`` of per-piece losses (pieces of a document
    averaged first): its mean over documents and 95% Student-t interval (None with fewer than two
    documents). Contextwise's first-to-last-bucket drop (a context gain is ``context_gain``: a mean
    over targets)."""
    from scipy import stats as sps

    diff = early - late  # (N,) one per piece
    ids, inverse = np.unique(np.asarray(docs), return_inverse=True)
    per_doc = np.bincount(inverse, weights=diff) / np.bincount(inverse)  # (n_docs,)
    n, gain = len(ids), float(per_doc.mean())
    if n < 2:
        return {"gain": gain, "interval95": None, "n_documents": n}
    half = float(sps.t.ppf(0.975, n - 1) * per_doc.std(ddof=1) / math.sqrt(n))
    return {"gain": gain, "interval95": [gain - half, gain + half], "n_documents": n}


def mean_interval(values: np.ndarray, docs) -> list[float] | None:
    """The 95% cluster-robust t interval over documents of the mean of per-piece ``values`` (pieces
    of one document share its text; ``paired_stats.cluster_t``); None with fewer than two documents.
    Contextwise's best-context loss: a number read from 4 held-out files is told apart from one of
    400 by its interval."""
    from contextlab.eval.paired_stats import cluster_t, per_cluster

    return cluster_t(*per_cluster(np.asarray(values, np.float64), docs))["interval95"]


def context_gain(one: np.ndarray, full: np.ndarray, docs) -> dict:
    """The context gain of paired target losses: the mean over targets of ``one - full`` (each
    target's loss with one visible token minus with all of its context), with a 95% cluster-robust
    t interval over documents (targets of one document share their text; ``paired_stats.cluster_t``)."""
    from contextlab.eval.paired_stats import cluster_t, per_cluster

    d = cluster_t(*per_cluster(np.asarray(one, np.float64) - np.asarray(full, np.float64), docs))
    return {"gain": d["diff"], "interval95": d["interval95"], "n_documents": d["n_clusters"]}
