"""Intrinsic entropy and dimension of hidden states vs context length, correlated with the loss.

The measurement of the intrinsic-entropy seed (§2.2.2, Figures 1, 3, 7 and 15): for each
visible context length l, take the hidden state (one layer, one position; by default the
last layer at the last visible token) of N samples, measure the spread of that cloud
(``contextlab.analysis.intrinsic``: PCA entropy over several n, threshold dimension over a
sweep of thresholds, Gaussian-KDE entropy, TwoNN / MLE / lPCA), and the cross-entropy of
the next token at the same l. Each measure is then fitted linearly against the loss
(slope, intercept, Pearson r): the seed's claim is that the loss is linear in them.

Two protocols, chosen from the data (``protocol = "auto"``): ``text`` for a store of text,
``parity`` for a store of ``contextlab data synthetic parity``, where the loss is the answer's and
stands beside the exact Bayes risk at l, so one run gives the model-vs-Bayes table and the entropy
correlations. How each reads its samples is ``entropy_samples``; this module measures what they
read and fits it (``analyze``), and runs the whole (``run``).

Trade-off: the measures are computed per context over every sample at once (PCA, KDE and the
neighbour estimators need the whole cloud), so N hidden states of every context are held in memory
(N x width floats each: 2,000 x 768 is 6 MB).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np

import contextlab.analysis.intrinsic as intrinsic
import contextlab.eval.heldout as heldout
from contextlab import bars
from contextlab.analysis.entropy_samples import (
    Collected,
    collect_parity,
    collect_text,
    parity_contexts,
    parity_store,
    text_contexts,
)
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.base import EvalOutput, open_store
from contextlab.eval.progress import announce


@dataclass
class Options:
    contexts: list[int] = opt(
        [],
        "visible context lengths l (tokens; parity: visible bits), at least 3, e.g. 8,16,32; empty = "
        "fitted: text 8, 16, 32, ... below the model's context, then the context itself; parity 9 "
        "counts of visible bits evenly from 0 to all",
    )
    samples: int = opt(1000, "samples N per context length (the same samples at every l)")
    layer: int = opt(-1, "which layer's hidden state: 0 = embeddings, -1 = last block")
    position: int = opt(
        -1,
        "which token's hidden state, counted from the end of the visible input "
        "(-1 = last token; parity: -2 = the nearest bit, a feature that has not seen the task)",
    )
    n_components: list[int] = opt(
        [10, 20, 50, 100, 0],
        "intrinsic entropy = sum of log relative eigenvalues over the first n components, for each n "
        "(0 = all; an n past the model's width or the samples is left out, with a line saying so)",
    )
    thresholds: list[float] = opt(
        [0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25],
        "intrinsic dimension = number of relative eigenvalues >= threshold, for each threshold",
    )
    kde_dims: int = opt(8, "principal coordinates for the Gaussian-KDE entropy; 0 = skip it")
    estimators: list[str] = opt(
        ["twonn", "mle", "lpca"], "scikit-dimension estimators (twonn, mle, lpca); empty = none"
    )
    protocol: Literal["auto", "text", "parity"] = opt(
        "auto", "auto: parity for a synthetic parity store, else text"
    )
    seed: int = opt(0, "seed of the sampled targets / documents")
    split: Literal["all", "run"] = opt(
        "all", "protocol text: " + heldout.SPLIT_HELP.replace(" (the default --data then)", "")
    )
    heldout_of: str = heldout.of_option()


def task_weighted(loss: np.ndarray, strata: np.ndarray, weights: np.ndarray) -> float:
    """Mean loss per task weighted by the tasks' exact frequencies (over the tasks the samples drew).

    A plain mean over N samples carries the noise of how many samples drew each task; on
    parity, where a hidden task costs log 2 and a visible one 0, that noise (about
    0.35 / sqrt(N) nats) is larger than a good model's gap to the Bayes risk. Stratifying
    by task removes it and leaves only the noise within each task. Tasks no sample drew are
    left out and the weights renormalised (at N = 2,000 and frequencies >= 0.004 a task is
    missed with probability 3e-4)."""
    drawn = np.flatnonzero(np.bincount(strata, minlength=len(weights)) > 0)
    means = np.array([loss[strata == t].mean() for t in drawn])
    return float(np.sum(weights[drawn] * means) / np.sum(weights[drawn]))


def check_options(o: Options) -> None:
    """Refuse sample counts too small for the requested PCA (before any model is run)."""
    # an --n-components past the samples is left out with a line once the states are known (as one past
    # the model's width); the KDE and the neighbour estimators need these many to run at all
    n_max = max(o.kde_dims + 2, 12 if o.estimators else 3)
    if o.samples <= n_max:
        raise UserError(
            f"--samples {o.samples} is too few for PCA over {n_max} components; use more samples "
            "than components (the default is 1000), or fewer components (--kde-dims, --estimators)"
        )
    if any(n < 0 for n in o.n_components) or any(not 0 < t <= 1 for t in o.thresholds):
        raise UserError("--n-components must be >= 0 and --thresholds in (0, 1]")
    if o.contexts and len(set(o.contexts)) < 3:
        raise UserError(
            f"give at least 3 distinct context lengths to correlate the measures with the loss, got "
            f"{o.contexts}; e.g. --contexts 8,16,32,64"
        )
    unknown = [e for e in o.estimators if e not in intrinsic.SKDIM_ESTIMATORS]
    if unknown:
        raise UserError(
            f"unknown intrinsic-dimension estimator(s) {', '.join(unknown)}; choose from "
            f"{', '.join(intrinsic.SKDIM_ESTIMATORS)} (or --estimators '' for none)"
        )


def fitted_components(wanted: list[int], features: list[np.ndarray]) -> tuple[list[int], str]:
    """``--n-components`` that the features have (PCA gives min(samples - 1, width) components: a model
    of width 64 has no 100th), and a line naming the ones left out ("" when none was). One line when
    none is left (0, all components, always fits)."""
    have = min(min(X.shape[0] - 1, X.shape[1]) for X in features)
    kept = [n for n in wanted if n <= have]
    if not kept:
        raise UserError(
            f"--n-components {','.join(map(str, wanted))}: the hidden states have {have} PCA components "
            f"(min(samples - 1, width)); give values up to {have}, or 0 for all of them"
        )
    dropped = [n for n in wanted if n > have]
    note = (
        f"intrinsic entropy over {', '.join(map(str, dropped))} components left out: the hidden states have "
        f"{have} PCA components (min(samples - 1, width))"
        if dropped
        else ""
    )
    return kept, note


def analyze(col: Collected, o: Options, progress: bool = True) -> tuple[dict, dict[str, np.ndarray]]:
    """Measures per context, their linear fits against the loss (and the Bayes risk), and the spectra."""
    check_options(o)
    n_components, left_out = fitted_components(o.n_components, col.features)
    per, spectra = [], []
    for l, X, loss in bars.bar(
        list(zip(col.contexts, col.features, col.losses)),
        desc="entropy: measures",
        disable=None if progress else True,
    ):
        m, rel = intrinsic.measures(
            X,
            n_components=n_components,
            thresholds=o.thresholds,
            kde_dims=o.kde_dims,
            estimators=o.estimators,
        )
        row = {
            "context": l,
            "ce": float(loss.mean()),
            "ce_stderr": float(loss.std(ddof=1) / np.sqrt(len(loss))),
            **_undefined_as_none(m),  # an estimate with no value at a context is null, said in the text
        }
        per.append(row)
        spectra.append(rel)
    _add_bayes(per, col)
    series = intrinsic.measure_series(per)
    ce = [r["ce"] for r in per]
    fits = {name: intrinsic.linear_fit(x, ce) for name, x in series.items()}
    finite = {name: np.asarray(x, float)[np.isfinite(np.asarray(x, float))] for name, x in series.items()}
    constant = [name for name, v in finite.items() if len(v) >= 2 and np.ptp(v) == 0]
    too_few = [name for name, v in finite.items() if len(v) < 2]
    for name in constant + too_few:  # no correlation exists: None with the reason, not NaN
        fits[name] = {"slope": None, "intercept": None, "r": None, "r2": None, "constant": name in constant}
    # one step (an integer dimension moving once, 47, 48, 48, ...): its r says where the step falls
    two = [name for name, v in finite.items() if len(v) > 2 and len(np.unique(v)) == 2]
    for name in two:
        fits[name]["two_values"] = True
    results: dict = {"summary": _summary(per, fits, col), "contexts": per, "fits_vs_ce": fits}
    text = [left_out] if left_out else []
    if constant:
        text.append(
            f"{', '.join(constant)}: the same at every context length, so no correlation with the loss "
            "exists (their r is null)"
        )
    if two:
        text.append(
            f"{', '.join(two)}: two distinct values over {len(per)} contexts, one step, so its r says "
            "between which contexts the step falls, not how the measure follows the loss; not ranked as "
            "the best measure"
        )
    text += _repeated_targets(col.info, len(col.losses[0]))
    repeated = [
        (r["context"], len(X) - r["distinct_samples"])
        for r, X in zip(per, col.features)
        if r.get("distinct_samples", len(X)) < len(X)
    ]
    names = ", ".join(e for e in o.estimators if e in intrinsic.NEIGHBOUR_ESTIMATORS)
    if repeated and names:
        where = ", ".join(f"{n:,} at context {l}" for l, n in repeated)
        text.append(
            f"{names}: samples sharing a hidden state with an earlier one ({where}) were read once "
            "(a nearest-neighbour estimate needs distinct points: a repeated one lies at distance 0)"
        )
    for name, x in series.items():
        bad = [r["context"] for r, v in zip(per, x) if v is None or not np.isfinite(v)]
        if bad:  # e.g. MLE when many samples share one hidden state (short contexts of a small vocabulary)
            rest = (
                "the other contexts give it no fit (fewer than two finite values, or all equal: r is null)"
                if name in constant + too_few
                else "its fit uses the other contexts"
            )
            if name.startswith("entropy@"):
                n = name.split("@", 1)[1]
                counts = "; ".join(
                    f"{r['entropy_floored'][n]} at {r['context']}" for r in per if r["context"] in bad
                )
                states = "; ".join(
                    f"{r['distinct_samples']:,} at {r['context']}" for r in per if r["context"] in bad
                )
                why = (
                    f"of its first {n} PCA components, some have relative eigenvalues below the "
                    f"{intrinsic.EIG_FLOOR:g} floor ({counts}): there are fewer distinct hidden states than "
                    f"components ({states}), and the sum would be the floor's"
                )
            else:
                why = f"too few distinct hidden states there for it: {'; '.join(_distinct(per, bad))}"
            text.append(
                f"{name}: no estimate at context{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))} "
                f"({why}); {rest}"
            )
    if text:
        results["text"] = text
    if col.bayes is not None:
        results["fits_vs_bayes"] = {name: intrinsic.linear_fit(x, col.bayes) for name, x in series.items()}
    width = min(len(s) for s in spectra)
    return results, {"relative_eigenvalues": np.stack([s[:width] for s in spectra])}


def _repeated_targets(info: dict, n: int) -> list[str]:
    """One line when the samples drew many targets twice (drawn with replacement from a short store:
    1,000 samples of 283 positions were 722 repeats, read as samples by PCA and the KDE in silence)."""
    distinct, positions = info.get("distinct_targets"), info.get("target_positions")
    if not isinstance(distinct, int) or n - distinct <= 0.05 * n:  # a few repeats: as documented
        return []
    return [
        f"the {n:,} samples hold {distinct:,} distinct targets ({n - distinct:,} repeats: the store has "
        f"{positions:,} positions past the longest context); PCA, the dimensions and the KDE read each "
        "repeat as a sample of its own: give a store with more text, or lower --samples"
    ]


def _undefined_as_none(m: dict) -> dict:
    """The measures with every non-finite number as None: an estimator that has no value at a context
    (MLE with too few distinct states) is null, not a NaN the result file would blame on the model."""

    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        return None if isinstance(v, float) and not np.isfinite(v) else v

    return clean(m)


def _distinct(per: list[dict], contexts: list[int]) -> list[str]:
    """How many distinct hidden states each of ``contexts`` had (what the neighbour estimators read)."""
    return [
        f"{r['distinct_samples']:,} at {r['context']}"
        for r in per
        if r["context"] in contexts and "distinct_samples" in r
    ] or ["unknown"]


def _add_bayes(per: list[dict], col: Collected) -> None:
    """Add the exact Bayes risk (parity data) and the loss's distance from it to each context's row."""
    if col.bayes is not None:
        for row, b in zip(per, col.bayes):
            row["bayes_risk"] = b
            row["abs_diff"] = abs(row["ce"] - b)
    if col.bayes_losses is not None:  # paired: the same samples' Bayes loss, so task-sampling noise cancels
        for row, loss, bayes in zip(per, col.losses, col.bayes_losses):
            excess = loss - bayes
            row["bayes_on_samples"] = float(bayes.mean())
            row["excess"] = float(excess.mean())
            row["excess_stderr"] = float(excess.std(ddof=1) / np.sqrt(len(excess)))
    if col.strata is not None and col.bayes is not None:  # stratified by task, against the exact risk
        for row, loss, b in zip(per, col.losses, col.bayes):
            row["ce_task_weighted"] = task_weighted(loss, col.strata, col.strata_weights)
            row["abs_diff_task_weighted"] = abs(row["ce_task_weighted"] - b)


def _summary(per: list[dict], fits: dict, col: Collected) -> dict:
    s: dict = {
        "protocol": col.info["protocol"],
        "n_contexts": len(per),
        "pearson_r": {k: v["r"] for k, v in fits.items()},
    }
    finite = {
        k: abs(v["r"])
        for k, v in fits.items()
        if v["r"] is not None and np.isfinite(v["r"]) and not v.get("two_values")
    }
    if finite:
        best = max(finite, key=finite.get)
        s["best_measure"], s["best_abs_r"] = best, finite[best]
        lo_hi = fits[best].get("r_interval95")
        if lo_hi is not None:  # of |r|: an interval of r that spans 0 starts |r|'s at 0
            ends = sorted(abs(v) for v in lo_hi)
            s["best_abs_r_interval95"] = [0.0 if lo_hi[0] < 0 < lo_hi[1] else ends[0], ends[1]]
        s["best_p_value"] = fits[best].get("p_value")
        # the best of many measures over few contexts: its p-value is the smallest of many, not one test
        s["measures_compared"] = len(finite)
    if col.bayes is not None:
        s["max_abs_diff_bayes"] = max(r["abs_diff"] for r in per)
        s["mean_abs_diff_bayes"] = float(np.mean([r["abs_diff"] for r in per]))
    if col.bayes_losses is not None:
        s["max_abs_excess"] = max(abs(r["excess"]) for r in per)
    if per and "abs_diff_task_weighted" in per[0]:
        s["max_abs_diff_task_weighted"] = max(r["abs_diff_task_weighted"] for r in per)
    return s


def run(adapter, options: Options, data: str | None, progress: bool = True) -> EvalOutput:
    from contextlab.data import synthetic as syn

    check_options(options)
    store = open_store(data, adapter, "analyze entropy", kinds=("parity",), split=options.split)
    protocol = options.protocol
    if protocol == "auto":
        protocol = "parity" if syn.parity_of_store(store) is not None else "text"
    if protocol == "parity" and options.split == "run":
        raise UserError(
            "--split run reads the text a run held out, and the parity protocol measures a store of fresh "
            "samples written for measuring; leave --split out"
        )
    view, held = heldout.documents(store, adapter.info.path, options.split, of=options.heldout_of)
    collect = collect_parity if protocol == "parity" else collect_text
    if not options.contexts:  # fitted; the result records [] (= fitted) and each context's own row
        fitted = (
            parity_contexts(parity_store(store)[0].n_bits)
            if protocol == "parity"
            else text_contexts(adapter.context)
        )
        options = dataclasses.replace(options, contexts=fitted)
    announce(
        "entropy",
        {
            "protocol": protocol,
            "contexts": options.contexts,
            "samples": options.samples,
            "layer": options.layer,
            "estimators": options.estimators or "none",
            "split": heldout.announced(held),
        },
    )
    col = collect(adapter, view if protocol == "text" else store, options, progress)
    results, arrays = analyze(col, options, progress)
    results["protocol"] = col.info
    label = adapter.info.id

    def plot(path):
        from contextlab.analysis.entropy_plots import entropy_png

        spectra = arrays["relative_eigenvalues"]
        series = intrinsic.measure_series(results["contexts"])
        return entropy_png(results, series, spectra, options.thresholds, path, title=label)

    return EvalOutput(
        results,
        {"store": str(store.path), "hash": store.hash, "samples": options.samples, **held},
        arrays=arrays,
        plot=plot,
    )
