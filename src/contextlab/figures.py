"""Figures: matplotlib on the Agg backend, and one way to render a figure as a PNG.

``pyplot()`` imports ``matplotlib.pyplot`` with the non-interactive Agg backend, so plots
draw without a display; callers import it inside their plotting function, so code that only
computes (tests, sweeps) never pays for matplotlib. ``png_bytes`` lays the figure out,
renders it to memory and closes it (also when rendering fails, so no figure piles up in a
long run): the report embeds such bytes in its page without writing a file. ``save_png``
writes them with ``atomic_write_bytes``: a failed or killed save leaves the old PNG in
place, never a truncated one. The trade-off is holding one rendered PNG in memory, a few
hundred kilobytes.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from contextlab.io import atomic_write_bytes


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig: Any, *, dpi: int = 110) -> bytes:
    """``fig.tight_layout()``, then ``fig`` rendered as a PNG in memory; the figure is closed."""
    plt = pyplot()
    try:
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi)
    finally:
        plt.close(fig)
    return buf.getvalue()


def save_png(fig: Any, path: str | os.PathLike, *, dpi: int = 110) -> Path:
    """``fig.tight_layout()``, then write ``fig`` to ``path`` as a PNG atomically and close it."""
    atomic_write_bytes(path, png_bytes(fig, dpi=dpi))
    return Path(path)


def default_plot_path(folder: str | os.PathLike, name: str) -> Path:
    """Where a command draws its plot of ``folder`` by default: inside it, or, when the folder
    cannot be written (a read-only store), ``./FOLDERNAME_NAME`` in the current directory."""
    folder = Path(folder)
    if os.access(folder, os.W_OK):
        return folder / name
    return Path.cwd() / f"{folder.resolve().name}_{name}"
