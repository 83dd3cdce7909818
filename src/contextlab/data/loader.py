"""Deterministic, resumable, rank-sliced training batches: row sources under one loader.

A row is ``context + 1`` tokens (inputs plus the shifted targets). Where rows come from is a
*row source*, which only knows how to fill row r of its ``n_rows``; the ``TokenLoader`` on top
only decides which rows a step takes: the order, the epochs and each rank's slice. Three
sources (their ``mode`` is saved in the loader state, so a checkpoint resumes only on the same
kind of rows):

* ``WindowRows`` (mode ``packed``): documents laid end to end in a seeded order, separated by
  the end-of-text token, and the stream cut into windows (example packing). Nothing is
  copied: a row is located by binary search over the cumulative document lengths, so the
  source costs O(n_docs) memory, whatever the corpus size.
* ``LongDocRows`` (mode ``long_docs``): the LongCrawl64 reading of documents of at least
  ``context + 1`` tokens (every row has real long-range structure, which context-size
  comparisons need). Every window of every such document is a row (consecutive windows share
  one token, so every token but the last few of a document is a target once per epoch); each
  document longer than one row is first rolled (cyclically) by a seeded offset, so document
  openings fall anywhere in a window and in any step; and an epoch is read column-major: the
  documents go to ``rows_per_step`` lanes, row r of step k is the k-th window of lane r, so
  the rows of one step come from different documents and the next step continues them.
  Trade-off: the roll joins a document's end to its start inside one of its windows (without a
  separator), against windows aligned to document openings, which column-major reading
  would put all in the same steps. A
  document of exactly one row is its single window, unrolled (rolling it would only move its
  end before its start): synthetic stores of one sample per row read as before.
* ``PackedRows`` (mode ``packed_store``): the sequences of a packed store made by ``contextlab
  data pack`` (example packing, SPLICE, ...), optionally only the ids of a train or validation
  share (``views.packed_split``). Shorter sequences (the last of a shard) are never used, so
  every row is full.

Loader: every epoch visits all rows once, in the source's order for (seed, epoch): a seeded
permutation, or for long documents the column-major reading; a global batch is the next
``rows_per_step`` rows of it and rank r of a world of w takes rows
r*b .. (r+1)*b - 1 (b = rows / w), so a run on w processes sees exactly the rows a single
process sees, and losses match. The whole state is two integers (epoch, position), saved in
every checkpoint; restoring them gives the same batches as an uninterrupted run. Per-position
document ids are returned too, for block-diagonal attention masks when packed documents must
not see each other. Trade-off: the ragged end of an epoch (fewer rows than a step) is dropped,
so every step has the same rows and tokens.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from contextlab.data.packing.packed_store import PackedStore
from contextlab.data.views import DocView
from contextlab.errors import UserError


@dataclass
class LoaderState:
    epoch: int = 0
    position: int = 0  # rows of the current epoch already handed out (global)


@dataclass
class Batch:
    tokens: np.ndarray  # (b, context + 1) int64: inputs are [:, :-1], targets [:, 1:]
    doc_ids: np.ndarray  # (b, context + 1) int32: which document each position comes from (row-local ids)


# ---------------------------------------------------------------------------------------
# Row sources


class RowSource:
    """``n_rows`` rows of ``row_len`` tokens; a subclass fills row r (see the module docstring)."""

    mode = ""  # the kind of rows, checked when a checkpoint's loader state is loaded
    need = "tokens"  # what "more data" means, for the too-little-data error
    n_rows = 0
    row_len = 0

    def fill(self, r: int, out: np.ndarray, doc_ids: np.ndarray) -> None:
        raise NotImplementedError

    def order(self, seed: int, epoch: int, rows: int) -> np.ndarray:
        """The rows of epoch ``epoch`` in reading order (a permutation of range(n_rows)); ``rows``
        per global step. Default: a permutation seeded by (seed, epoch)."""
        return np.random.default_rng([seed, epoch]).permutation(self.n_rows)

    def documents(self, k: int) -> np.ndarray:
        """The store's ids of the documents the first ``k`` rows read (validation reads those rows)."""
        raise NotImplementedError

    def row(self, r: int) -> np.ndarray:
        """Row r alone: (row_len,) int64."""
        tokens = np.empty(self.row_len, dtype=np.int64)
        self.fill(r, tokens, np.zeros(self.row_len, dtype=np.int32))
        return tokens


class WindowRows(RowSource):
    """Windows over the documents of ``view`` laid end to end in a ``seed``-ed order, each followed by
    ``separator`` (none when it is None); consecutive windows share one token."""

    mode = "packed"

    def __init__(self, view: DocView, context: int, *, separator: int | None = None, seed: int = 0):
        self.view, self.sep, self.context, self.row_len = view, separator, int(context), int(context) + 1
        self.doc_order = np.random.default_rng(seed).permutation(len(view))  # positions in the view
        doc_lens = view.lengths()[self.doc_order] + (1 if separator is not None else 0)
        self.starts = np.concatenate([[0], np.cumsum(doc_lens)])  # (n_docs + 1,) stream offsets
        self.n_rows = max(0, int((self.starts[-1] - 1) // self.context))

    def documents(self, k: int) -> np.ndarray:
        """The documents the stream's first ``k * context + 1`` tokens come from."""
        touched = int(np.searchsorted(self.starts, min(k, self.n_rows) * self.context + 1, side="left"))
        return np.asarray(self.view.indices)[self.doc_order[: min(touched, len(self.doc_order))]]

    def fill(self, r: int, out: np.ndarray, doc_ids: np.ndarray) -> None:
        pos = r * self.context
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


class LongDocRows(RowSource):
    """Every ``context + 1``-token window of every document of ``view`` with at least that many tokens
    (LongCrawl64 reading, see the module docstring). A document of n tokens longer than one row is
    first rolled left by a ``seed``-ed offset in [0, n) and gives (n - 1) // context windows that
    share one token; one of exactly one row is its only window, unrolled. Row ids go window-major
    (the first window of every document, then the second of those that have one, ...), so the
    first k rows (validation) come from k different documents when there are k."""

    mode = "long_docs"

    def __init__(self, view: DocView, context: int, *, seed: int = 0):
        self.view, self.context, self.row_len = view, int(context), int(context) + 1
        lengths = view.lengths()
        docs = np.flatnonzero(lengths >= self.row_len)  # positions in the view
        n_win = (lengths[docs] - 1) // self.context  # (n_docs,) windows per document
        by_windows = np.argsort(-n_win, kind="stable")  # those with > i windows are a prefix
        self.doc_order, self.n_windows = docs[by_windows], n_win[by_windows]
        rolls = np.random.default_rng(seed).integers(0, np.maximum(lengths[self.doc_order], 1))
        self.roll = np.where(lengths[self.doc_order] > self.row_len, rolls, 0)  # one-row documents: 0
        per_level = np.bincount(self.n_windows, minlength=1)[::-1].cumsum()[::-1][1:]  # docs with > i
        self.level_start = np.concatenate([[0], np.cumsum(per_level)])  # row id of window i of doc 0
        self.n_rows = int(self.level_start[-1])
        self.need = f"documents of at least {self.row_len} tokens"

    def fill(self, r: int, out: np.ndarray, doc_ids: np.ndarray) -> None:
        i = int(np.searchsorted(self.level_start, r, side="right") - 1)  # the window's index
        j = r - int(self.level_start[i])  # the document's index in doc_order
        doc = self.view.doc(int(self.doc_order[j]))
        start = (int(self.roll[j]) + i * self.context) % len(doc)
        take = min(self.row_len, len(doc) - start)
        out[:take] = doc[start : start + take]
        out[take:] = doc[: self.row_len - take]  # past the end of the rolled document: its start

    def documents(self, k: int) -> np.ndarray:
        """Rows go window-major: the first ``k`` rows are first windows of ``k`` documents while there
        are that many (then second windows of the same ones)."""
        return np.asarray(self.view.indices)[self.doc_order[: min(k, len(self.doc_order))]]

    def rows_of(self, j: int) -> np.ndarray:
        """The row ids of document j's windows, in reading order."""
        return self.level_start[: int(self.n_windows[j])] + j

    def order(self, seed: int, epoch: int, rows: int) -> np.ndarray:
        """Column-major: documents in a (seed, epoch) order go to ``rows`` lanes (each to the lane
        with the fewest windows so far); step k takes the k-th window of every lane."""
        lanes: list[list[np.ndarray]] = [[] for _ in range(rows)]
        loads = [(0, lane) for lane in range(rows)]  # a heap of (windows so far, lane)
        for j in np.random.default_rng([seed, epoch]).permutation(len(self.doc_order)):
            load, lane = heapq.heappop(loads)
            lanes[lane].append(self.rows_of(int(j)))
            heapq.heappush(loads, (load + int(self.n_windows[j]), lane))
        reads = [np.concatenate(lane) if lane else np.empty(0, np.int64) for lane in lanes]
        grid = np.full((rows, max(len(x) for x in reads)), -1, dtype=np.int64)  # (lanes, steps)
        for lane, x in enumerate(reads):
            grid[lane, : len(x)] = x
        flat = grid.T.ravel()  # step by step, lane by lane
        return flat[flat >= 0]


class PackedRows(RowSource):
    """The full sequences of ``packed`` among the ids ``sequences`` (default: all), in id order."""

    mode = "packed_store"
    need = "packed sequences"

    def __init__(self, packed: PackedStore, context: int, sequences: np.ndarray | None = None):
        self.packed, self.row_len = packed, int(context) + 1
        if packed.context != int(context):
            raise UserError(
                f"{packed.path} was packed for context {packed.context} but train.context is {context}; "
                f"pack again with --context {context} or set train.context = {packed.context}"
            )
        ids = np.arange(len(packed)) if sequences is None else np.asarray(sequences, dtype=np.int64)
        self.doc_order = ids[packed.sequence_lengths()[ids] == self.row_len]  # sequence ids
        self.n_rows = len(self.doc_order)

    def documents(self, k: int) -> np.ndarray:
        ids = self.doc_order[: min(k, self.n_rows)]
        parts = [self.packed.sequence_entries(int(i))[:, 0] for i in ids]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def fill(self, r: int, out: np.ndarray, doc_ids: np.ndarray) -> None:
        tokens, docs = self.packed.sequence_tokens(int(self.doc_order[r]))
        out[:] = tokens
        doc_ids[0] = 0
        np.cumsum(docs[1:] != docs[:-1], out=doc_ids[1:])  # row-local: 0, 0, 1, 1, 1, 2, ...


DOC_MODES = ("packed", "long_docs")  # data.mode: the row sources over a document view


def document_rows(view: DocView, context: int, mode: str, *, separator: int | None, seed: int) -> RowSource:
    """The row source of ``mode`` (one of DOC_MODES) over ``view``; ``separator`` and ``seed`` (the
    document order) apply to windows only."""
    if mode == "packed":
        return WindowRows(view, context, separator=separator, seed=seed)
    if mode == "long_docs":
        return LongDocRows(view, context, seed=seed)
    raise UserError(f"unknown data.mode {mode!r}; use one of {', '.join(DOC_MODES)}")


# ---------------------------------------------------------------------------------------
# The loader


class TokenLoader:
    """Global batches of ``rows_per_step`` rows of ``source``: seeded order, epochs, this rank's slice."""

    def __init__(
        self, source: RowSource, rows_per_step: int, *, seed: int = 0, rank: int = 0, world_size: int = 1
    ):
        if rows_per_step % world_size:
            raise UserError(
                f"rows per step ({rows_per_step}) must be divisible by the number of processes "
                f"({world_size}); change train.tokens_per_step or the process count"
            )
        self.source, self.rows, self.seed = source, int(rows_per_step), int(seed)
        self.rank, self.world = rank, world_size
        self.row_len, self.n_rows, self.mode = source.row_len, source.n_rows, source.mode
        self.context = self.row_len - 1
        self.state = LoaderState()
        if self.n_rows < self.rows:
            raise UserError(
                f"the data gives {self.n_rows} rows of {self.row_len} tokens but one step needs "
                f"{self.rows}; use more data ({source.need}) or a smaller "
                "train.tokens_per_step / train.context"
            )

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        return {
            "epoch": self.state.epoch,
            "position": self.state.position,
            "n_rows": self.n_rows,
            "context": self.context,
            "rows": self.rows,
            "mode": self.mode,
            "seed": self.seed,
        }

    def load_state_dict(self, state: dict) -> None:
        if "seq_len" in state:  # checkpoints written before the rename to context
            state = {**state, "context": state["seq_len"]}
        for key in ("n_rows", "context", "rows", "mode", "seed"):
            if key in state and state[key] != getattr(self, key):
                raise UserError(
                    f"the checkpoint's data loader has {key}={state[key]} but this run has "
                    f"{getattr(self, key)}; resume with the same data and config"
                )
        self.state = LoaderState(int(state["epoch"]), int(state["position"]))

    # ------------------------------------------------------------------ batches
    def _epoch_perm(self, epoch: int) -> np.ndarray:
        cached = getattr(self, "_perm", None)
        if cached is None or cached[0] != epoch:  # one permutation per epoch, not per batch
            self._perm = cached = (epoch, self.source.order(self.seed, epoch, self.rows))
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
            self.source.fill(int(r), tokens[i], doc_ids[i])
        return Batch(tokens, doc_ids)
