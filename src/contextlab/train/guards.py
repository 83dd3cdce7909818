"""What keeps a run directory honest: one writer, no foreign folder, no stale rows, no NaN weights.

* ``guard_run``: around a whole run, refuse an ``out_dir`` that is not a run (a token store, any
  other non-empty folder), hold ``io.exclusive_lock`` on ``RUN/.lock`` so a second ``train`` on the
  same run stops at once with one line naming the holder, clear checkpoint folders a kill left
  half written, and turn a full disk anywhere in the run into one line naming the last good
  checkpoint. Under torchrun only rank 0 takes the lock; every rank learns its outcome through
  one all-reduce, so a refused start ends all ranks together and none waits for a peer.
* ``start_fresh``: a start with no checkpoint begins a clean ``metrics.jsonl`` (rows of an earlier
  start killed before its first checkpoint never mix into this run; a ``note:`` line says the run
  starts over from step 0 and why), and a directory whose
  ``config.toml`` holds a different config is refused like a resume with a different config.
* ``check_same_config``: a config that differs from a run's recorded one in a key that changes the
  numbers is refused in one line naming the first such key with both values.
* ``count_non_finite`` and the messages of a run that diverged: weights are checked before every
  checkpoint, so a non-finite update is never saved and the last good checkpoint is named.

Trade-off: the lock and the checks cost a few file operations per run and one scan of the weights
per checkpoint (far below the cost of writing them).
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path

import torch

from contextlab.errors import UserError
from contextlab.io import exclusive_lock
from contextlab.rundir import (
    CHECKPOINTS,
    LOCK,
    STATE,
    WEIGHTS,
    check_run_dir,
    latest_checkpoint,
    read_config,
    read_metrics,
)
from contextlab.train import distributed as D
from contextlab.train.checkpoint import remove_temporary
from contextlab.train.config import RunConfig, describe_difference
from contextlab.train.metrics import truncate_metrics

FULL_DISK = (errno.ENOSPC, errno.EDQUOT)


@contextlib.contextmanager
def guard_run(run_dir: Path, info: D.DistInfo) -> Iterator[None]:
    """Hold the run directory for the block (see the module docstring)."""
    with contextlib.ExitStack() as stack:
        error = None
        if info.is_main:
            try:
                check_run_dir(run_dir)
                stack.enter_context(exclusive_lock(run_dir / LOCK, f"run directory {run_dir}"))
                remove_temporary(run_dir)
            except UserError as exc:
                error = exc
        refused = D.all_reduce_sum([float(error is not None)], info)[0]
        if error is not None:
            raise error
        if refused:
            raise UserError(f"rank 0 refused to start the run in {run_dir}; see its message")
        try:
            yield
        except (KeyboardInterrupt, SystemExit) as exc:  # Ctrl-C, or SIGTERM's exit: the command line's
            exc.rerun = rerun_goes_on(run_dir)  # type: ignore[attr-defined]  # line says where a rerun goes on
            raise
        except OSError as exc:
            if exc.errno == errno.EROFS:  # remounted read-only under a run: the rerun goes on where it was
                raise UserError(
                    f"{exc.filename or run_dir} is on a read-only file system; make it writable again and "
                    f"run the same command again: {rerun_goes_on(run_dir)}"
                ) from None
            if exc.errno not in FULL_DISK:
                raise
            raise UserError(
                f"the disk is full ({exc.filename or run_dir}); free some space and run the same command "
                f"again: {rerun_goes_on(run_dir)}"
            ) from None


def last_good(run_dir: Path) -> str:
    """Which checkpoint a run can go back to, as a clause of a message."""
    latest = latest_checkpoint(run_dir)
    return f"the last good checkpoint is {latest}" if latest else "the run has no checkpoint yet"


def rerun_goes_on(run_dir: Path) -> str:
    """Where the same command goes on from, as a clause of a message: a run with no checkpoint yet
    starts over (it is never told to "resume" from nothing)."""
    latest = latest_checkpoint(run_dir)
    return (
        f"it resumes from the last good checkpoint, {latest}"
        if latest
        else "the run has no checkpoint yet, so it starts over from step 0"
    )


def refuse_stateless_weights(run_dir: Path) -> None:
    """One line for a run that would start over beside a step folder holding weights but no state.json
    (a user's removed or lost one): training from step 0 replaced that folder, weights and all, when
    it reached the step. A killed checkpoint write leaves no such folder (it writes a hidden one)."""
    folder = Path(run_dir) / CHECKPOINTS
    if not folder.is_dir():
        return
    for d in sorted(folder.glob("step_*")):
        if d.is_dir() and (d / WEIGHTS).is_file() and not (d / STATE).is_file():
            raise UserError(
                f"{d} holds weights but no state.json, so the run cannot resume from it and would start "
                "over, replacing it when it reaches that step: restore its state.json, or move the folder "
                "away to start the run over"
            )


def start_fresh(run_dir: Path, cfg: RunConfig, is_main: bool) -> None:
    """A start without a checkpoint: refuse a different config, or a step folder of weights without its
    state.json (``refuse_stateless_weights``), then (rank 0) empty the metrics."""
    refuse_stateless_weights(run_dir)
    recorded = read_config(run_dir)
    if recorded:
        check_same_config(
            run_dir,
            recorded,
            cfg,
            "no checkpoint yet: see its config.toml",
            "use another train.out_dir, the same config, or delete the folder to start over",
        )
    if is_main:
        _note_starting_over(run_dir, cfg.train.ckpt_every, cfg.train.max_steps)
        truncate_metrics(run_dir, 0)


def _note_starting_over(run_dir: Path, ckpt_every: int, max_steps: int = 0) -> None:
    """Say it when a run with metrics but no finished checkpoint starts over from step 0, and why (a run
    of ``max_steps`` below ``ckpt_every`` writes its first checkpoint at its end)."""
    rows = read_metrics(run_dir)
    if not rows:
        return
    last = rows[-1]["step"]
    first = min(ckpt_every, max_steps) if max_steps else ckpt_every
    if not ckpt_every:
        why = "its one checkpoint is written at the end (train.ckpt_every = 0)"
    elif last < first:
        at_end = ", its end" if first == max_steps and max_steps < ckpt_every else ""
        why = f"it stopped before its first checkpoint, due at step {first}{at_end}"
    else:
        why = "a checkpoint write was cut off by a kill, or its checkpoints were removed"
    print(
        f"note: {run_dir} has metrics up to step {last} but no finished checkpoint ({why}); "
        "it starts over from step 0"
    )


def check_same_config(run_dir: Path, recorded: dict, cfg: RunConfig, where: str, fix: str) -> None:
    """Refuse ``cfg`` for ``run_dir`` when a key that changes the numbers differs from the ``recorded``
    config (``RESUME_FREE`` keys may differ), naming the first such key with both values."""
    why = describe_difference(recorded, cfg) if recorded else "its config.toml cannot be read"
    if why is not None:
        raise UserError(f"{run_dir} holds a run with a different config ({why}; {where}); {fix}")


def count_non_finite(module: torch.nn.Module, info: D.DistInfo) -> int:
    """Parameter tensors (shards under FSDP) holding a NaN or infinity, summed over processes."""
    bad = 0
    for p in module.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        bad += int(not bool(torch.isfinite(local.detach()).all()))
    return int(D.all_reduce_sum([float(bad)], info)[0])


def non_finite_weights(run_dir: Path, step: int, bad: int) -> UserError:
    return UserError(
        f"the weights became non-finite ({bad} tensor(s)) in the update of step {step}; nothing was saved; "
        f"{last_good(run_dir)}; train again with a lower optim.lr or optim.grad_clip (a new train.out_dir, "
        f"or --init-from that checkpoint)"
    )


def diverged(run_dir: Path, loss: float, step: int, dtype: str, what: str = "loss") -> UserError:
    """A non-finite training (or validation) loss: never logged or saved; fp32 is suggested to bf16 runs."""
    fix = "lower optim.lr or use train.dtype=fp32" if dtype != "fp32" else "lower optim.lr or optim.grad_clip"
    return UserError(f"the {what} became {loss} at step {step}; {last_good(run_dir)}; {fix}")
