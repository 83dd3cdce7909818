"""Deterministic, resumable, rank-sliced training batches from a token store.

A loader turns documents into fixed-length rows of ``seq_len + 1`` tokens (inputs plus the
shifted targets) and hands out global batches of ``rows_per_step`` rows; rank r of a
world of w takes rows r*b .. (r+1)*b - 1 of every global batch (b = rows / w), so a run on
w processes sees exactly the rows a single process sees, and losses match.

Two ways to make rows (``mode``):

* ``packed``: documents are laid end to end in a seeded order, separated by the
  end-of-text token, and the stream is cut into rows (example packing). Nothing is copied:
  a row is located by binary search over the cumulative document lengths, so building
  the loader costs O(n_docs) memory, whatever the corpus size.
* ``long_docs``: one document per row, only documents of at least ``seq_len + 1`` tokens,
  each cut to that length (the LongCrawl64 protocol: every row has real long-range
  structure, which context-size comparisons need).
* ``packed_store``: the rows are the sequences of a packed store made by ``contextlab data
  pack`` (example packing, SPLICE, ...) with ``seq_len + 1`` tokens each; ``view`` is the
  ``PackedStore`` and ``sequences`` the ids of the sequences this loader may use (a
  train or validation share from ``packed_split``). Shorter sequences (the last of a
  shard) are never used, so every row is full.

Row order: every epoch visits all rows once in a permutation seeded by ``(seed, epoch)``.
The whole state is two integers (epoch, position), saved in every checkpoint; restoring
them gives the same batches as an uninterrupted run. Per-position document ids are
returned too, for block-diagonal attention masks when packed documents must not see each
other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contextlab.data.packing.packed_store import PackedStore
from contextlab.data.views import DocView
from contextlab.errors import UserError

MODES = ("packed", "long_docs", "packed_store")


@dataclass
class LoaderState:
    epoch: int = 0
    position: int = 0  # rows of the current epoch already handed out (global)


@dataclass
class Batch:
    tokens: np.ndarray  # (b, seq_len + 1) int64: inputs are [:, :-1], targets [:, 1:]
    doc_ids: np.ndarray  # (b, seq_len + 1) int32: which document each position comes from (row-local ids)


class TokenLoader:
    """Rows of ``seq_len + 1`` tokens from ``view``; see the module docstring."""

    def __init__(
        self,
        view: DocView | PackedStore,
        seq_len: int,
        rows_per_step: int,
        *,
        mode: str = "packed",
        separator: int | None = None,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        order_seed: int | None = None,
        sequences: np.ndarray | None = None,
    ):
        if mode not in MODES:
            raise UserError(f"unknown loader mode {mode!r}; use one of {', '.join(MODES)}")
        if (mode == "packed_store") != isinstance(view, PackedStore):
            raise ValueError("mode packed_store takes a PackedStore, the other modes a DocView")
        if rows_per_step % world_size:
            raise UserError(
                f"rows per step ({rows_per_step}) must be divisible by the number of processes "
                f"({world_size}); change train.tokens_per_step or the process count"
            )
        self.view, self.seq_len, self.rows = view, int(seq_len), int(rows_per_step)
        self.mode, self.sep, self.seed = mode, separator, int(seed)
        self.rank, self.world = rank, world_size
        self.state = LoaderState()
        self.row_len = self.seq_len + 1
        if mode == "packed":  # doc_order holds positions in the view
            self.doc_order = np.random.default_rng(
                self.seed if order_seed is None else order_seed
            ).permutation(len(view))
            self.doc_lens = view.lengths()[self.doc_order] + (1 if separator is not None else 0)
            self.starts = np.concatenate([[0], np.cumsum(self.doc_lens)])
            self.n_rows = int((self.starts[-1] - 1) // self.seq_len)  # consecutive rows share one token
        elif mode == "long_docs":
            self.doc_order = np.flatnonzero(view.lengths() >= self.row_len)
            self.n_rows = len(self.doc_order)
        else:  # doc_order holds sequence ids of the packed store
            if view.seq_len != self.row_len:
                raise UserError(
                    f"{view.path} was packed with --seq-len {view.seq_len} but training rows need "
                    f"{self.row_len} (train.seq_len + 1 for the shifted targets); pack again with "
                    f"--seq-len {self.row_len}"
                )
            ids = np.arange(len(view)) if sequences is None else np.asarray(sequences, dtype=np.int64)
            self.doc_order = ids[view.sequence_lengths()[ids] == self.row_len]
            self.n_rows = len(self.doc_order)
        if self.n_rows < self.rows:
            need = {
                "long_docs": "documents of at least %d tokens" % self.row_len,
                "packed_store": "packed sequences",
            }.get(mode, "tokens")
            raise UserError(
                f"the data gives {max(self.n_rows, 0)} rows of {self.row_len} tokens but one step needs "
                f"{self.rows}; use more data ({need}) or a smaller train.tokens_per_step / seq_len"
            )

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {
            "epoch": self.state.epoch,
            "position": self.state.position,
            "n_rows": self.n_rows,
            "seq_len": self.seq_len,
            "rows": self.rows,
            "mode": self.mode,
            "seed": self.seed,
        }

    def load_state_dict(self, state: dict) -> None:
        for key in ("n_rows", "seq_len", "rows", "mode", "seed"):
            if key in state and state[key] != getattr(self, key if key != "rows" else "rows"):
                raise UserError(
                    f"the checkpoint's data loader has {key}={state[key]} but this run has "
                    f"{getattr(self, key)}; resume with the same data and config"
                )
        self.state = LoaderState(int(state["epoch"]), int(state["position"]))

    # ------------------------------------------------------------------ batches
    def _epoch_perm(self, epoch: int) -> np.ndarray:
        cached = getattr(self, "_perm", None)
        if cached is None or cached[0] != epoch:  # one permutation per epoch, not per batch
            self._perm = cached = (epoch, np.random.default_rng([self.seed, epoch]).permutation(self.n_rows))
        return cached[1]

    def next_batch(self) -> Batch:
        """This rank's share of the next global batch; advances the state."""
        if self.state.position + self.rows > self.n_rows:  # drop the ragged end of an epoch
            self.state = LoaderState(self.state.epoch + 1, 0)
        perm = self._epoch_perm(self.state.epoch)
        per_rank = self.rows // self.world
        lo = self.state.position + self.rank * per_rank
        rows = perm[lo : lo + per_rank]
        self.state.position += self.rows
        tokens = np.empty((per_rank, self.row_len), dtype=np.int64)
        doc_ids = np.zeros((per_rank, self.row_len), dtype=np.int32)
        for i, r in enumerate(rows):
            self._fill_row(int(r), tokens[i], doc_ids[i])
        return Batch(tokens, doc_ids)

    def row(self, r: int) -> np.ndarray:
        tokens = np.empty(self.row_len, dtype=np.int64)
        self._fill_row(r, tokens, np.zeros(self.row_len, dtype=np.int32))
        return tokens

    def _fill_row(self, r: int, out: np.ndarray, doc_ids: np.ndarray) -> None:
        if self.mode == "long_docs":
            out[:] = self.view.doc(int(self.doc_order[r]))[: self.row_len]
            return
        if self.mode == "packed_store":
            tokens, docs = self.view.sequence_tokens(int(self.doc_order[r]))
            out[:] = tokens
            doc_ids[0] = 0
            np.cumsum(docs[1:] != docs[:-1], out=doc_ids[1:])  # row-local: 0, 0, 1, 1, 1, 2, ...
            return
        pos = r * self.seq_len
        end = pos + self.row_len
        d = int(np.searchsorted(self.starts, pos, side="right") - 1)
        filled, local = 0, 0
        while filled < self.row_len:
            off = pos + filled - int(self.starts[d])
            doc = self.view.doc(int(self.doc_order[d]))
            body = len(doc)
            if off < body:
                take = min(body - off, end - pos - filled)
                out[filled : filled + take] = doc[off : off + take]
                doc_ids[filled : filled + take] = local
                filled += take
                off += take
            if filled < self.row_len and off >= body and self.sep is not None and off < body + 1:
                out[filled] = self.sep
                doc_ids[filled] = local
                filled += 1
            d += 1
            local += 1


def packed_split(packed: PackedStore, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) sequence ids of ``packed``: a seeded ``val_fraction`` of its sequences is held out.

    Example packing puts each document in one sequence, so held-out sequences are mostly
    unseen documents; SPLICE may place a document's pieces in several sequences, so use a
    separate ``val_store`` when the validation loss must be on strictly unseen text.
    """
    n = len(packed)
    n_val = int(round(n * val_fraction)) if val_fraction > 0 else 0
    if n_val >= n:
        raise UserError(f"val_fraction {val_fraction} holds out all {n} sequences of {packed.path}; lower it")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])
