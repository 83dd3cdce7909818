"""Rows of a packed store in batches, with per-token position ids and document ids.

A row is one training sequence (``context + 1`` tokens) exactly as ``PackedStore.sequence_tokens``
builds it. Next to its tokens come ``position_ids`` (0 at the first token of every entry, i.e. of
every document or document piece in the row, counting up to its end, the separator included)
and ``document_ids`` (per token: the token store's global document index of the entry it belongs
to; a separator carries the id of the document it ends, as in the packed store). Batches are
flat (values plus row offsets, the layout of an Arrow list column), so a writer never holds more
than one batch: the packed store's arrays are memory maps, every token is read from the
token store's memory map, and after each batch the pages read are handed back
(``MADV_DONTNEED``: they leave this process's resident set and stay in the OS page cache), so
the resident set does not grow with the tokens read either. What does grow: 8 bytes per
sequence (the ids to export); a document's length is read from the store's offsets when an
entry needs it, not kept for every document.
Trade-off: rows are built one at a time in Python (a few microseconds of numpy per entry),
which is simple and streams, not the fastest possible path.

``window_batches`` builds the same three columns for the validation rows of a store packed holding
documents out: the windows over those documents a contextlab run on it validates on
(``loader.WindowRows``), positions restarting at each document (and at each window's first token,
as at a piece's), document ids the store's.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from contextlab.data.loader import WindowRows
from contextlab.data.packing.packed_store import PackedStore, sequence_lengths

_CHUNK = 1 << 20  # sequences whose lengths are computed at a time


@dataclass
class RowBatch:
    """``b`` rows laid end to end: row j is ``[offsets[j], offsets[j + 1])`` of each array."""

    input_ids: np.ndarray  # (sum of row lengths,) int64
    position_ids: np.ndarray  # (sum of row lengths,) int32
    document_ids: np.ndarray  # (sum of row lengths,) int32, global document index
    offsets: np.ndarray  # (b + 1,) int64

    def __len__(self) -> int:
        return len(self.offsets) - 1


Batches = Callable[[np.ndarray, int], Iterator[RowBatch]]  # (row ids, rows per batch) -> batches


def entry_doc_lengths(packed: PackedStore, entries: np.ndarray) -> np.ndarray:
    """(n,) the token count of each entry's document, read from the store's offsets."""
    ends = packed.store.offsets
    return np.asarray(ends[entries[:, 0] + 1]) - np.asarray(ends[entries[:, 0]])


def row_positions(packed: PackedStore, i: int, n_tokens: int) -> np.ndarray:
    """(n_tokens,) int32 positions of sequence ``i``: restarting at 0 at each entry's first token."""
    ent = packed.sequence_entries(i)  # (n, 3): document, begin, end
    n = ent[:, 2] - ent[:, 1]
    if packed.separator_id is not None:
        n = n + (
            ent[:, 2] == entry_doc_lengths(packed, ent)
        )  # a separator after an entry that ends its document
    starts = np.concatenate([[0], np.cumsum(n)[:-1]]).astype(np.int64)
    starts = starts[starts < n_tokens]
    seg = np.zeros(n_tokens, dtype=np.int64)  # (n_tokens,) the start of each token's entry
    seg[starts] = starts
    np.maximum.accumulate(seg, out=seg)
    return (np.arange(n_tokens, dtype=np.int64) - seg).astype(np.int32)


def row_ids(packed: PackedStore, keep_short: bool, sequences: np.ndarray | None = None) -> np.ndarray:
    """The sequence ids to export, in packed order: all full rows (``context + 1`` tokens), or every
    non-empty row with ``keep_short``; ``sequences`` restricts them (a train or validation share)."""
    lengths = row_lengths(packed)  # (n_sequences,)
    ids = np.arange(len(lengths)) if sequences is None else np.asarray(sequences, dtype=np.int64)
    keep = lengths[ids] > 0 if keep_short else lengths[ids] == packed.row_len
    return ids[keep]


def row_lengths(packed: PackedStore) -> np.ndarray:
    """``packed.sequence_lengths()`` a chunk of sequences at a time (no array per entry)."""
    n, off = packed.n_sequences, packed.seq_offsets
    out = np.zeros(n, dtype=np.int64)  # (n_sequences,)
    for a in range(0, n, _CHUNK):
        b = min(a + _CHUNK, n)
        e0, e1 = int(off[a]), int(off[b])
        entries = np.array(packed.entries[e0:e1])  # (entries of the chunk, 3)
        offsets = np.asarray(off[a : b + 1]) - e0
        doc_len = entry_doc_lengths(packed, entries)  # entry j's document is now "document j"
        entries[:, 0] = np.arange(len(entries))
        out[a:b] = sequence_lengths(
            entries, offsets, doc_len, packed.separator_id is not None, packed.row_len
        )
    return out


def release_pages(array: np.ndarray) -> None:
    """Drop the pages of a memory-mapped ``array`` from this process's resident set (a no-op for an
    in-memory array). The mapping is read-only, so the next read simply maps them again."""
    mapped = getattr(array, "_mmap", None)  # np.memmap keeps its mmap.mmap here
    if mapped is not None and hasattr(mmap, "MADV_DONTNEED"):
        mapped.madvise(mmap.MADV_DONTNEED)


def row_batches(packed: PackedStore, ids: np.ndarray, batch_rows: int) -> Iterator[RowBatch]:
    """The rows ``ids`` of ``packed`` in that order, ``batch_rows`` at a time."""
    for start in range(0, len(ids), batch_rows):
        toks, pos, docs, lens = [], [], [], [0]
        for i in ids[start : start + batch_rows]:
            tokens, doc_ids = packed.sequence_tokens(int(i))
            toks.append(tokens)
            docs.append(doc_ids)
            pos.append(row_positions(packed, int(i), len(tokens)))
            lens.append(len(tokens))
        yield RowBatch(
            np.concatenate(toks),
            np.concatenate(pos),
            np.concatenate(docs).astype(np.int32),
            np.cumsum(lens, dtype=np.int64),
        )
        release_pages(packed.store.tokens)


def window_batches(windows: WindowRows, ids: np.ndarray, batch_rows: int) -> Iterator[RowBatch]:
    """The rows ``ids`` of ``windows`` in that order, ``batch_rows`` at a time: tokens as
    ``WindowRows.row`` gives them, positions from 0 at each document's first token in the row (a
    separator counts with the document it ends), document ids the token store's."""
    order = np.asarray(windows.view.indices)[windows.doc_order]  # stream position -> store document
    for start in range(0, len(ids), batch_rows):
        chunk = np.asarray(ids[start : start + batch_rows], dtype=np.int64)
        toks = np.empty((len(chunk), windows.row_len), dtype=np.int64)  # (b, context + 1)
        local = np.empty_like(toks)  # (b, context + 1) the k-th document of the row
        docs = np.empty_like(toks)
        for j, r in enumerate(chunk):
            windows.fill(int(r), toks[j], local[j])
            first = int(np.searchsorted(windows.starts, int(r) * windows.context, side="right") - 1)
            docs[j] = order[first + local[j]]
        new = np.ones_like(local, dtype=bool)
        new[:, 1:] = local[:, 1:] != local[:, :-1]  # (b, context + 1) a document's first token here
        seg = np.where(new, np.arange(windows.row_len), 0)
        np.maximum.accumulate(seg, axis=1, out=seg)
        pos = np.arange(windows.row_len) - seg
        yield RowBatch(
            toks.ravel(),
            pos.astype(np.int32).ravel(),
            docs.astype(np.int32).ravel(),
            np.arange(len(chunk) + 1, dtype=np.int64) * windows.row_len,
        )
        release_pages(windows.view.store.tokens)
