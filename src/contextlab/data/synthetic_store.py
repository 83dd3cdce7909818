"""Writing a synthetic task as a token store: one writer for every generator (parity, MQAR).

A generator hands over its tokenizer, its ``meta.json`` record and the samples as batches of
``(rows, doc_metas)``; this module writes them through the ordinary store writer into a
partial folder, saves the tokenizer and the task's own side files, and finalizes the store
atomically, so every contextlab tool (training, evaluation, ``data stats``) reads the result
like any ingested store. Trade-off: the samples are drawn in the generator's own chunks and
written document by document (a Python loop per sample), which is slower than one memmap
copy but keeps one writer, one lock-free partial-folder protocol and one store format.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from contextlab.errors import UserError

Batch = tuple[np.ndarray, list[dict]]  # (n, T) token rows and one document meta each


def write_synthetic_store(
    out: str | os.PathLike,
    tokenizer,
    meta: dict,
    batches: Iterable[Batch],
    *,
    side_files: dict[str, dict] | None = None,
    overwrite: bool = False,
    total: int = 0,
    desc: str = "samples",
    progress: bool = True,
) -> Path:
    """Write every batch's rows as documents of a uint16 store at ``out`` with ``meta`` as its
    meta.json (plus ``side_files``: name -> JSON object beside it) and return the store's path."""
    from contextlab import bars
    from contextlab.data.store import StoreWriter, WriterState, finalize_store
    from contextlab.data.store_write import refuse_non_store
    from contextlab.io import atomic_write_json, partial_dir

    out = Path(out)
    refuse_non_store(out)  # --overwrite replaces a token store only
    if out.exists() and not overwrite:
        raise UserError(f"{out} already exists; choose another --out or pass --overwrite")
    partial = partial_dir(out)
    if partial.exists():
        shutil.rmtree(partial)
    writer = StoreWriter(partial, np.dtype(np.uint16), WriterState())
    try:
        hide = None if progress else True  # None: shown only when stderr is a terminal
        with bars.bar(total=total or None, unit="sample", desc=desc, disable=hide) as bar:
            for rows, metas in batches:
                for row, doc in zip(rows, metas):
                    writer.add(row, doc)
                bar.update(len(metas))
        writer.flush()
    finally:
        writer.close()
    tokenizer.save(partial / "tokenizer")
    for name, obj in (side_files or {}).items():
        atomic_write_json(partial / name, obj)
    finalize_store(partial, out, meta, overwrite=overwrite)
    return out
