"""Plots the report draws from result files (PNG, written atomically)."""

from __future__ import annotations

from pathlib import Path

from contextlab.figures import pyplot, save_png


def loss_curve_png(rows: list[dict], out: Path, title: str = "") -> Path:
    """Training loss (every logged step) and validation loss against tokens seen."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    x = [r.get("tokens", r["step"]) for r in rows]
    ax.plot(x, [r["loss"] for r in rows], label="train", color="#3b6ea8", linewidth=1)
    val = [(r.get("tokens", r["step"]), r["val_loss"]) for r in rows if "val_loss" in r]
    if val:
        ax.plot(*zip(*val), label="validation", color="#c0392b", marker="o", markersize=3)
    ax.set_xlabel("tokens" if "tokens" in rows[0] else "step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(title)
    ax.legend()
    save_png(fig, out)
    return out
