"""Training metrics: one JSON line per logged step, a console line, optional TensorBoard events.

``MetricsWriter`` appends to ``RUN/metrics.jsonl`` (rank 0 only) and echoes a short line
through the progress bar so the two never garble each other; ``progress_bar`` is a tqdm
bar that can be switched off; ``Throughput`` measures tokens/s and MFU between logged steps;
``truncate_metrics`` drops the lines past a resumed checkpoint and a line torn by a kill (an atomic
rewrite; a start without a checkpoint empties the file).

A row holds ``step``, ``loss``, ``lr``, ``tokens``, every metric the objective returns (e.g.
``loss_head1`` .. ``loss_headN`` of multi-token prediction, ``loss_tokens``: the tokens that
carry a loss in the step), on logged steps ``tokens_per_s``, ``mfu`` (when the peak is known)
and ``elapsed``, and on validation steps ``val_loss``, ``best_val_loss``, ``best_step``.
Trade-off: plain JSON lines rather than a logging framework, so a run is read back with one
line of Python (``contextlab.rundir.read_metrics``) and a resumed run can truncate the file to its checkpoint.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch

from contextlab.errors import UserError
from contextlab.io import atomic_write_text
from contextlab.rundir import metrics_lines, read_metrics, summarize
from contextlab.train.flops import mfu


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
            parts.append(f"{row['tokens_per_s']:,.0f} tok/s")
        if "mfu" in row:
            parts.append(f"MFU {100 * row['mfu']:.1f}%")
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


class Throughput:
    """Tokens/s and MFU over the steps since the last ``read``.

    ``peak_flops`` is the peak of all processes together (0 = unknown: no MFU). An MFU above
    100% is impossible, so it means the peak is wrong (measured on a busy machine, or for
    another device): it is never reported. ``say`` explains a missing MFU once.
    """

    def __init__(self, flops_per_token: float, peak_flops: float, say: Callable[[str], None] = print):
        self.flops_per_token, self.peak, self.say = flops_per_token, peak_flops, say
        self.since, self.tokens, self.warned = time.perf_counter(), 0, False

    def add(self, tokens: int) -> None:
        self.tokens += tokens

    def read(self) -> dict:
        """{"tokens_per_s": ..., "mfu": ...} since the last read (mfu only when known and possible)."""
        tps = self.tokens / max(time.perf_counter() - self.since, 1e-9)
        self.since, self.tokens = time.perf_counter(), 0
        out = {"tokens_per_s": tps}
        value = mfu(tps, self.flops_per_token, self.peak) if self.peak else None
        if value is not None and value <= 1.0:
            out["mfu"] = value
        elif not self.warned:
            self.warned = True
            self.say(
                "MFU not shown: no peak FLOP/s is known for this device; measure it once with "
                "`contextlab peak` or set train.peak_flops"
                if value is None
                else f"MFU not shown: {tps:,.0f} tokens/s would be {100 * value:.0f}% of the peak "
                f"{self.peak:.3g} FLOP/s, so that peak is too low; measure it again (contextlab peak) "
                "or set train.peak_flops"
            )
        return out


def step_metrics(
    losses: list[torch.Tensor],
    metrics: list[dict],
    all_reduce: Callable[[list[float]], list[float]],
    world: int,
) -> dict[str, float]:
    """A step's loss and objective metrics from its micro-batches' ``losses`` and ``metrics`` (dicts of
    scalars), over ``world`` processes (``all_reduce`` sums a list of floats across them). The loss is
    the mean over the step's scored tokens when the objective counts them (``loss_tokens``), else over
    micro-batches and processes; float metrics are means over micro-batches and processes; integer
    ones (counts such as loss_tokens) are sums. One host-device sync for all of them."""
    accum = len(losses)
    names = list(metrics[0])
    values = [torch.stack([torch.as_tensor(m[k], device=losses[0].device) for m in metrics]) for k in names]
    counts = [not v.is_floating_point() for v in values]
    if "loss_tokens" in names:  # weighted as the gradient is (trainer._to_token_mean)
        total = (torch.stack(losses).double() * values[names.index("loss_tokens")].double()).sum()
    else:
        total = torch.stack(losses).double().div(accum).sum()
    values = [v.sum().double() if c else v.double().div(accum).sum() for v, c in zip(values, counts)]
    summed = all_reduce(torch.stack([total, *values]).tolist())
    out = {k: round(v) if c else v / world for k, v, c in zip(names, summed[1:], counts)}
    if "loss_tokens" in names:
        return {"loss": summed[0] / max(out["loss_tokens"], 1), **out}
    return {"loss": summed[0] / world, **out}


def truncate_metrics(run_dir: Path, step: int) -> None:
    """Keep the rows of ``RUN/metrics.jsonl`` up to ``step`` (a resumed run repeats the later ones; a row
    torn by a kill is dropped too). ``step`` 0 empties the file: a run that starts with no checkpoint
    never continues the rows of an earlier start."""
    f = Path(run_dir) / "metrics.jsonl"
    if not f.exists():
        return
    keep = [line for line, row in metrics_lines(run_dir) if row["step"] <= step] if step else []
    atomic_write_text(f, "".join(line + "\n" for line in keep))


def progress_bar(enabled: bool, total: int | None, initial: int):
    from contextlab import bars

    return bars.bar(
        total=total,
        initial=initial,
        unit="step",
        desc="train",
        disable=None if enabled else True,
        dynamic_ncols=True,
    )


def last_logged(run_dir: str | Path) -> tuple[float, float | None, float | None]:
    """(last training loss, last validation loss, last next-token validation loss) in
    ``RUN/metrics.jsonl``; nan / None for what it lacks."""
    logged = summarize(read_metrics(run_dir))
    return float(logged.get("train_loss", float("nan"))), logged.get("val_loss"), logged.get("val_lm_loss")
