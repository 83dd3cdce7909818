"""Training metrics: one JSON line per logged step, a console line, optional TensorBoard events.

``MetricsWriter`` appends to ``RUN/metrics.jsonl`` (rank 0 only) and echoes a short line
through the progress bar so the two never garble each other; ``progress_bar`` is a tqdm
bar that can be switched off. The trainer decides what a row holds; this module only
writes it. Trade-off: plain JSON lines rather than a logging framework, so a run is read
back with one line of Python (``contextlab.rundir.read_metrics``) and a resumed run can
truncate the file to its checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

from contextlab.errors import UserError
from contextlab.rundir import read_metrics, summarize  # noqa: F401  (reading a run's rows lives there)


class MetricsWriter:
    def __init__(self, run_dir: Path, enabled: bool, tensorboard: bool):
        self.enabled = enabled
        self.fh = open(run_dir / "metrics.jsonl", "a", encoding="utf-8") if enabled else None
        self.tb = None
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise UserError(
                    "train.tensorboard needs the tensorboard package: pip install tensorboard"
                ) from None
            self.tb = SummaryWriter(str(run_dir / "tensorboard"))

    def write(self, row: dict, bar) -> None:
        if not self.enabled:
            return
        self.fh.write(json.dumps(row) + "\n")
        self.fh.flush()
        parts = [f"step {row['step']:>6}", f"loss {row['loss']:.4f}", f"lr {row['lr']:.2e}"]
        if "tokens_per_s" in row:
            parts += [f"{row['tokens_per_s']:,.0f} tok/s", f"MFU {100 * row['mfu']:.1f}%"]
        if "val_loss" in row:
            parts.append(f"val {row['val_loss']:.4f}")
        bar.write("  ".join(parts))
        if self.tb:
            for k, v in row.items():
                if k != "step":
                    self.tb.add_scalar(k, v, row["step"])

    def close(self) -> None:
        if self.fh:
            self.fh.close()
        if self.tb:
            self.tb.close()


def progress_bar(enabled: bool, total: int | None, initial: int):
    from tqdm.auto import tqdm

    return tqdm(
        total=total, initial=initial, unit="step", desc="train", disable=not enabled, dynamic_ncols=True
    )
