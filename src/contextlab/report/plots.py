"""Plots the report draws from result files (PNG, written atomically)."""

from __future__ import annotations

import io
from pathlib import Path

from contextlab.io import atomic_write_bytes


def loss_curve_png(rows: list[dict], out: Path, title: str = "") -> Path:
    """Training loss (every logged step) and validation loss against tokens seen."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(out, buf.getvalue())
    return out
