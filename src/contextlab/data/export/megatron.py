"""Packed rows as a Megatron-LM indexed dataset (``PREFIX.bin`` + ``PREFIX.idx``), written here.

The format (megatron-core ``datasets/indexed_dataset.py``, read by Megatron-LM, NeMo and
GPT-NeoX): ``.bin`` holds every sequence's token ids back to back (uint16 when the vocabulary
has fewer than 65,500 ids, else int32, as Megatron chooses); ``.idx`` is the 9-byte magic
``MMIDIDX\\0\\0``, a little-endian u64 version (1), a u8 dtype code (8 = uint16, 4 = int32), u64
sequence count, u64 document count, then int32 sequence lengths, int64 byte offsets of the
sequences in ``.bin``, and int64 ``document_indices`` (the sequence index where each document
starts, a leading 0, one entry per document plus one).

Layout: every *sequence* of the index is one packed row of ``context + 1`` tokens, in packed order,
and each row is its own document (``document_indices`` = 0, 1, ..., n). Megatron's GPTDataset
samples over sequences, so with ``sequence_length = context + 1`` and
``add_extra_token_to_sequence = False`` each of its samples is exactly one SPLICE row; its
shuffling (always on) permutes whole rows, never splits one. Document boundaries inside a row are
the separator tokens (``--reset-position-ids --reset-attention-mask`` read them). Trade-off: one
index entry per row instead of per document piece, so the sampler cannot re-cut SPLICE's rows.
No megatron import: contextlab does not depend on it; the tests read the files with it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np

from contextlab.data.export.rows import Batches

MAGIC = b"MMIDIDX\x00\x00"
DTYPE_CODES = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}
_CHUNK = 1 << 20  # index entries written at a time


def megatron_dtype(vocab_size: int) -> np.dtype:
    """Megatron's choice of token dtype: uint16 below 65,500 ids, else int32."""
    return np.dtype(np.uint16) if vocab_size < 65500 else np.dtype(np.int32)


def write_megatron_split(
    rows: Batches,
    ids: np.ndarray,
    prefix: Path,
    dtype: np.dtype,
    batch_rows: int,
    advance: Callable[[int], object],
) -> dict:
    """Write rows ``ids`` (built by ``rows``) as ``PREFIX.bin`` / ``PREFIX.idx``; returns rows and tokens."""
    lengths = []  # one int per row: a small copy next to the rows' tokens
    with open(prefix.with_suffix(".bin"), "wb") as f:
        for batch in rows(ids, batch_rows):
            f.write(batch.input_ids.astype(dtype).tobytes())
            lengths.append(np.diff(batch.offsets).astype(np.int32))
            advance(len(batch))
    lengths_all = np.concatenate(lengths) if lengths else np.zeros(0, np.int32)  # (n_rows,)
    write_index(prefix.with_suffix(".idx"), lengths_all, dtype)
    return {"prefix": prefix.name, "rows": int(len(ids)), "tokens": int(lengths_all.sum())}


def write_index(path: Path, lengths: np.ndarray, dtype: np.dtype) -> None:
    """The ``.idx`` of sequences of ``lengths`` tokens, each its own document."""
    n = len(lengths)
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", DTYPE_CODES[np.dtype(dtype)]))
        f.write(struct.pack("<Q", n))  # sequences
        f.write(struct.pack("<Q", n + 1))  # document_indices entries
        f.write(lengths.astype("<i4").tobytes())
        start = 0
        for a in range(0, n, _CHUNK):  # byte offsets, a chunk at a time
            chunk = lengths[a : a + _CHUNK].astype(np.int64) * np.dtype(dtype).itemsize
            ptr = start + np.concatenate([[0], np.cumsum(chunk)[:-1]])
            f.write(ptr.astype("<i8").tobytes())
            start += int(chunk.sum())
        for a in range(0, n + 1, _CHUNK):
            f.write(np.arange(a, min(a + _CHUNK, n + 1), dtype="<i8").tobytes())
