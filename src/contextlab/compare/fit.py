"""Paired comparison of two models' Bayes-risk fits (``contextlab compare`` on ``bayes-fit`` results).

Both results hold the loss of the *same* target tokens at every visible length l (bayes_fit.py
draws the targets from the data and its seed alone). Per l, the mean of loss_A - loss_B over the
targets gets a 95% cluster t interval with documents as clusters (several targets of one
document are not independent). The fitted parameters C0 (loss with unlimited context) and gamma
(how fast context pays off) are differences of two nonlinear fits, for which no closed-form
interval exists: they get a percentile bootstrap over documents, refitting both models on each
resample with the same weighting as the reported fit. Trade-off: at most ``FIT_RESAMPLES``
refits per side (each is a ``curve_fit``, started at the reported fit), and resamples whose fit does
not converge are dropped and counted in the result, so a reader sees when the interval rests on
fewer. A side whose reported fit leaves C0 or gamma loose (a standard error above half the value:
a flat curve, or too few lengths) is not bootstrapped: its least squares have no well-defined
minimum, so its refits end wherever the optimizer stops, not where the data puts them (and a
thousand of them took two minutes, after a profile of two random-weight models, to draw an interval
of that); C0 and gamma then have no interval, and the notes say why. With l = 1
measured, the context gain (l = 1 minus the largest l, per target) is paired too: its A - B
difference per target, with the same cluster t interval.
"""

from __future__ import annotations

import numpy as np

import contextlab.eval.paired_stats as cs
from contextlab.errors import UserError
from contextlab.eval.bayes_fit import fit_power_law, loose_parameters

KEYS = ("targets", "target_losses")
FIT_RESAMPLES = 1000
PARAMS = ("C0", "gamma")
LOOSE = 0.5  # a parameter whose standard error is above this share of its value is loose


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
        notes.append(f"{fits['failed']} bootstrap resamples whose fit did not converge were left out")
    notes += ill_determined(fits.pop("point"), (a.label, b.label))
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


def ill_determined(point: list[dict], labels: tuple[str, str], ratio: float = LOOSE) -> list[str]:
    """A note per side whose fitted C0 or gamma has a standard error above ``ratio`` of its value: the
    curve barely constrains it (too few lengths, or a flat curve), so the differences get no interval and
    their point estimates mean little."""
    notes = []
    for fit, label in zip(point, labels):
        loose = loose_parameters(fit, ratio, PARAMS)
        if loose:
            notes.append(
                f"the fit of {label} is ill-determined ({', '.join(loose)}): its C0 and gamma differences "
                "are unconstrained and get no interval (its refits would end wherever the optimizer "
                "stops); more visible lengths (--lengths) or targets (--samples) pin them down"
            )
    return notes


def _fits(lengths, sums, sq, counts, start=None) -> dict:
    """The reported fit of mean losses (weighted by their standard errors) from per-document sums."""
    n = counts.sum()
    mean = sums.sum(1) / n  # (L,)
    sem = np.sqrt(np.maximum(sq.sum(1) / n - mean**2, 0.0) / max(n - 1, 1))  # std(ddof=1) / sqrt(n)
    return fit_power_law(lengths, mean, sem, start)


def _fit_differences(lengths, la: np.ndarray, lb: np.ndarray, docs: np.ndarray, o) -> dict:
    """C0 and gamma of A and B, their differences, and percentile intervals over document resamples
    (none when a side's fit is loose: see the module docstring)."""
    uniq, inv = np.unique(docs, return_inverse=True)
    counts = np.bincount(inv).astype(np.float64)  # (D,)

    def per_doc(x):  # (L, N) -> per-document sums (L, D)
        return np.stack([np.bincount(inv, weights=row, minlength=len(uniq)) for row in x])

    sides = [(per_doc(x), per_doc(x * x)) for x in (la, lb)]
    point = [_fits(lengths, s, q, counts) for s, q in sides]
    rng = np.random.default_rng(o.seed)
    loose = any(loose_parameters(f, LOOSE, PARAMS) for f in point)
    resamples = 0 if loose else min(o.resamples, FIT_RESAMPLES)
    diffs, failed = [], 0
    for _ in range(resamples):
        w = np.bincount(rng.integers(len(uniq), size=len(uniq)), minlength=len(uniq)).astype(np.float64)
        try:
            fa, fb = (_fits(lengths, s * w, q * w, counts * w, f) for (s, q), f in zip(sides, point))
        except UserError:  # the fit did not converge on this resample
            failed += 1
            continue
        diffs.append([fa[p] - fb[p] for p in PARAMS])
    d = np.asarray(diffs).reshape(-1, len(PARAMS))
    out = {"resamples": len(d), "failed": failed, "point": point}
    for i, p in enumerate(PARAMS):
        ci = np.percentile(d[:, i], [2.5, 97.5]).tolist() if len(d) else None
        out[p] = {"a": point[0][p], "b": point[1][p], "diff": point[0][p] - point[1][p], "interval95": ci}
        if loose:
            out[p]["no_interval"] = "a fit is loose, not bootstrapped"
    return out
