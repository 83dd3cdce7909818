"""Figures of ``analyze entropy``: spectra per context and the loss against every measure.

One PNG with six panels, after the seed's figures: relative eigenvalue vs index on a
log y axis with the dimension thresholds as grey lines (Figure 15, left) and on log-log
axes (Figure 3); the loss (and, for parity data, the exact Bayes risk) vs context
(Figure 7, middle); the loss vs PCA entropy for each n, vs threshold dimension for each
threshold (Figure 15, right) and vs the KDE entropy and scikit-dimension estimates.
Measures of very different scales share a panel by standardising each to zero mean and
unit variance over the contexts: a linear relation stays linear and Pearson r is
unchanged, which is what the panels are for.

Trade-off: reads only the result dict, its measures as series (``intrinsic.measure_series``
of the per-context rows, passed in so this module never imports the analysis) and the
spectra array, so a figure can be redrawn from a saved ``entropy.json`` +
``entropy.relative_eigenvalues.npy`` without the model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from contextlab.figures import pyplot, save_png


def _standardise(x) -> np.ndarray:
    x = np.asarray(x, float)
    sd = x.std()
    return (x - x.mean()) / sd if sd > 0 else x - x.mean()


def _scatter(ax, series: dict, ce: list[float], fits: dict, title: str) -> None:
    for name, x in series.items():
        r = fits.get(name, {}).get("r", float("nan"))
        shown = "constant" if r is None else f"r={r:+.3f}"
        (line,) = ax.plot(_standardise(x), ce, "o-", ms=3, lw=0.6, label=f"{_measure(name)} ({shown})")
        ax.plot(_standardise(x)[:1], ce[:1], "s", ms=5, color=line.get_color())  # the shortest context
    ax.set_xlabel(
        "measure (standardised over contexts)\njoined in order of l; square = the shortest l", fontsize=8
    )
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6)


def _measure(name: str) -> str:
    """A series name for a legend: 'entropy@10' -> 'first 10 components', 'dimension@0.01' ->
    'threshold 0.01'; the other measures by their names."""
    kind, _, arg = name.partition("@")
    if kind == "entropy" and arg:
        return f"first {arg} components"
    if kind == "dimension" and arg:
        return f"threshold {arg}"
    return name


def _spectra(ax, ctx: list, spectra: np.ndarray, colors, thresholds: list[float], logx: bool) -> None:
    """Relative eigenvalue vs index, one line per context; the dimension thresholds in grey."""
    idx = np.arange(1, spectra.shape[1] + 1)
    for c, rel, col in zip(ctx, spectra, colors):
        ax.plot(idx, np.maximum(rel, 1e-12), color=col, lw=1, label=f"l={c}")
    for t in thresholds:
        ax.axhline(t, color="grey", lw=0.6, ls="--")
    ax.set_yscale("log")
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel("eigenvalue index")
    ax.set_ylabel("relative eigenvalue")
    ax.set_title("PCA spectrum per visible context" + (" (log-log)" if logx else ""), fontsize=9)


def entropy_png(
    results: dict,
    series: dict[str, list[float]],
    spectra: np.ndarray,
    thresholds: list[float],
    path,
    title: str = "",
) -> Path:
    """The six panels; ``series`` is ``measure_series(results["contexts"])`` (one value per context)."""
    plt = pyplot()
    per = results["contexts"]
    ctx = [r["context"] for r in per]
    ce = [r["ce"] for r in per]
    fits = results["fits_vs_ce"]
    colors = plt.cm.viridis(np.linspace(0, 1, len(ctx)))
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for ax, logx in ((axes[0, 0], False), (axes[0, 1], True)):
        _spectra(ax, ctx, spectra, colors, thresholds, logx)
    axes[0, 0].legend(fontsize=6, ncol=2)
    ax = axes[0, 2]
    half = [1.96 * r["ce_stderr"] for r in per]  # the bars said nothing of what they were (they were 1 SE)
    ax.errorbar(ctx, ce, yerr=half, fmt="o-", ms=3, label="model (95% interval over the samples)")
    if "bayes_risk" in per[0]:
        ax.plot(ctx, [r["bayes_risk"] for r in per], "s--", ms=3, label="exact Bayes risk")
    ax.set_xlabel("visible context l")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title("loss vs context", fontsize=9)
    ax.legend(fontsize=7)
    pick = lambda prefix: {k: v for k, v in series.items() if k.startswith(prefix)}
    _scatter(axes[1, 0], pick("entropy@"), ce, fits, "CE vs intrinsic entropy (sum log rel. eig., first n)")
    _scatter(axes[1, 1], pick("dimension@"), ce, fits, "CE vs intrinsic dimension (rel. eig. >= threshold)")
    others = {k: v for k, v in series.items() if not k.startswith(("entropy@", "dimension@"))}
    if others:
        _scatter(axes[1, 2], others, ce, fits, "CE vs KDE entropy and TwoNN / MLE / lPCA")
    else:
        axes[1, 2].axis("off")
    fig.suptitle(title, fontsize=10)
    return save_png(fig, path)
