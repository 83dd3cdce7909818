"""The statistics of paired comparisons: a cluster t interval, a cluster bootstrap, McNemar counts.

Paired differences are not independent draws: the pieces of one document, the tokens of one
document and the k prompts of one balanced candidate set share their text. Every interval
here therefore resamples or sums over *clusters* (documents, candidate sets, example sets),
never over the correlated units inside them:

* ``cluster_t`` (loss differences): the mean over units (pieces or tokens) of A - B, which
  is exactly the difference of the two reported numbers, with the cluster-robust standard
  error of that ratio mean (the sandwich estimator with the G/(G-1) correction) and a
  Student-t quantile on G-1 degrees of freedom. With one unit per cluster it is the ordinary
  paired t interval. Chosen over a bootstrap for losses because it is deterministic and keeps
  its coverage with few documents (a percentile bootstrap over 7 documents is too narrow),
  and a document's mean loss averages hundreds of tokens, so its differences are near normal.
* ``cluster_bootstrap`` (accuracy differences, 0/1 outcomes, few distinct values, where a
  normal approximation is poor): percentile interval of the mean over resampled clusters,
  seeded, so the same files always give the same interval.
* ``crossed_bootstrap`` (icl: every example set asks the same test questions, so both the sets
  and the questions are samples): rows and columns of the grid resampled independently.
* ``mcnemar``: the discordant counts (A right and B wrong, the reverse) and the exact
  two-sided binomial p-value. It treats samples as independent, so for balanced candidate
  sets it is optimistic; the bootstrap interval over sets is the one to read.
"""

from __future__ import annotations

import math

import numpy as np


def per_cluster(values: np.ndarray, clusters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit values and their cluster ids (N,) -> per-cluster (sums, counts), each (G,)."""
    _ids, inverse = np.unique(np.asarray(clusters), return_inverse=True)
    return np.bincount(inverse, weights=values), np.bincount(inverse).astype(np.float64)


def cluster_t(sums: np.ndarray, counts: np.ndarray) -> dict:
    """Mean of the units (sum of ``sums`` / sum of ``counts``) with a 95% cluster-robust t interval
    (None with fewer than two clusters)."""
    from scipy import stats

    sums, counts = np.asarray(sums, np.float64), np.asarray(counts, np.float64)
    g, n = len(sums), float(counts.sum())
    mean = float(sums.sum() / n)
    if g < 2:
        return {"diff": mean, "interval95": None, "stderr": None, "n_clusters": g}
    resid = sums - mean * counts  # (G,)
    se = math.sqrt(g / (g - 1) * float((resid * resid).sum())) / n
    half = float(stats.t.ppf(0.975, g - 1)) * se
    return {"diff": mean, "interval95": [mean - half, mean + half], "stderr": se, "n_clusters": g}


def mean_t(values: list[float], what: str = "pairs") -> dict:
    """Mean of independent values (one per replicate pair) with a Student-t 95% interval on n - 1
    degrees of freedom (None for one value: ``no_interval`` says why)."""
    from scipy import stats

    k = len(values)
    mean = float(sum(values) / k)
    if k < 2:
        return {"diff": mean, "interval95": None, "n_pairs": k, "no_interval": f"one of the {what}"}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (k - 1))
    half = float(stats.t.ppf(0.975, k - 1)) * sd / math.sqrt(k)
    return {"diff": mean, "interval95": [mean - half, mean + half], "stderr": sd / math.sqrt(k), "n_pairs": k}


def cluster_bootstrap(sums: np.ndarray, counts: np.ndarray, resamples: int, seed: int) -> dict:
    """Mean of the units with a 95% percentile interval from resampling clusters with replacement
    (None with fewer than two clusters)."""
    sums, counts = np.asarray(sums, np.float64), np.asarray(counts, np.float64)
    g = len(sums)
    mean = float(sums.sum() / counts.sum())
    if g < 2:
        return {"diff": mean, "interval95": None, "n_clusters": g, "resamples": 0}
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    block = max(1, 2_000_000 // g)  # resamples per block: memory stays ~16 MB whatever g is
    for a in range(0, resamples, block):
        idx = rng.integers(0, g, (min(block, resamples - a), g))  # (b, G) cluster indices
        means[a : a + len(idx)] = sums[idx].sum(1) / counts[idx].sum(1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"diff": mean, "interval95": [float(lo), float(hi)], "n_clusters": g, "resamples": resamples}


def crossed_bootstrap(d: np.ndarray, resamples: int, seed: int) -> dict:
    """Mean of a (rows, columns) grid of paired differences whose rows and columns are both samples
    (icl: the example sets, and the test questions every set asks), with a 95% percentile interval
    from resampling rows and columns independently with replacement (the two-way bootstrap of a
    crossed design: each resample is the grid of the drawn rows by the drawn columns). A grid of one
    row resamples its columns only, and one of one column its rows; one cell has no interval."""
    d = np.asarray(d, np.float64)
    r, c = d.shape
    mean = float(d.mean())
    if r * c < 2:
        return {"diff": mean, "interval95": None, "n_rows": r, "n_columns": c, "resamples": 0}
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    block = max(1, 2_000_000 // (r + c))
    for a in range(0, resamples, block):
        b = min(block, resamples - a)
        wr = np.zeros((b, r))  # how often each row was drawn, per resample
        wc = np.zeros((b, c))
        np.add.at(wr, (np.arange(b)[:, None], rng.integers(0, r, (b, r))), 1.0)
        np.add.at(wc, (np.arange(b)[:, None], rng.integers(0, c, (b, c))), 1.0)
        means[a : a + b] = np.einsum("br,rc,bc->b", wr, d, wc) / (r * c)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {
        "diff": mean,
        "interval95": [float(lo), float(hi)],
        "n_rows": r,
        "n_columns": c,
        "resamples": resamples,
    }


def mcnemar(a: np.ndarray, b: np.ndarray) -> dict:
    """Paired 0/1 outcomes -> the 2x2 counts and McNemar's exact two-sided p-value."""
    from scipy import stats

    a, b = np.asarray(a, bool), np.asarray(b, bool)
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    p = float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue) if only_a + only_b else 1.0
    return {
        "both_right": int((a & b).sum()),
        "only_a_right": only_a,
        "only_b_right": only_b,
        "both_wrong": int((~a & ~b).sum()),
        "p_value": p,
    }


def newcombe_paired(table: dict) -> list[float]:
    """Newcombe's hybrid score interval (his method 10) of the difference of two paired proportions,
    from ``mcnemar``'s 2x2 counts: each proportion's Wilson interval, combined with the correlation
    of the pairs. It keeps a width where every cluster differs by the same amount and a resampling of
    clusters has none (A right on all 100 needles, B on exactly 1 of 5 in each set: +0.80 [+0.80, +0.80]
    from the bootstrap, [+0.70, +0.87] here)."""
    from contextlab.eval.stats import wilson

    a, b = table["both_right"], table["only_a_right"]
    c, d = table["only_b_right"], table["both_wrong"]
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    (l1, u1), (l2, u2) = wilson(a + b, n), wilson(a + c, n)
    denom = math.sqrt(float((a + b) * (c + d) * (a + c) * (b + d)))
    phi = (a * d - b * c) / denom if denom > 0 else 0.0
    below = math.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    above = math.sqrt(max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    diff = p1 - p2
    return [max(-1.0, diff - below), min(1.0, diff + above)]


def interval_text(d: dict, digits: int = 3) -> str:
    """'+0.012 [-0.004, +0.028]' (no interval: '+0.012 [no interval: one cluster]', or the reason the
    result gives as ``no_interval``)."""
    f = f"{{:+.{digits}f}}"
    if d["interval95"] is None:
        return f.format(d["diff"]) + f" [no interval: {d.get('no_interval', 'one cluster')}]"
    lo, hi = d["interval95"]
    return f"{f.format(d['diff'])} [{f.format(lo)}, {f.format(hi)}]"
