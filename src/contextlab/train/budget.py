"""How much a run trains: the rows of a step, its budget in steps, the wall-clock pace, early stopping.

* ``check_train``: the budgets, shapes and intervals of the [train] section, checked before a run
  directory exists (a negative budget or context is one line naming the key, never a run).
* ``resolve_shape``: the run config with ``train.context = 0`` taken from the data and
  ``rows_per_step`` / ``val_rows`` turned into tokens (``tokens_per_step`` / ``val_tokens`` may
  then be 0, unset), so everything after reads one context.
* ``batch_shape``: train.tokens_per_step as rows of train.context tokens, split over processes and
  micro-batches (the tokens of a step stay constant when the context changes).
* ``budget_steps``: train.max_steps, max_tokens or max_flops as a number of optimizer steps
  (exactly one budget; 0 for a wall-clock budget, whose length is not known yet).
* ``StepBudget``: the run's total steps, asked before every step. A wall-clock budget
  (train.max_minutes) becomes a fixed number of steps once the pace is known: steps 3..10 set
  it (the first ones carry warm-up and torch.compile), the minutes left fix the total, and
  every process agrees on it. The total is saved in checkpoints, so a resumed run keeps it.
* ``EarlyStopping``: the best validation loss, its step and the validations since; it says
  when ``patience`` validations in a row brought no improvement.

Trade-off: a wall-clock run trains a step count fixed early, not until the clock runs out,
so its learning-rate schedule can decay to the end and a resumed run repeats its numbers.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from contextlab.data.training import data_context
from contextlab.errors import UserError
from contextlab.train.config import RunConfig, TrainSection

WALL_CLOCK_PROBE = 10  # a wall-clock budget fixes its step count here (or 4 steps after its pace starts)


# keys that must be > 0, and keys that must be >= 0 (0 = off / automatic)
POSITIVE = ("tokens_per_step", "log_every", "val_tokens")
NOT_NEGATIVE = [
    "context",
    "rows_per_step",
    "val_rows",
    "max_steps",
    "max_tokens",
    "max_flops",
    "max_minutes",
    "micro_batch_rows",
    "val_every",
    "ckpt_every",
    "keep_last",
    "patience",
    "threads",
    "peak_flops",
]


def check_train(t: TrainSection) -> None:
    """Refuse budgets, shapes and intervals that cannot describe a run, naming the key (that exactly one
    budget is set is checked by ``budget_steps``, once the data is known to exist)."""
    alternative = {tokens: rows for rows, tokens in t.ALTERNATIVES}
    for key in POSITIVE:
        value = getattr(t, key)
        if value == 0 and key in alternative:  # 0 = unset: the size is given in rows
            if getattr(t, alternative[key]) > 0:
                continue
            raise UserError(f"train.{key} is 0 (unset) and so is train.{alternative[key]}; set one of them")
        if value <= 0:
            raise UserError(f"train.{key} is {value}; it must be a positive number")
    for key in NOT_NEGATIVE:
        value = getattr(t, key)
        if value < 0:
            what = "a budget" if key.startswith("max_") else "it"
            old = " (train.seq_len is its old name)" if key == "context" else ""
            raise UserError(f"train.{key} is {value}{old}; {what} must be positive (0 = {_zero(key)})")


def _zero(key: str) -> str:
    return {
        "context": "the data's context",
        "rows_per_step": "train.tokens_per_step",
        "val_rows": "train.val_tokens",
        "micro_batch_rows": "all of a process's rows",
        "val_every": "validate only at the end",
        "ckpt_every": "checkpoint only at the end",
        "keep_last": "keep every checkpoint",
        "patience": "no early stopping",
        "threads": "torch's default",
        "peak_flops": "the cached peak",
    }.get(key, "not this budget")


def resolve_shape(cfg: RunConfig) -> RunConfig:
    """``cfg`` with train.context fixed (0 = the data's) and rows_per_step / val_rows as tokens."""
    t = cfg.train
    defaults = TrainSection()
    for rows, tokens in t.ALTERNATIVES:
        if getattr(t, rows) and getattr(t, tokens) not in (0, getattr(defaults, tokens)):
            raise UserError(f"set train.{rows} or train.{tokens}, not both")
    context = t.context or data_context(cfg.data)
    shape = {
        "context": context,
        "tokens_per_step": t.rows_per_step * context if t.rows_per_step else t.tokens_per_step,
        "val_tokens": t.val_rows * context if t.val_rows else t.val_tokens,
        "rows_per_step": 0,
        "val_rows": 0,
    }
    return dataclasses.replace(cfg, train=dataclasses.replace(t, **shape))


def budget_steps(t: TrainSection, flops_per_token: float) -> int:
    """Exactly one of train.max_steps, max_tokens and max_flops as optimizer steps; 0 for max_minutes."""
    if len([b for b in (t.max_steps, t.max_tokens, t.max_flops, t.max_minutes) if b]) != 1:
        raise UserError(
            "set exactly one budget: train.max_steps, train.max_tokens, train.max_flops or train.max_minutes"
        )
    if t.max_steps:
        return int(t.max_steps)
    if t.max_tokens:
        return max(1, int(t.max_tokens // t.tokens_per_step))
    if t.max_flops:
        return max(1, int(t.max_flops // (flops_per_token * t.tokens_per_step)))
    return 0


REPEATS_NOTED = 2.0  # passes over the training rows from which a run says how often it repeats them


def epochs_note(total: int, rows: int, n_rows: int, context: int) -> str | None:
    """One line when a run of ``total`` steps of ``rows`` rows reads its ``n_rows`` training rows at
    least twice: a small corpus under a large budget repeats, and its training loss then falls below
    what held-out text gives. The ragged end of an epoch (fewer rows than a step) is not read."""
    per_epoch = max(rows, n_rows // rows * rows)
    epochs = total * rows / per_epoch
    if epochs < REPEATS_NOTED:
        return None
    return (
        f"note: {total:,} steps of {rows} rows read the {per_epoch:,} training rows ({per_epoch * context:,} "
        f"tokens) {epochs:,.1f} times; repeated text is partly memorised, so the training loss parts from "
        "the validation loss as the passes add up (more data, or a smaller budget, repeats less)"
    )


def warmup_note(warmup_steps: int, total: int, lr: float) -> str | None:
    """One line when the warm-up is not shorter than the run: the learning rate then rises the whole
    run, never reaches ``lr`` (or only at the last step) and never decays, which a step budget
    smaller than the default warm-up (100 steps) gives without a word otherwise."""
    if warmup_steps < total:
        return None
    return (
        f"note: optim.warmup_steps = {warmup_steps} is not below this run's {total} steps, so the "
        f"learning rate rises the whole run (to {total / warmup_steps:.0%} of optim.lr = {lr:g}) and "
        f"never decays; a warm-up of a tenth of the run is optim.warmup_steps = {max(1, total // 10)}"
    )


def batch_shape(t: TrainSection, world: int) -> tuple[int, int, int]:
    """(rows per step, rows per micro-batch, micro-batches per process and step) of the [train] section."""
    rows = max(1, t.tokens_per_step // t.context)
    if rows * t.context != t.tokens_per_step:
        near = max(1, round(t.tokens_per_step / t.context))
        raise UserError(
            f"train.tokens_per_step ({t.tokens_per_step}) must be a multiple of train.context "
            f"({t.context}) so every step sees the same number of tokens; set one that is, or give "
            f"rows of the context per step instead: --set train.rows_per_step={near} is the nearest "
            f"({near * t.context:,} tokens a step)"
        )
    micro = t.micro_batch_rows or rows // world
    per_rank = rows // max(1, world)
    if rows % world:
        fit = max(world, rows // world * world)
        raise UserError(
            f"rows per step ({rows}) must split evenly over the {world} processes; set "
            f"train.rows_per_step to a multiple of {world} (e.g. --set train.rows_per_step={fit})"
        )
    if per_rank % micro:
        raise UserError(
            f"each process's {per_rank} rows per step must split into micro-batches of "
            f"train.micro_batch_rows={micro}; set train.micro_batch_rows to a divisor of {per_rank}"
        )
    return rows, micro, per_rank // micro


class StepBudget:
    """The total steps of a run: ``total`` if known, else fixed from the pace within ``minutes``.

    ``elapsed`` is the training time before this process (a resumed run); ``agree`` turns this
    process's total into the one all processes use; ``clock`` is a monotonic clock in seconds.
    """

    def __init__(
        self,
        total: int | None,
        minutes: float,
        elapsed: float = 0.0,
        *,
        agree: Callable[[int], int] = lambda n: n,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.total, self.minutes, self.agree, self.clock = total or None, minutes, agree, clock
        self.start = clock() - elapsed
        self._pace: tuple[float, int] | None = None  # (time, step) where the pace timing starts

    def total_at(self, step: int) -> int | None:
        """The total steps (None while a wall-clock pace is being timed); call it before step ``step + 1``."""
        if self.total:
            return self.total
        now = self.clock()
        if self._pace is None:
            if step >= 2:
                self._pace = (now, step)
            return None
        t0, s0 = self._pace
        if step >= max(WALL_CLOCK_PROBE, s0 + 4):
            per_step = (now - t0) / (step - s0)
            left = self.minutes * 60 - (now - self.start)
            self.total = self.agree(step + 1 + max(0, int(left / per_step)))
        return self.total

    def done(self, step: int) -> bool:
        """True when ``step`` steps complete the run (known only once the total is)."""
        return bool(self.total) and step >= self.total

    def elapsed(self) -> float:
        """Training seconds so far, those before a resume included."""
        return self.clock() - self.start


class EarlyStopping:
    """Tracks the best validation loss; ``stop`` once ``patience`` validations in a row did not improve it
    (patience 0: never)."""

    def __init__(self, patience: int, val_every: int):
        if patience and not val_every:
            raise UserError("train.patience needs validations to watch: set train.val_every (e.g. 100)")
        self.patience = patience
        self.best_val_loss: float | None = None
        self.best_step: int | None = None
        self.since_best = 0

    def update(self, val_loss: float, step: int) -> None:
        if self.best_val_loss is None or val_loss < self.best_val_loss:
            self.best_val_loss, self.best_step, self.since_best = val_loss, step, 0
        else:
            self.since_best += 1

    @property
    def stop(self) -> bool:
        return bool(self.patience) and self.since_best >= self.patience

    def keep(self, step: int) -> bool:
        """True when early stopping wants ``step`` checkpointed: it stops the run or set the best loss."""
        return self.stop or (bool(self.patience) and self.best_step == step)

    def pinned(self) -> tuple[int, ...]:
        """Checkpoint steps to keep beyond train.keep_last: the best one, when early stopping is on."""
        return (self.best_step,) if self.patience and self.best_step else ()

    def message(self, step: int, weights: object) -> str:
        """What the console says when the run stops early at ``step``; ``weights``: the best checkpoint."""
        return (
            f"early stop at step {step}: no better validation loss in {self.patience} validations since "
            f"step {self.best_step} ({self.best_val_loss:.4f}); its weights: {weights}"
        )

    def state_dict(self) -> dict:
        return {
            "best_val_loss": self.best_val_loss,
            "best_step": self.best_step,
            "since_best": self.since_best,
        }

    def load_state_dict(self, state: dict) -> None:
        self.best_val_loss, self.best_step = state.get("best_val_loss"), state.get("best_step")
        self.since_best = state.get("since_best", 0)
