"""Position-weighted multitask sparse parity: synthetic data whose Bayes risk is known exactly.

The task of the intrinsic-entropy seed (§4.2, Appendix C.4). A sample has ``n_bits``
uniform random context bits, numbered 1 (nearest to the answer) to L (farthest), and
one of ``n_tasks`` tasks. Task t is the XOR of two fixed bits ``near[t] < far[t]``; the
far bits are spread evenly over ``min_far_bit..L`` (2 tasks per far bit with the seed's
L=60, T=100) and the near bit is drawn uniformly below the far one. Tasks that need
nearer bits are more frequent: ``freq(t) ∝ far[t] ** -decay`` (decay 1.2 reproduces the
minimum-loss column of the seed's Table 1 within 0.0011 nats).

Exact Bayes risk with l visible bits. Bits are independent and uniform, so one bit of a
pair says nothing about the XOR: the Bayes-optimal predictor is certain when both bits
of the active task are visible (``far <= l``) and says 1/2 otherwise. Hence

    R(l) = log 2 * sum(freq[t] for t with far[t] > l) / sum(freq)

with no sampling at all; ``bayes_probability`` is that predictor, for Monte-Carlo checks.

As tokens (a byte-tokenizer store, so every contextlab tool reads it): one document per
sample, ``[bit_L, ..., bit_1, TASK, answer]`` with bits as ``'0'``/``'1'``, hidden bits as
``'?'`` and task t as byte 64 + t (so T <= 192). The farthest bit comes first, so "the
model sees l bits" means the l bits right before the task token; the rest are ``'?'``
(the seed's masking, which keeps every sequence at L + 1 inputs: a model trained this
way is evaluated the same way). ``mask_fraction`` of the samples have their farthest
bits masked at random (visible bits uniform in ``min_visible..L``), as in the seed's
training set, so the model learns what a masked bit means and sees far tasks fully.

Two training aids, both off by default (validation and evaluation stores keep them off).
``queries`` K > 1 asks K tasks (drawn independently, by frequency or, with ``query_tasks``
uniform, equally often) of the same bits: a document is
``[bits, TASK_1..TASK_K, answer_1..answer_K]``, trained with the objective ``queries``, in
which every task token sits at position L and sees only the bits and itself, so each
answer is exactly the single-query sample ``[bits, TASK_k]``; the bits cost L tokens once
instead of K times. ``bias_fraction`` draws that fraction of the samples' bits with
P(1) in ``bias_min..bias_max``: with uniform bits a single bit says nothing about an XOR,
so gradient descent starts on a plateau at log 2 (the sparse-parity saddle); with biased
bits the answer agrees with each of its bits more often than not, a first-order signal
that leads the model to the two bits of every task (the parity curriculum of Abbe et al.,
2023). The XOR of visible bits is unchanged by the bias; only a hidden bit's answer is no
longer 1/2, so the stated Bayes risk is that of unbiased bits.

Trade-off: one byte token per bit wastes most of a 257-id vocabulary and makes each
sample L + 2 tokens long where a bit-vector model would need one input; in return the
data is an ordinary token store, trained by the ordinary trainer and read by every
evaluation. The task definition (``task_seed``) is separate from the sample seed, so a
training and a validation store share the tasks but not the samples.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np

from contextlab.config import opt
from contextlab.errors import UserError

BIT0, BIT1, MASK, TASK_BASE = 48, 49, 63, 64  # byte ids of '0', '1', '?', '@' (task 0)
MAX_TASKS = 256 - TASK_BASE
SOURCE_KIND = "synthetic-parity"

QueryTasks = Literal["frequency", "uniform"]


@dataclass
class ParityConfig:
    n_bits: int = opt(60, "context bits L (bit 1 is nearest to the answer, bit L farthest)")
    n_tasks: int = opt(100, "tasks T, each the XOR of two bits (at most 192)")
    min_far_bit: int = opt(11, "the farther bit of the tasks is spread evenly over min_far_bit..L")
    decay: float = opt(1.2, "task frequency ∝ far_bit^-decay (nearer tasks are more frequent)")
    task_seed: int = opt(
        0, "seed of the task definitions (the near bits); share it between train and validation"
    )
    n_samples: int = opt(100_000, "samples (documents) to write")
    seed: int = opt(0, "seed of the samples")
    mask_fraction: float = opt(
        0.0, "fraction of samples whose farthest bits are masked with '?' (the seed trains with 0.5)"
    )
    min_visible: int = opt(10, "a masked sample keeps between min_visible and L visible bits (uniform)")
    queries: int = opt(
        1,
        "tasks asked per sample: 1 writes [bits, TASK, answer] (every evaluation reads it); K > 1 "
        "writes [bits, TASK_1..TASK_K, answer_1..answer_K] for objective 'queries' (K answers per "
        "context for L + 2K tokens; a training format)",
    )
    bias_fraction: float = opt(
        0.0,
        "fraction of samples whose bits are biased towards 0 (P(bit=1) uniform in "
        "bias_min..bias_max): a training curriculum that gives each XOR a first-order "
        "signal; the Bayes risk stated for the store is that of unbiased bits",
    )
    bias_min: float = opt(0.05, "lowest P(bit = 1) of a biased sample")
    bias_max: float = opt(0.3, "highest P(bit = 1) of a biased sample")
    query_tasks: QueryTasks = opt(
        "frequency",
        "how the K tasks of a sample are drawn (queries K > 1): frequency (the task "
        "distribution) or uniform (each task equally often, so the rare far tasks get "
        "as many answers as the near ones; each answer's Bayes predictor is unchanged)",
    )

    def __post_init__(self):
        L, T = self.n_bits, self.n_tasks
        if not 2 <= self.min_far_bit <= L:
            raise ValueError(f"min_far_bit={self.min_far_bit} must lie in 2..n_bits={L}")
        if not 1 <= T <= MAX_TASKS:
            raise ValueError(f"n_tasks={T} must lie in 1..{MAX_TASKS} (one byte id per task)")
        if self.n_samples < 1:
            raise ValueError(f"n_samples={self.n_samples} must be >= 1")
        if not 0.0 <= self.mask_fraction <= 1.0:
            raise ValueError(f"mask_fraction={self.mask_fraction} must lie in [0, 1]")
        if not 0 <= self.min_visible <= L:
            raise ValueError(f"min_visible={self.min_visible} must lie in 0..n_bits={L}")
        if self.queries < 1:
            raise ValueError(f"queries={self.queries} must be >= 1")
        if not 0.0 <= self.bias_fraction <= 1.0:
            raise ValueError(f"bias_fraction={self.bias_fraction} must lie in [0, 1]")
        if not 0.0 < self.bias_min <= self.bias_max < 1.0:
            raise ValueError(
                f"bias_min={self.bias_min} and bias_max={self.bias_max} must satisfy "
                "0 < bias_min <= bias_max < 1"
            )
        if self.query_tasks not in get_args(QueryTasks):  # also built in code, not only by the loader
            raise ValueError(f"query_tasks={self.query_tasks!r} must be 'frequency' or 'uniform'")
        if self.query_tasks == "uniform" and self.queries == 1:
            raise ValueError(
                "query_tasks='uniform' is a training format: use it with queries > 1 (single-task "
                "stores draw tasks by frequency, as every evaluation expects)"
            )


@dataclass
class ParityTasks:
    """The task definitions: bit numbers are 1-based (1 = nearest to the answer)."""

    near: np.ndarray  # (T,) int64
    far: np.ndarray  # (T,) int64, far > near
    freq: np.ndarray  # (T,) float64, sums to 1

    def as_dict(self) -> dict:
        return {"near": self.near.tolist(), "far": self.far.tolist(), "freq": self.freq.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> ParityTasks:
        return cls(
            np.asarray(d["near"], np.int64), np.asarray(d["far"], np.int64), np.asarray(d["freq"], float)
        )


@dataclass
class ParitySamples:
    bits: np.ndarray  # (N, L) uint8; column j holds bit j + 1 (nearest first)
    task: np.ndarray  # (N,) int64, or (N, K) with queries K > 1
    answer: np.ndarray  # like task, uint8: bits[near - 1] XOR bits[far - 1]
    visible: np.ndarray  # (N,) int64: bits 1..visible are shown, the rest are masked


def make_tasks(cfg: ParityConfig) -> ParityTasks:
    """Far bits evenly over min_far_bit..L (round robin when T is not a multiple), near bits uniform below."""
    span = np.arange(cfg.min_far_bit, cfg.n_bits + 1)  # (F,)
    far = np.sort(span[np.arange(cfg.n_tasks) * len(span) // cfg.n_tasks])  # (T,) even spread, nearest first
    rng = np.random.default_rng([cfg.task_seed, 7])
    near = 1 + (rng.random(cfg.n_tasks) * (far - 1)).astype(np.int64)  # uniform in 1..far-1
    weight = far.astype(float) ** -cfg.decay
    return ParityTasks(near.astype(np.int64), far.astype(np.int64), weight / weight.sum())


def bayes_risk(tasks: ParityTasks, visible: int) -> float:
    """Exact minimum cross-entropy (nats) of the answer when bits 1..visible are seen."""
    return float(math.log(2) * tasks.freq[tasks.far > visible].sum())


def bayes_risk_curve(tasks: ParityTasks, contexts: list[int]) -> list[float]:
    return [bayes_risk(tasks, int(l)) for l in contexts]


def sample(cfg: ParityConfig, tasks: ParityTasks, n: int, rng: np.random.Generator) -> ParitySamples:
    """n samples: tasks by frequency (K of them each with queries K > 1, drawn independently by frequency or
    uniformly, see query_tasks), uniform bits
    (a bias_fraction of the samples biased towards 0), the XOR answers, and the visible count (masking)."""
    L = cfg.n_bits
    shape = (n,) if cfg.queries == 1 else (n, cfg.queries)
    p = tasks.freq if cfg.query_tasks == "frequency" else None  # None: uniform
    task = rng.choice(len(tasks.freq), size=shape, p=p)  # (n,) or (n, K)
    bits = rng.integers(0, 2, size=(n, L), dtype=np.uint8)  # (n, L)
    if cfg.bias_fraction > 0:
        biased = np.flatnonzero(rng.random(n) < cfg.bias_fraction)
        p_one = rng.uniform(cfg.bias_min, cfg.bias_max, size=(len(biased), 1))
        bits[biased] = (rng.random((len(biased), L)) < p_one).astype(np.uint8)
    rows = np.arange(n) if cfg.queries == 1 else np.arange(n)[:, None]
    answer = bits[rows, tasks.near[task] - 1] ^ bits[rows, tasks.far[task] - 1]  # like task
    visible = np.full(n, L, dtype=np.int64)
    masked = rng.random(n) < cfg.mask_fraction
    visible[masked] = rng.integers(cfg.min_visible, L + 1, size=int(masked.sum()))
    return ParitySamples(bits, task.astype(np.int64), answer.astype(np.uint8), visible)


def bayes_probability(tasks: ParityTasks, s: ParitySamples, visible: int | None = None) -> np.ndarray:
    """p(answer = 1) of the Bayes-optimal predictor seeing bits 1..min(visible, s.visible), shaped like s.task
    (unbiased bits: a biased sample's hidden answer is not 1/2)."""
    seen = s.visible if visible is None else np.minimum(s.visible, visible)
    rows = np.arange(len(s.task))
    if s.task.ndim == 2:
        rows, seen = rows[:, None], np.asarray(seen)[:, None]
    xor = s.bits[rows, tasks.near[s.task] - 1] ^ s.bits[rows, tasks.far[s.task] - 1]
    known = tasks.far[s.task] <= seen  # near < far, so far visible means both are
    return np.where(known, xor.astype(float), 0.5)


def to_tokens(s: ParitySamples, visible: int | None = None) -> np.ndarray:
    """(N, L + 2) token rows [bit_L .. bit_1, TASK, answer] (with K queries (N, L + 2K) rows [bits, TASK_1..K,
    answer_1..K]); bits beyond min(visible, s.visible) become '?'."""
    N, L = s.bits.shape
    task, answer = s.task.reshape(N, -1), s.answer.reshape(N, -1)  # (N, K)
    K = task.shape[1]
    seen = s.visible if visible is None else np.minimum(s.visible, visible)
    ids = np.where(s.bits == 1, BIT1, BIT0).astype(np.int64)  # (N, L), nearest first
    ids[np.arange(1, L + 1)[None, :] > seen[:, None]] = MASK
    out = np.empty((N, L + 2 * K), dtype=np.int64)
    out[:, :L] = ids[:, ::-1]  # farthest bit first
    out[:, L : L + K] = TASK_BASE + task
    out[:, L + K :] = np.where(answer == 1, BIT1, BIT0)
    return out


def mask_tokens(rows: np.ndarray, n_bits: int, visible: int) -> np.ndarray:
    """Token rows (N, >= n_bits) of the layout above with all but the nearest ``visible`` bits set to '?'."""
    out = np.array(rows, dtype=np.int64, copy=True)
    out[:, : max(n_bits - visible, 0)] = MASK
    return out


# ---------------------------------------------------------------------------- stores


def write_parity_store(
    cfg: ParityConfig,
    out: str | os.PathLike,
    *,
    overwrite: bool = False,
    chunk: int = 50_000,
    progress: bool = True,
) -> Path:
    """Write ``cfg.n_samples`` samples as a byte-tokenizer token store at ``out``, reproducible from seeds."""
    from contextlab.data.synthetic_store import write_synthetic_store
    from contextlab.data.tokenizers import ByteTokenizer

    tasks = make_tasks(cfg)
    tok = ByteTokenizer()
    meta = _parity_store_meta(cfg, tasks, tok)
    return write_synthetic_store(
        out,
        tok,
        meta,
        _parity_batches(cfg, tasks, chunk),
        side_files={"parity.json": meta["parity"]},
        overwrite=overwrite,
        total=cfg.n_samples,
        desc="parity",
        progress=progress,
    )


def _parity_batches(cfg: ParityConfig, tasks: ParityTasks, chunk: int):
    """The samples drawn ``chunk`` at a time: (token rows, one document meta each)."""
    rng = np.random.default_rng([cfg.seed, 1])
    done = 0
    while done < cfg.n_samples:
        n = min(chunk, cfg.n_samples - done)
        s = sample(cfg, tasks, n, rng)
        metas = []
        for i in range(n):
            meta = {"id": done + i, "visible": int(s.visible[i])}
            if cfg.queries == 1:  # K > 1: the tasks are in the row itself (tokens L..L+K-1)
                meta["task"] = int(s.task[i])
            metas.append(meta)
        yield to_tokens(s), metas  # (n, L + 2K)
        done += n


def _parity_store_meta(cfg: ParityConfig, tasks: ParityTasks, tok) -> dict:
    """meta.json of a parity store: the tokenizer, the config, the tasks and the exact Bayes risk."""
    return {
        "tokenizer": tok.spec(),
        "dtype": "uint16",
        "source": {"kind": SOURCE_KIND, "config": dataclasses.asdict(cfg)},
        "parity": {
            "config": dataclasses.asdict(cfg),
            "tasks": tasks.as_dict(),
            "bayes_risk": bayes_risk_curve(tasks, list(range(cfg.n_bits + 1))),  # index = visible bits
            "layout": {"bit0": BIT0, "bit1": BIT1, "mask": MASK, "task_base": TASK_BASE},
        },
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def parity_of_store(store) -> tuple[ParityConfig, ParityTasks] | None:
    """(config, tasks) when ``store`` (a TokenStore) holds parity data, else None."""
    info = store.meta.get("parity")
    if not info:
        return None
    try:
        return ParityConfig(**info["config"]), ParityTasks.from_dict(info["tasks"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(
            f"store {store.path} has a malformed parity description ({exc}); write it again with "
            "`contextlab data synthetic parity`"
        ) from None
