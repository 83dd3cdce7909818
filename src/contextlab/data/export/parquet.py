"""Packed rows as Parquet shards that ``datasets.load_dataset("parquet", data_dir=DIR)`` reads.

One Parquet row per training sequence, three list columns of equal length: ``input_ids`` (the
packed row, ``context + 1`` tokens), ``position_ids`` (restarting at 0 at every document or
document piece within the row) and ``document_ids`` (the token store's global document index of
each token). Files are ``SPLIT-00000-of-0000N.parquet``, the names Hugging Face datasets maps to
splits. Every batch of rows is one Arrow record batch (one row group), written as soon as it is
built. Trade-off: ``int32`` columns (a token id, a position and a document index all fit; the
Hub's own tokenized datasets use them), against ``int64``, which doubles the files for nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from contextlab.data.export.rows import Batches, RowBatch

COLUMNS = ("input_ids", "position_ids", "document_ids")


def shard_names(split: str, n_shards: int) -> list[str]:
    return [f"{split}-{k:05d}-of-{n_shards:05d}.parquet" for k in range(n_shards)]


def _schema():
    import pyarrow as pa

    return pa.schema([(name, pa.list_(pa.int32())) for name in COLUMNS])


def _record_batch(batch: RowBatch):
    import pyarrow as pa

    offsets = pa.array(batch.offsets.astype(np.int32))  # list offsets of one batch (< 2**31 tokens)
    arrays = [
        pa.ListArray.from_arrays(offsets, pa.array(values.astype(np.int32)))
        for values in (batch.input_ids, batch.position_ids, batch.document_ids)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=_schema())


def write_parquet_split(
    rows: Batches,
    ids: np.ndarray,
    folder: Path,
    split: str,
    rows_per_shard: int,
    batch_rows: int,
    advance: Callable[[int], object],
) -> list[dict]:
    """Write rows ``ids`` (built by ``rows``) as ``folder/SPLIT-*.parquet``; per file: name, rows, tokens."""
    import pyarrow.parquet as pq

    n_shards = max(1, -(-len(ids) // rows_per_shard))
    files = []
    for k, name in enumerate(shard_names(split, n_shards)):
        shard_ids = ids[k * rows_per_shard : (k + 1) * rows_per_shard]
        tokens = 0
        with pq.ParquetWriter(folder / name, _schema(), compression="zstd") as writer:
            for batch in rows(shard_ids, batch_rows):
                writer.write_batch(_record_batch(batch), row_group_size=len(batch))
                tokens += int(batch.offsets[-1])
                advance(len(batch))
        files.append({"file": name, "rows": int(len(shard_ids)), "tokens": tokens})
    return files


def rows_per_shard_for(row_len: int, shard_mb: float) -> int:
    """Rows whose three int32 columns take about ``shard_mb`` MiB before compression (at least 1)."""
    return max(1, int(shard_mb * 2**20) // (row_len * 4 * len(COLUMNS)))
