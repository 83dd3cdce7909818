"""The plots every evaluation writes beside its JSON (PNG, written atomically).

Matplotlib with the Agg backend, imported inside each function so that evaluations
that are only computed (tests, sweeps) never pay for it. Each function takes plain
lists/dicts from the result, so the report layer can redraw them from JSON alone; the
module sits outside ``contextlab.eval`` so that it can without importing an evaluation
(or torch).
"""

from __future__ import annotations

import math
from pathlib import Path

from contextlab.figures import pyplot, save_png


def _figure(w: float = 6.5, h: float = 4.0):
    return pyplot().subplots(figsize=(w, h))


def contextwise_png(curves: dict[str, dict], out: str | Path, smooth: int = 0) -> Path:
    """``contextwise_figure`` written to ``out`` as a PNG."""
    return save_png(contextwise_figure(curves, smooth), out)


def contextwise_figure(curves: dict[str, dict], smooth: int = 0, title: str = ""):
    """Loss vs context length (log x) for several models; a dotted line marks each training context,
    a grey band the context lengths past it (beyond the training context), a square and bar the
    headline best-context loss (the mean over the last positions of the training context), a
    triangle and bar the curve's lowest window (the true minimum, ``contextwise.curve_minimum``) and
    a cross its lowest single position (the result's ``min_loss``); with ``stderr``, a faint band the
    95% interval of each position's mean, so a bump that noise makes reads as one.

    smooth > 1: each model's line is the mean over ``smooth`` positions centred on each point (the
    legend says so), drawn over the faint per-position curve; the result's numbers are never smoothed.
    The legend lists each model in its colour, then the marks they share in black, once.

    curves: label -> {"context": [...], "loss": [...], "train_context": int | None, "minimum": the
    result's ``minimum``, "best_context": the result's ``best_context``, "stderr": [...] (each
    optional)}.
    """
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig, ax = _figure(6.5, 5.0)
    models: list = []  # the legend: each model's line, then the shared marks (in black, once)
    shared: dict[str, object] = {}
    bands: set[tuple] = set()

    def mark(text: str, proxy) -> None:
        shared.setdefault(text, proxy)

    for label, c in curves.items():
        x, y = np.asarray(c["context"], float), np.asarray(c["loss"], float)
        if smooth > 1 and len(y) > smooth:
            # a centred moving average over the positions 1, 2, 3, ... (linear, however the axis is
            # drawn): no shift; the half window at each end has only the faint per-position curve
            k = np.ones(smooth) / smooth
            xs, ys = np.convolve(x, k, mode="valid"), np.convolve(y, k, mode="valid")
            (line,) = ax.plot(xs, ys, label=f"{label} (moving mean, {smooth} positions wide)", linewidth=1.2)
            ax.plot(x, y, color=line.get_color(), alpha=0.3, linewidth=0.6, zorder=1)
            mark("each position", Line2D([], [], color="black", alpha=0.3, linewidth=0.6))
        else:
            (line,) = ax.plot(x, y, label=label, linewidth=1.2)
        models.append(line)
        color = line.get_color()
        sem = np.asarray(c.get("stderr") or [], float)
        if len(sem) == len(y):
            ax.fill_between(x, y - 1.96 * sem, y + 1.96 * sem, color=color, alpha=0.1, linewidth=0, zorder=0)
            # over the pieces at that position; the headline's intervals are over documents
            mark(
                "95% interval of each position (over the pieces)",
                Patch(color="black", alpha=0.1, linewidth=0),
            )
        ctx = c.get("train_context")
        if ctx:
            ax.axvline(ctx, color=color, linestyle=":", linewidth=1)
            mark(
                f"training context ({ctx:,} tokens)",
                Line2D([], [], color="black", linestyle=":", linewidth=1),
            )
            band = (ctx, float(x.max()) if len(x) else 0.0)
            if band[1] > ctx and band not in bands:  # models of one context share one band
                bands.add(band)
                ax.axvspan(*band, color="grey", alpha=0.12)
                mark("beyond the training context", Patch(color="grey", alpha=0.12))
        best = c.get("best_context") or {}
        if {"loss", "from", "to"} <= set(best):
            ax.hlines(best["loss"], best["from"], best["to"], color=color, linewidth=2.5, zorder=4)
            square = dict(linestyle="none", marker="s", markersize=7, mec="black")
            ax.plot([best["to"]], [best["loss"]], color=color, zorder=5, **square)
            mark(
                f"best-context loss (the headline): mean of positions {best['from']:,}-{best['to']:,}",
                Line2D([], [], color="white", **square),
            )
        minimum = c.get("minimum") or {}
        if "window" in minimum:
            w = minimum["window"]
            ax.hlines(w["loss"], w["from"], w["to"], color="black", linewidth=2.5, zorder=4)
            mid = math.sqrt(w["from"] * w["to"])  # the middle on the log axis
            width = w["to"] - w["from"] + 1
            tri = dict(linestyle="none", marker="v", markersize=9, mec="black")
            ax.plot([mid], [w["loss"]], color=color, zorder=5, **tri)
            mark(f"lowest mean over {width} positions anywhere", Line2D([], [], color="white", **tri))
        if "position" in minimum:
            p = minimum["position"]
            cross = dict(linestyle="none", marker="x", markersize=7, mew=1.5)
            ax.plot([p["context"]], [p["loss"]], color=color, zorder=5, **cross)
            mark("lowest single position", Line2D([], [], color="black", **cross))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length (tokens seen before the predicted token)")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(title or "contextwise loss: mean loss of the token at each position", fontsize=9)
    handles = models + list(shared.values())
    labels = [h.get_label() for h in models] + list(shared)
    ncol = 1 if max(map(len, labels), default=0) > 45 else 2  # long model paths take the width
    rows = math.ceil(len(labels) / ncol)
    fig.set_size_inches(6.5, 3.9 + 0.16 * rows)  # the legend below grows the figure, not over the axes
    ax.legend(handles, labels, fontsize=7, ncol=ncol, loc="upper center", bbox_to_anchor=(0.5, -0.17))
    ax.grid(alpha=0.3)
    return fig


def bayes_fit_png(lengths, losses, sems, params: dict | None, out: str | Path, title: str = "") -> Path:
    """Loss vs visible tokens l (mean over the targets, bars ± 1 standard error, as the legend says)
    with the fitted C0 + C / l^gamma, its parameters with their standard errors; a fit the points do
    not pin down (``loose``: the parameters so named) says so in its legend entry. The bars are of each
    length alone: the same targets are read at every length, so a paired difference (the context
    gain) is far narrower than the bars' overlap suggests."""
    import numpy as np

    fig, ax = _figure()
    ax.errorbar(
        lengths,
        losses,
        yerr=sems,
        fmt="o",
        markersize=4,
        capsize=2,
        label="measured: mean ± 1 standard error",
    )
    if params:
        grid = np.geomspace(min(lengths), max(lengths), 200)

        def value(p: str) -> str:
            err = params.get(p + "_err")
            return f"{params[p]:.3f}" + (f" ± {err:.2g}" if isinstance(err, (int, float)) else "")

        loose = params.get("loose") or []
        ax.plot(
            grid,
            params["C0"] + params["C"] / grid ** params["gamma"],
            label=(
                f"C0 + C/l^γ: C0={value('C0')}, C={value('C')}, γ={value('gamma')}, R²={params['r2']:.4f}"
                + (f"\nnot pinned down by these points: {', '.join(loose)}" if loose else "")
            ),
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("visible context l (tokens)")
    ax.set_ylabel("last-token loss (nats)")
    ax.set_title(title or "Bayes-risk fit")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save_png(fig, out)


HEATMAP_MIN_WIDTH = 5.0  # inches: a heatmap of one or two columns still has room for its title


def heatmap_png(
    matrix,
    rows: list,
    cols: list,
    out: str | Path,
    *,
    row_label: str,
    col_label: str,
    title: str,
    vmin: float = 0.0,
    vmax: float = 1.0,
    intervals=None,
    value_label: str = "",
    chance: float | None = None,
    per_cell: int | None = None,
) -> Path:
    """A NIAH-style heatmap: rows (e.g. depth %) x columns (e.g. context length), values annotated.

    intervals: matrix of (lo, hi) per cell (95% intervals), printed under each value.
    value_label: what a cell's value is, written along the colour bar.
    chance: the accuracy of a model that ignores the context; the colours then centre on it (yellow
    is chance, red below, green above: on a plain scale chance 0.2 reads as "bad"), the colour bar
    marks it and the title says it, with ``per_cell``, the prompts behind each cell.
    The figure is at least ``HEATMAP_MIN_WIDTH`` wide and the title is wrapped to it, so a grid of
    one length keeps its whole title.
    """
    import textwrap

    import numpy as np
    from matplotlib.colors import TwoSlopeNorm

    m = np.asarray(matrix, float)
    width = max(HEATMAP_MIN_WIDTH, 1.2 + 0.9 * len(cols))
    chars = int((width - 1.2) * 14)  # what fits in the figure at font size 9
    said = [f"chance {chance:.2f}"] if chance is not None else []
    said += [f"{per_cell:,} prompt{'s' * (per_cell != 1)} a cell"] if per_cell else []
    title = title + ("\n" + "; ".join(said) if said else "")
    lines = [wrapped for line in title.split("\n") for wrapped in textwrap.wrap(line, chars) or [""]]
    fig, ax = _figure(width, 1.2 + 0.5 * len(rows) + 0.2 * len(lines))
    centred = chance is not None and vmin < chance < vmax
    norm = TwoSlopeNorm(vcenter=chance, vmin=vmin, vmax=vmax) if centred else None
    scale = {"norm": norm} if centred else {"vmin": vmin, "vmax": vmax}
    im = ax.imshow(m, cmap="RdYlGn", aspect="auto", **scale)
    ax.set_xticks(range(len(cols)), [_tick(c) for c in cols])
    ax.set_yticks(range(len(rows)), [_tick(r) for r in rows])
    ax.set_xlabel(col_label)
    ax.set_ylabel(row_label)
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            if np.isfinite(m[i, j]):
                text = f"{m[i, j]:.2f}"
                if intervals is not None and intervals[i][j] is not None:
                    lo, hi = intervals[i][j]
                    text += f"\n[{lo:.2f}, {hi:.2f}]"
                ax.text(j, i, text, ha="center", va="center", fontsize=7.5 if intervals is None else 6.5)
    bar = fig.colorbar(im, ax=ax)
    if value_label:
        bar.set_label(value_label, fontsize=8)
    if centred:
        bar.ax.axhline(chance, color="black", linewidth=1.2)
        _chance_tick(bar, norm, chance)
    ax.set_title("\n".join(lines), fontsize=9)
    return save_png(fig, out)


def _fit_label(label: str, height_in: float, fontsize: float = 9) -> str:
    """An axis label wrapped onto lines that fit the figure's height (a long y label ran off it)."""
    import textwrap

    chars = max(20, int(0.8 * height_in * 72 / (0.55 * fontsize)))  # a character is about 0.55 em wide
    return "\n".join(textwrap.wrap(label, chars)) or label


def _chance_tick(bar, norm, chance: float) -> None:
    """The colour bar's ticks with chance among them, labelled so; a tick that would overprint it is
    dropped (the label 'chance' beside the bar overprinted a tick at 0.2)."""
    near = [t for t in bar.get_ticks() if abs(float(norm(t)) - float(norm(chance))) < 0.07]
    ticks = sorted({*[t for t in bar.get_ticks() if t not in near and norm.vmin <= t <= norm.vmax], chance})
    bar.set_ticks(ticks, labels=[f"chance {t:.2f}" if t == chance else f"{t:g}" for t in ticks])
    bar.ax.tick_params(labelsize=7)


def _tick(v) -> str:
    """A tick label: a whole number without its '.0' (depth 50.0 -> 50), anything else as it is."""
    return f"{v:g}" if isinstance(v, float) else str(v)


def lines_png(
    series: dict[str, tuple[list, list]],
    out: str | Path,
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = False,
    chance: float | None = None,
    bands: dict[str, list] | None = None,
    band_label: str = "95% interval",
    note: str = "",
) -> Path:
    """Several y(x) lines (accuracy by gold position, by shots, by visible context...).

    bands: for a series label, its (lo, hi) 95% interval at each x, drawn as a shaded band and
    named in the legend by ``band_label``. Whole-number x (positions, shots) get whole-number ticks.
    note: a line under the title (a measurement past the training context, say).
    """
    from matplotlib.ticker import MaxNLocator

    fig, ax = _figure()
    for label, (x, y) in series.items():
        (line,) = ax.plot(x, y, marker="o", markersize=4, label=label)
        if bands and label in bands:
            lo, hi = zip(*bands[label])
            ax.fill_between(
                x, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0, label=f"{label}: {band_label}"
            )
    if chance is not None:
        ax.axhline(chance, color="grey", linestyle="--", linewidth=1, label=f"chance ({chance:.2g})")
    if logx:
        ax.set_xscale("log", base=2)
    elif all(float(v).is_integer() for x, _ in series.values() for v in x):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if note:
        title = f"{title}\n{note}"
    ax.set_xlabel(xlabel)
    ax.set_ylabel(_fit_label(ylabel, fig.get_figheight()), fontsize=9)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="best", framealpha=0.85)
    ax.grid(alpha=0.3)
    return save_png(fig, out)
