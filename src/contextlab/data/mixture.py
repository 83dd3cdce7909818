"""Data mixtures: training rows drawn from several packed stores in fixed proportions.

The SPLICE recipe continues pretraining on 50% standard data and 50% long-context data
prepared with SPLICE (or example packing, the baseline). ``MixtureLoader`` draws every
global batch from the sources' own loaders (each a ``TokenLoader`` over one packed store,
with its own seeded order, epochs and cursor) and decides which source feeds each row with
a deterministic largest-deficit rule: row n goes to the source i with the largest
w_i (n + 1) - c_i, where c_i counts the rows source i gave so far (ties: the first source).

Trade-off: the proportions are exact rather than sampled. After any n rows every source
has given round-about w_i n rows, off by less than one (a sampled mixture drifts by
~sqrt(n)), and a step of R rows with integral w_i R holds exactly w_i R rows of source i,
so two runs that differ only in one source (EP vs SPLICE) see the same shares at every
step. The price is a fixed interleaving pattern of the sources inside a batch, which is
irrelevant to the loss (the rows of a step are averaged) and balanced across ranks.

State: the row count, the per-source counts and each source loader's (epoch, position),
saved in checkpoints; restoring it resumes the exact batch sequence. Every rank walks
through all rows of a step (advancing all source cursors identically) and keeps its slice.
"""

from __future__ import annotations

import numpy as np

from contextlab.data.loader import Batch, TokenLoader
from contextlab.errors import UserError


class MixtureLoader:
    """Global batches of ``rows_per_step`` rows from ``sources`` in proportion to ``weights``."""

    def __init__(
        self,
        sources: list[TokenLoader],
        weights: list[float],
        rows_per_step: int,
        *,
        rank: int = 0,
        world_size: int = 1,
    ):
        if not sources or len(sources) != len(weights):
            raise UserError("a data mixture needs one weight per source")
        w = np.asarray(weights, dtype=np.float64)
        if not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise UserError(f"data.mixture weights must be positive, got {list(weights)}")
        if len({s.row_len for s in sources}) != 1:
            raise UserError(
                "the packed stores of data.mixture were packed for different contexts; pack them all with "
                "--context train.context"
            )
        if any(s.rows != 1 or s.world != 1 for s in sources):
            raise ValueError("mixture sources are single-row, single-process loaders")
        if rows_per_step % world_size:
            raise UserError(
                f"rows per step ({rows_per_step}) must be divisible by the number of processes ({world_size})"
            )
        self.sources, self.weights = sources, w / w.sum()
        self.rows, self.rank, self.world = int(rows_per_step), rank, world_size
        self.row_len = sources[0].row_len
        self.context = sources[0].context
        self.n_rows = sum(s.n_rows for s in sources)
        self.n = 0  # global rows handed out so far
        self.counts = np.zeros(len(sources), dtype=np.int64)  # rows given by each source

    # ------------------------------------------------------------------ assignment
    def assign(self, count: int) -> np.ndarray:
        """Source ids of the next ``count`` global rows; advances the row counts."""
        out = np.empty(count, dtype=np.int64)
        for j in range(count):
            deficit = self.weights * (self.n + 1) - self.counts  # (n_sources,)
            i = int(np.argmax(deficit))  # the first maximum on ties
            out[j] = i
            self.counts[i] += 1
            self.n += 1
        return out

    def next_batch(self) -> Batch:
        """This rank's share of the next global batch; advances every source it draws from."""
        per_rank = self.rows // self.world
        lo = self.rank * per_rank
        tokens = np.empty((per_rank, self.row_len), dtype=np.int64)
        doc_ids = np.zeros((per_rank, self.row_len), dtype=np.int32)
        for j, src in enumerate(self.assign(self.rows)):
            b = self.sources[src].next_batch()  # every rank advances every cursor the same way
            if lo <= j < lo + per_rank:
                tokens[j - lo], doc_ids[j - lo] = b.tokens[0], b.doc_ids[0]
        return Batch(tokens, doc_ids)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {
            "mixture": True,
            "n": self.n,
            "counts": self.counts.tolist(),
            "weights": self.weights.tolist(),
            "rows": self.rows,
            "sources": [s.state_dict() for s in self.sources],
        }

    def load_state_dict(self, state: dict) -> None:
        if not state.get("mixture") or len(state["sources"]) != len(self.sources):
            raise UserError(
                "the checkpoint's data loader is not this data mixture; resume with the same data config"
            )
        if not np.allclose(state["weights"], self.weights) or state["rows"] != self.rows:
            raise UserError(
                "the checkpoint's data mixture has other weights or rows per step; resume with the same "
                "data config"
            )
        for src, s in zip(self.sources, state["sources"]):
            src.load_state_dict(s)
        self.n, self.counts = int(state["n"]), np.asarray(state["counts"], dtype=np.int64)


def exact_shares(n: int, weights: list[float]) -> np.ndarray:
    """How many of n rows each source gives under the mixture's rule (sums to n, each within 1 of w_i n)."""
    w = np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    counts = np.zeros(len(w), dtype=np.int64)
    for k in range(n):
        counts[int(np.argmax(w * (k + 1) - counts))] += 1
    return counts
