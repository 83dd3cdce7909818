"""Paired comparison of two models' Bayes-risk fits (``contextlab compare`` on ``bayes-fit`` results).

Both results hold the loss of the *same* target tokens at every visible length l (bayes_fit.py
draws the targets from the data and its seed alone). Per l, the mean of loss_A - loss_B over the
targets gets a 95% cluster t interval with documents as clusters (several targets of one
document are not independent). The fitted parameters C0 (loss with unlimited context) and gamma
(how fast context pays off) are differences of two nonlinear fits, for which no closed-form
interval exists: they get a percentile bootstrap over documents, refitting both models on each
resample with the same weighting as the reported fit (the resampling of ``eval.bayes_fit``, whose
own errors are made the same way). Trade-off: at most ``FIT_RESAMPLES`` refits per side (solved
together, ``eval.refits``), and resamples whose means leave nothing to fit are dropped and counted in
the result, so a reader sees when the interval rests on fewer. A side whose fit is degenerate (gamma
at a bound, curve_fit's covariance not finite, or its first ``PILOT_RESAMPLES`` refits spread over
twice its C0 or gamma: a flat curve) is not bootstrapped further: its least squares have no
well-defined minimum (C0 and C trade off without limit), so its refits spread wherever the noise
puts that trade, not where the data pins the fit; C0 and gamma then have no interval, and the notes
say why. A side whose refits spread over more than half its
C0 or gamma is said to be loose, with the interval kept. (The screen was curve_fit's covariance
above half the value, which treats the L correlated means as independent: it withheld intervals
from fits the bootstrap pins down, gamma 0.995 [0.72, 1.38] once; and curve_fit's covariance
above twice the value called fits degenerate that the bootstrap pins down, gamma 0.594 ± 2.4
against [0.37, 1.24].) With l = 1
measured, the context gain (l = 1 minus the largest l, per target) is paired too: its A - B
difference per target, with the same cluster t interval.
"""

from __future__ import annotations

import numpy as np

import contextlab.eval.paired_stats as cs
from contextlab.eval.bayes_fit import (
    FIT_RESAMPLES,
    MIN_DOCUMENTS,
    PILOT_RESAMPLES,
    as_fits,
    degenerate,
    document_sums,
    fit_of_sums,
    loose_parameters,
    refit_rows,
    resample_weights,
    wild_refits,
)

KEYS = ("targets", "target_losses")
PARAMS = ("C0", "gamma")
LOOSE = 0.5  # a parameter whose refits spread over more than this share of its value is loose


def bayes_fit(a, b, o) -> dict:
    """Per visible length: paired loss difference; fits: C0 and gamma differences, bootstrapped."""
    xa, xb = a.arrays("bayes-fit", KEYS), b.arrays("bayes-fit", KEYS)
    docs = xa["targets"][:, 0]
    la, lb = (x["target_losses"].astype(np.float64) for x in (xa, xb))  # (L, N) each
    lengths = a.doc["results"]["lengths"]
    per_length = [
        {
            "length": int(l),
            "a": float(ya.mean()),
            "b": float(yb.mean()),
            **cs.cluster_t(*cs.per_cluster(ya - yb, docs)),
        }
        for l, ya, yb in zip(lengths, la, lb)
    ]
    fits = _fit_differences(lengths, la, lb, docs, o)
    n_docs = per_length[0]["n_clusters"]
    how = f"; bootstrap of {fits['resamples']} refits" if fits["resamples"] else ""  # else said in brackets
    lines = [
        f"bayes-fit {p} A - B = {cs.interval_text(fits[p])} over {n_docs} documents "
        f"(A {fits[p]['a']:.3f}, B {fits[p]['b']:.3f}{how})"
        for p in PARAMS
    ]
    notes = []
    if fits["failed"]:
        notes.append(f"{fits['failed']} bootstrap resamples whose means left nothing to fit were left out")
    notes += ill_determined(fits.pop("point"), (a.label, b.label), fits.pop("degenerate"))
    results = {"unit": "target token", "cluster": "document", "n_targets": la.shape[1], "n_documents": n_docs}
    results = {**results, "by_length": per_length, "fit": fits}
    if lengths[0] == 1 and len(lengths) > 1:  # the context gain (l = 1 minus the largest l), A - B, paired
        gain = cs.cluster_t(*cs.per_cluster((la[0] - la[-1]) - (lb[0] - lb[-1]), docs))
        results["context_gain"] = {
            **gain,
            "a": float((la[0] - la[-1]).mean()),
            "b": float((lb[0] - lb[-1]).mean()),
            "visible": [1, int(lengths[-1])],
        }
        lines.append(
            f"bayes-fit context gain A - B = {cs.interval_text(gain)} nats over {n_docs} documents "
            f"(A {results['context_gain']['a']:.3f}, B {results['context_gain']['b']:.3f})"
        )
    return {"lines": lines, "results": results, "notes": notes}


def ill_determined(
    point: list[dict], labels: tuple[str, str], stopped: bool, ratio: float = LOOSE
) -> list[str]:
    """A note per side whose C0 or gamma the data barely constrain: a degenerate fit (``stopped``: then
    neither side was bootstrapped and the differences have no interval), or refits spread over more
    than ``ratio`` of its value (the interval is kept, and wide)."""
    notes = []
    for fit, label in zip(point, labels):
        loose = loose_parameters(fit, ratio, PARAMS)
        if stopped and (degenerate(fit) or loose):
            what = ", ".join(loose) or "gamma {:.3g}".format(fit["gamma"])
            notes.append(
                f"the fit of {label} is degenerate ({what}): its C0 "
                "and gamma differences are unconstrained and get no interval (its refits trade C0 against C "
                "without limit); more visible lengths (--lengths) or targets (--samples) pin them down"
            )
        elif loose:
            notes.append(
                f"the fit of {label} is loose ({', '.join(loose)}, the spread of its refits over documents): "
                "its C0 and gamma, and their differences, are wide; more visible lengths (--lengths) or "
                "targets (--samples) narrow them"
            )
    return notes


def _paired_refits(lengths, sides, weights) -> tuple[list[list[dict]], int]:
    """Both sides' fits of each resample (the same documents drawn for both), and how many resamples a
    side could not fit (left out of both)."""
    rows = [refit_rows(lengths, s, q, c, weights) for s, q, c in sides]
    ok = np.isfinite(rows[0]).all(axis=1) & np.isfinite(rows[1]).all(axis=1)
    return [list(pair) for pair in zip(*(as_fits(side[ok]) for side in rows))], int((~ok).sum())


def _fit_differences(lengths, la: np.ndarray, lb: np.ndarray, docs: np.ndarray, o) -> dict:
    """C0 and gamma of A and B, their differences, and percentile intervals over document resamples
    (none when a side's fit is degenerate: see the module docstring)."""
    sides = [document_sums(x, docs) for x in (la, lb)]
    counts = sides[0][2]
    point = [fit_of_sums(lengths, s, q, c) for s, q, c in sides]
    few = len(counts) < MIN_DOCUMENTS  # resamples of so few documents are the same few: a zero-width interval
    stopped = few or any(degenerate(f) for f in point)
    resamples = 0 if stopped else min(o.resamples, FIT_RESAMPLES)
    weights = resample_weights(len(counts), resamples, o.seed)
    refits, failed = _paired_refits(lengths, sides, weights[:PILOT_RESAMPLES])
    if any(wild_refits([r[k] for r in refits], f) for k, f in enumerate(point)):
        stopped = True  # a side's first refits spread over twice its C0 or gamma: degenerate
    else:
        more, failed_more = _paired_refits(lengths, sides, weights[PILOT_RESAMPLES:])
        refits, failed = refits + more, failed + failed_more
    for side, fit in enumerate(point):  # each side's errors: the spread of its own refits
        fit["wild"] = bool(stopped and refits and wild_refits([r[side] for r in refits], fit))
        for p in PARAMS:
            values = [r[side][p] for r in refits]
            if len(values) > 1:
                fit[p + "_err"] = float(np.std(values, ddof=1))
    if stopped:
        refits = []  # a pilot's refits of a degenerate fit: no interval of its differences
    d = np.asarray([[fa[p] - fb[p] for p in PARAMS] for fa, fb in refits]).reshape(-1, len(PARAMS))
    out = {"resamples": len(d), "failed": failed, "point": point, "degenerate": stopped and not few}
    for i, p in enumerate(PARAMS):
        ci = np.percentile(d[:, i], [2.5, 97.5]).tolist() if len(d) else None
        out[p] = {"a": point[0][p], "b": point[1][p], "diff": point[0][p] - point[1][p], "interval95": ci}
        if few:
            out[p]["no_interval"] = f"{len(counts)} document(s), too few to resample"
        elif stopped:
            out[p]["no_interval"] = "a fit is degenerate, not bootstrapped"
    return out
