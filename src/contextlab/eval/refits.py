"""Many refits of ``C0 + C / l^gamma`` at once: the document bootstrap of the Bayes-risk fit.

Each resample reweights the documents; its fit minimizes the same weighted squared error as
``bayes_fit.fit_power_law`` (the lengths' means, weighted by their standard errors). For a fixed
gamma the model is linear in C0 and C, so their best values and the error have a closed form (a
2 x 2 weighted least squares); what is left is one bounded variable, searched on a grid over
``GAMMA_BOUNDS`` and refined around each resample's best point. That is every resample at once in
numpy, where a ``curve_fit`` per resample took 37 ms on a flat curve (a random or barely trained
model's: 1,000 refits were most of a quick profile). The grid also finds the global minimum over
gamma, where a local optimizer started at the reported fit may stop short of it.
"""

from __future__ import annotations

import numpy as np

GRID = 201  # gamma points of the first search over its bounds (and 40 from 1e-6 to 0.05 above the lower)
REFINE = 21  # points of each refinement, between the best point's two neighbours
ROUNDS = 4  # refinements: each narrows the bracket tenfold (to 1e-5 from a first step of 0.05)
BLOCK = 128  # resamples per block (memory: BLOCK x GRID x lengths floats per array)
SEM_FLOOR = 1e-6  # as ``fit_power_law``'s sigma


def refit_resamples(lengths, sums, sq, counts, weights, bounds) -> np.ndarray:
    """(R, 3) C0, C and gamma of each resample (``weights``: R arrays of a weight per document;
    ``sums``, ``sq``: (L, D) per-document sums of the losses and their squares, ``counts`` (D,));
    a row of NaN where the weighted means leave nothing to fit."""
    x = np.asarray(lengths, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64).reshape(-1, len(counts))
    out = np.empty((len(w), 3))
    for lo in range(0, len(w), BLOCK):
        out[lo : lo + BLOCK] = _fit_block(x, sums, sq, counts, w[lo : lo + BLOCK], bounds)
    return out


def _fit_block(x, sums, sq, counts, w, bounds) -> np.ndarray:
    n = w @ counts  # (R,) targets in each resample
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (w @ sums.T) / n[:, None]  # (R, L)
        var = np.maximum((w @ sq.T) / n[:, None] - mean**2, 0.0) / np.maximum(n - 1, 1)[:, None]
    inv = 1.0 / np.maximum(np.sqrt(var), SEM_FLOOR) ** 2  # the weight of each length's mean
    lo, hi = bounds
    grid = np.unique(np.concatenate([np.linspace(lo, hi, GRID), lo + np.geomspace(1e-6, 0.05, 40)]))
    gammas = np.broadcast_to(grid[grid <= hi], (len(w), int((grid <= hi).sum())))
    rows = np.arange(len(w))
    for _ in range(ROUNDS + 1):
        err, c0, c = _profile(x, mean, inv, gammas)
        best = np.argmin(np.where(np.isfinite(err), err, np.inf), axis=1)
        g, c0, c = gammas[rows, best], c0[rows, best], c[rows, best]
        below = gammas[rows, np.maximum(best - 1, 0)]  # the best point's neighbours bracket the minimum
        above = gammas[rows, np.minimum(best + 1, gammas.shape[1] - 1)]
        gammas = below[:, None] + (above - below)[:, None] * np.linspace(0.0, 1.0, REFINE)[None, :]
    out = np.stack([c0, c, g], axis=1)
    out[~np.isfinite(out).all(axis=1)] = np.nan
    return out


def _profile(x, mean, inv, gammas):
    """The weighted squared error at each gamma with C0 and C at their best for it, and those C0, C:
    (R, G) each (``mean``, ``inv``: (R, L); ``gammas``: (R, G))."""
    z = np.power(x[None, None, :], -gammas[:, :, None])  # (R, G, L)
    wz = inv[:, None, :] * z
    s0 = inv.sum(1)[:, None]
    s1, s2 = wz.sum(2), (wz * z).sum(2)
    t0 = (inv * mean).sum(1)[:, None]
    t1 = (wz * mean[:, None, :]).sum(2)
    det = s0 * s2 - s1 * s1
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.where(det > 1e-12 * s0 * s2, (s0 * t1 - s1 * t0) / det, np.nan)  # gamma 0: C0 and C one
        c0 = (t0 - c * s1) / s0
        resid = mean[:, None, :] - c0[:, :, None] - c[:, :, None] * z
    return (inv[:, None, :] * resid * resid).sum(2), c0, c
