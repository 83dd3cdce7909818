"""Plots the report draws from result files, rendered in memory (PNG bytes for the page, no file).

Trade-off: the report reads result folders and writes only its page, so a figure it draws
itself is never saved beside the results; it is drawn again each time a page is built.
"""

from __future__ import annotations

from contextlab.figures import png_bytes, pyplot


def loss_curve_png(rows: list[dict], run: str = "") -> bytes:
    """Training loss (every logged step) and validation loss against tokens seen, as PNG bytes."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    x = [r.get("tokens", r["step"]) for r in rows]
    ax.plot(x, [r["loss"] for r in rows], label="train", color="#3b6ea8", linewidth=1)
    val = [(r.get("tokens", r["step"]), r["val_loss"]) for r in rows if "val_loss" in r]
    if val:
        ax.plot(*zip(*val), label="validation", color="#c0392b", marker="o", markersize=3)
    ax.set_xlabel("tokens" if "tokens" in rows[0] else "step")
    ax.set_ylabel("loss (nats/token)")
    what = "training and validation loss" if val else "training loss"
    ax.set_title(f"{what}: {run}" if run else what)
    ax.legend()
    return png_bytes(fig)


def curves_figure(curves: dict[str, list[tuple[float, float]]], xlabel: str, ylabel: str, title: str):
    """One line with markers per label over its (x, y) points: runs compared on one axis."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    for label, points in curves.items():
        ax.plot(*zip(*points), label=label, marker="o", markersize=3, linewidth=1.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    # losses that differ in the fourth decimal read as themselves, not as "+7.656" and 0.0003
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig
