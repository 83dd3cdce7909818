"""Loss vs visible context, fitted by the Bayes-risk law ``C0 + C / l^gamma``.

Protocol ("last-token loss with l visible tokens", intrinsic-entropy seed §2.2.2 and
Figure 2): draw N target tokens at random positions t >= max(l) of documents; for every
l in the grid, the model sees only the l tokens right before the target (the leftmost
tokens are cut off) and we record the loss of the target. The same targets are used for
every l, so differences between l are paired and not sampling noise. Each l is one
batched forward of N sequences of l tokens.

The fit is ``scipy.optimize.curve_fit`` of C0 + C * l^-gamma weighted by the standard
error of each mean, reporting the parameters and R^2. C0 estimates the loss with unlimited
context (the Bayes risk plus the model's approximation loss); gamma how fast extra context pays
off. Their standard errors and 95% intervals come from a percentile bootstrap over documents:
every resample of the documents (with their targets) is refitted to the same weighted error, all
resamples at once (``refits``: C0 and C solved exactly for each gamma on a fine grid of it).
Trade-off: curve_fit's own covariance would cost nothing, but it treats the L means as
independent, and they are the losses of the same targets, so strongly correlated (a user's trial
on WikiText-2: C0 ± 0.106 and gamma ± 0.62 from it, against 0.267 and 0.25 over documents), and
targets of one document are not independent either; ``FIT_RESAMPLES`` refits cost a fraction of a
second (a ``curve_fit`` each took 37 ms on a flat curve).
A fit that is degenerate at once (gamma at a bound, a covariance that is not finite) is not
bootstrapped (its refits trade C0 against C without limit) and keeps curve_fit's numbers, said in
``errors``; so is a fit over fewer than ``MIN_DOCUMENTS`` documents. One whose first
``PILOT_RESAMPLES`` refits spread over twice its C0 or gamma is degenerate too (``wild``): it stops
there, with that spread as its errors and no intervals. (curve_fit's covariance above the values
was the screen, and took fits the bootstrap pins down for degenerate.)

The context gain is the loss of the same targets with l = 1 minus with the largest l (by
default the model's context), the quantity contextwise reports under that name on its late
targets: the mean over targets of the paired per-target difference, with a 95%
cluster-robust t interval over documents (``stats.context_gain``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

import contextlab.eval.heldout as heldout
import contextlab.eval.progress as progress
import contextlab.eval.stats as stats
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.base import EvalOutput, open_store


@dataclass
class Options:
    lengths: list[int] = opt(
        [], "visible tokens l to measure; empty = 1, 2, 4, ... below the model's context C, then C"
    )
    samples: int = opt(512, "target tokens N (the same targets for every l)")
    seed: int = opt(0, "seed of the target positions")
    split: Literal["all", "run"] = opt("all", heldout.SPLIT_HELP)
    heldout_of: str = heldout.of_option()


GAMMA_BOUNDS = (0.0, 10.0)  # the fit's range of gamma
FIT_RESAMPLES = 1000  # document resamples refitted for the parameters' errors and intervals
MIN_DOCUMENTS = 5  # fewer documents: no bootstrap over them
PARAMS = ("C0", "C", "gamma")


def power_law(l, c0, c, gamma):
    return c0 + c / np.power(l, gamma)


def fit_power_law(lengths, losses, sems=None, start=None) -> dict:
    """Fit C0 + C / l^gamma; returns parameters, their standard errors and R^2. ``start``: a fit of
    similar points (C0, C, gamma) to start from (a bootstrap resample's refit starts at the reported
    fit), else a start read off the points."""
    from scipy.optimize import curve_fit

    x, y = np.asarray(lengths, float), np.asarray(losses, float)
    if len(x) < 4:
        raise UserError(
            f"the Bayes-risk fit needs at least 4 context lengths, got {len(x)}; give more --lengths"
        )
    sigma = None if sems is None else np.maximum(np.asarray(sems, float), 1e-6)
    p0 = [float(y.min()) * 0.9, float(y.max() - y.min()) + 1e-3, 0.5]
    if start is not None:
        p0 = [start["C0"], start["C"], float(np.clip(start["gamma"], *GAMMA_BOUNDS))]
    try:
        params, cov = curve_fit(
            power_law,
            x,
            y,
            p0=p0,
            sigma=sigma,
            absolute_sigma=sigma is not None,
            bounds=([-np.inf, -np.inf, GAMMA_BOUNDS[0]], [np.inf, np.inf, GAMMA_BOUNDS[1]]),
            maxfev=20000,
        )
    except RuntimeError as exc:
        raise UserError(
            f"the Bayes-risk fit did not converge ({exc}); measure more context lengths"
        ) from None
    err = np.sqrt(np.diag(cov))
    pred = power_law(x, *params)
    ss_res, ss_tot = float(((y - pred) ** 2).sum()), float(((y - y.mean()) ** 2).sum())
    return {
        "C0": float(params[0]),
        "C": float(params[1]),
        "gamma": float(params[2]),
        "C0_err": float(err[0]),
        "C_err": float(err[1]),
        "gamma_err": float(err[2]),
        "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan"),
    }


PILOT_RESAMPLES = 50  # refits that decide whether a fit is degenerate, before the other FIT_RESAMPLES


def degenerate(fit: dict) -> bool:
    """Whether a fit is unconstrained: gamma at a bound, curve_fit's covariance not finite, or (``wild``,
    set by ``wild_refits``) its first refits over documents spread over twice C0 or gamma (a flat curve
    traded off without limit); its refits would mean nothing. curve_fit's covariance above the value is
    no sign of it: it takes the lengths' means, losses of the same targets, as independent, and called
    gamma 0.594 ± 2.4 where the document bootstrap gave [0.37, 1.24]."""
    at_bound = not (GAMMA_BOUNDS[0] + 1e-3 < fit["gamma"] < GAMMA_BOUNDS[1] - 1e-3)
    infinite = [not np.isfinite(fit[p + "_err"]) for p in ("C0", "gamma")]
    return at_bound or any(infinite) or bool(fit.get("wild"))


def wild_refits(refits: list[dict], point: dict) -> bool:
    """Whether refits over document resamples spread over twice the reported C0 or gamma (or are not
    finite): the points do not pin the fit down, and more refits would only end wherever the optimizer
    stops (a thousand of a flat curve's took two minutes)."""
    for p in ("C0", "gamma"):
        values = np.array([f[p] for f in refits])
        if len(values) > 1 and not (np.isfinite(values).all() and values.std(ddof=1) <= 2 * abs(point[p])):
            return True
    return False


def document_sums(losses: np.ndarray, docs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-document sums of the (L, N) target ``losses`` and of their squares, (L, D) each, and the
    targets per document (D,): what a document resample reweights."""
    uniq, inv = np.unique(np.asarray(docs), return_inverse=True)
    counts = np.bincount(inv).astype(np.float64)

    def per_doc(x):
        return np.stack([np.bincount(inv, weights=row, minlength=len(uniq)) for row in x])

    return per_doc(losses), per_doc(losses * losses), counts


def fit_of_sums(lengths, sums, sq, counts, start=None) -> dict:
    """The reported fit (means weighted by their standard errors) from per-document sums."""
    n = counts.sum()
    mean = sums.sum(1) / n  # (L,)
    sem = np.sqrt(np.maximum(sq.sum(1) / n - mean**2, 0.0) / max(n - 1, 1))  # std(ddof=1) / sqrt(n)
    return fit_power_law(lengths, mean, sem, start)


def refit_rows(lengths, sums, sq, counts, weights) -> np.ndarray:
    """(R, 3) C0, C and gamma of each resample (``weights``: a weight per document each; a row of NaN
    where it leaves nothing to fit), all at once and exactly (``refits.refit_resamples``)."""
    from contextlab.eval.refits import refit_resamples

    if not len(weights):
        return np.empty((0, len(PARAMS)))
    return refit_resamples(lengths, sums, sq, counts, weights, GAMMA_BOUNDS)


def as_fits(rows: np.ndarray) -> list[dict]:
    """Rows of ``refit_rows`` as fits ({C0, C, gamma})."""
    return [dict(zip(PARAMS, map(float, r))) for r in rows]


def refits_of_sums(lengths, sums, sq, counts, weights) -> tuple[list[dict], int]:
    """The fit of each resample that has one, and how many resamples left nothing to fit."""
    rows = refit_rows(lengths, sums, sq, counts, weights)
    kept = rows[np.isfinite(rows).all(axis=1)]
    return as_fits(kept), len(rows) - len(kept)


def resample_weights(n_docs: int, resamples: int, seed: int) -> list[np.ndarray]:
    """The weight of each document in each bootstrap resample (how often it was drawn)."""
    rng = np.random.default_rng(seed)
    return [
        np.bincount(rng.integers(n_docs, size=n_docs), minlength=n_docs).astype(np.float64)
        for _ in range(resamples)
    ]


def bootstrap_fit(lengths, losses: np.ndarray, docs, point: dict, seed: int) -> dict:
    """``point`` with its C0, C and gamma errors (the standard deviation over document resamples) and 95%
    percentile intervals, and ``errors`` saying how they were made (module docstring)."""
    sums, sq, counts = document_sums(losses, docs)
    if degenerate(point) or len(counts) < MIN_DOCUMENTS:
        why = "the fit is degenerate" if degenerate(point) else f"{len(counts)} documents"
        return {**point, "errors": f"curve_fit's covariance, not bootstrapped ({why})"}
    weights = resample_weights(len(counts), FIT_RESAMPLES, seed)
    refits, failed = refits_of_sums(lengths, sums, sq, counts, weights[:PILOT_RESAMPLES])
    wild = wild_refits(refits, point)  # a degenerate fit: no interval of it
    if not wild:
        more, failed_more = refits_of_sums(lengths, sums, sq, counts, weights[PILOT_RESAMPLES:])
        refits, failed = refits + more, failed + failed_more
    if wild:
        out = {**point, "wild": True}
        for p in PARAMS:
            out[p + "_err"] = float(np.std([f[p] for f in refits], ddof=1))
        out["errors"] = (
            f"the spread of {len(refits)} refits over {len(counts)} documents, not bootstrapped further "
            "(the fit is degenerate: they spread over twice its C0 or gamma)"
        )
        return out
    out = {**point, "errors": f"bootstrap over {len(counts)} documents, {len(refits)} refits"}
    if failed:
        out["errors"] += f" ({failed} whose means left nothing to fit left out)"
    for p in PARAMS:
        values = np.array([f[p] for f in refits])
        out[p + "_err"] = float(values.std(ddof=1)) if len(values) > 1 else point[p + "_err"]
        out[p + "_interval95"] = np.percentile(values, [2.5, 97.5]).tolist() if len(values) else None
    return out


def refit_seconds(n: int = 200) -> float:
    """Seconds one bootstrap refit takes on this machine (a fraction of a millisecond; ``n`` of a nearly
    flat curve, a random or barely trained model's, timed together). The profile's estimate counts
    ``FIT_RESAMPLES`` of them per fit."""
    import time

    rng = np.random.default_rng(0)
    lengths = [1, 2, 4, 8, 16, 32, 64, 128, 255]
    x = np.asarray(lengths, float)[:, None]
    sums, sq, counts = document_sums(
        7.6 + 0.025 / x**0.6 + rng.normal(0, 1, (9, 128)), rng.integers(36, size=128)
    )
    t0 = time.perf_counter()
    refits_of_sums(lengths, sums, sq, counts, resample_weights(len(counts), n, 0))
    return (time.perf_counter() - t0) / n


def loose_parameters(fit: dict, ratio: float = 0.5, params=("C0", "gamma")) -> list[str]:
    """``"C0 5.29 ± 9.4e+05"`` for each of ``params`` whose standard error is above ``ratio`` of its value
    (or not finite): the points barely constrain it."""
    return [
        f"{p} {fit[p]:.3g} ± {fit[p + '_err']:.2g}"
        for p in params
        if not np.isfinite(fit[p + "_err"]) or fit[p + "_err"] > ratio * abs(fit[p])
    ]


def fit_notes(fit: dict) -> list[str]:
    """Lines for a fit whose parameters the points do not pin down: C0 then estimates nothing, though
    R^2 may be 0.999 (a power law with gamma near 0 draws a logarithm, or a constant, as well as any)."""
    notes = []
    if fit["gamma"] <= GAMMA_BOUNDS[0] + 1e-3:
        notes.append(
            "gamma is at its lower bound 0: over these lengths the loss falls like log l or slower (or "
            "not at all), which C0 + C / l^gamma fits only by trading C0 against C without limit"
        )
    elif fit["gamma"] >= GAMMA_BOUNDS[1] - 1e-3:
        notes.append(
            f"gamma is at its upper bound {GAMMA_BOUNDS[1]:g}: the loss stops falling after the first "
            "lengths, so C0 is the flat part and gamma is not determined"
        )
    loose = loose_parameters(fit)
    if loose:
        c0 = (
            "; C0 is then no estimate of the loss with unlimited context" if loose[0].startswith("C0") else ""
        )
        notes.append(
            f"the points do not pin down the fit's {', '.join(loose)} (standard error above half the "
            f"value){c0}; more visible lengths (--lengths) or targets (--samples) narrow it. The measured "
            "losses and the context gain stand on their own"
        )
    return notes


def sample_targets(
    store, n: int, min_pos: int, seed: int, option: str = "--lengths"
) -> list[tuple[int, int]]:
    """n (document, position) pairs with position >= min_pos, documents weighted by usable length
    (``option``: the command's option that sets min_pos, for the message when no document has one)."""
    lengths = store.lengths()
    usable = np.maximum(lengths - min_pos, 0)
    if usable.sum() == 0:
        raise UserError(f"no document has more than {min_pos} tokens; lower the largest {option}")
    rng = np.random.default_rng(seed)
    docs = rng.choice(len(lengths), size=n, p=usable / usable.sum())
    return [(int(d), int(min_pos + rng.integers(usable[d]))) for d in docs]


def last_token_losses(adapter, store, targets: list[tuple[int, int]], lengths: list[int]) -> np.ndarray:
    """(len(lengths), N) loss of each target token with only the l previous tokens visible."""
    out = np.zeros((len(lengths), len(targets)))
    adapter.check_length(max(lengths), f"visible context {max(lengths)}", fix="lower the largest --lengths")
    for i, l in enumerate(progress.bar(lengths, desc="visible context", unit="length")):
        ids = np.stack(
            [np.asarray(store.doc(d)[t - l : t + 1], dtype=np.int64) for d, t in targets]
        )  # (N, l+1)
        rows = max(adapter.batch_size, adapter.batch_size * adapter.context // (l + 1))  # short l: more rows
        for a in range(0, len(ids), rows):
            lp = adapter.last_token_logprobs(ids[a : a + rows])  # only the target
            out[i, a : a + len(lp)] = -lp.double().cpu().numpy()
    return out


def context_gain(losses: np.ndarray, lengths: list[int], docs: list[int], context: int) -> dict | None:
    """The same targets' loss with 1 visible token minus with the largest l (None without l = 1)."""
    if lengths[0] != 1 or len(lengths) < 2:
        return None
    gain = stats.context_gain(losses[0], losses[-1], docs)
    return {**gain, "visible": [1, lengths[-1]], "full_context": lengths[-1] >= context}


def default_lengths(context: int) -> list[int]:
    """1, 2, 4, ... below ``context``, then ``context`` itself: the longest l is the whole context
    (255 -> 1, 2, ..., 128, 255), so the context gain is 1 vs the context visible."""
    return [2**i for i in range(context.bit_length()) if 2**i < context] + [context]


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    store = open_store(data, adapter, "bayes-fit", split=options.split)
    view, held = heldout.documents(store, adapter.info.path, options.split, of=options.heldout_of)
    lengths = sorted(set(options.lengths or default_lengths(adapter.context)))
    if lengths[0] < 1:
        raise UserError("visible context lengths must be >= 1")
    progress.announce(
        "bayes-fit",
        {
            "visible": lengths,
            "targets": options.samples,
            "seed": options.seed,
            "data": store.path,
            "split": heldout.announced(held),
        },
    )
    targets = sample_targets(view, options.samples, max(lengths), options.seed)
    losses = last_token_losses(adapter, view, targets, lengths)
    mean = losses.mean(1)
    sem = losses.std(1, ddof=1) / np.sqrt(losses.shape[1])
    clusters = heldout.in_store(view, targets)[:, 0]  # by the store's documents: pieces of one share it
    fit = bootstrap_fit(lengths, losses, clusters, fit_power_law(lengths, mean, sem), options.seed)
    gain = context_gain(losses, lengths, clusters.tolist(), adapter.context)
    results = {
        "summary": {
            **{k: fit[k] for k in ("C0", "C0_err", "C", "C_err", "gamma", "gamma_err", "r2")},
            **{
                f"{p}_interval95": fit[f"{p}_interval95"] for p in ("C0", "gamma") if f"{p}_interval95" in fit
            },
            **(
                {}
                if gain is None
                else {"context_gain": gain["gain"], "context_gain_interval95": gain["interval95"]}
            ),
        },
        **({} if gain is None else {"context_gain": gain}),
        "lengths": lengths,
        "loss": mean.tolist(),
        "stderr": sem.tolist(),
        "n_targets": len(targets),
        "fit": fit,
    }
    text = fit_notes(fit)
    if gain is not None and gain["interval95"] is None:  # one document: no interval, as contextwise says
        text += [
            "context_gain_interval95 is null: it is over documents (targets of one document share its "
            f"text) and all {len(targets)} targets come from one document; give a store of two or more "
            f"documents longer than {max(lengths)} tokens (`data ingest --doc-start` cuts a file of many)"
        ]
    if text:
        results["text"] = text
    label = adapter.info.id

    def plot(path):
        from contextlab.result_plots import bayes_fit_png

        loose = [x.split()[0] for x in loose_parameters(fit)] if fit else []
        return bayes_fit_png(
            lengths,
            mean,
            sem,
            {**fit, "loose": loose} if fit else fit,
            path,
            title=f"last-token loss vs visible context: {label}",
        )

    arrays = {"targets": heldout.in_store(view, targets), "target_losses": losses}  # (N, 2), (L, N)
    return EvalOutput(
        results, {"store": str(store.path), "hash": store.hash, **held}, arrays=arrays, plot=plot
    )
