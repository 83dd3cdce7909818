"""Packing one shard ("packs" in the seed): a contiguous range of documents, packed on its own.

A shard is a contiguous range of documents (store order: ingest walks folders in sorted
order, so a directory or repository stays together), with ranges balanced by token count
(``shards.ranges``). Packing a shard needs only the token store and the config; its random
stream is seeded by (seed, shard index), so the result does not depend on which process or
machine runs it, or in what order. ``run_shard`` is the shard function of the engine's contract
(``data.shards``): each finished shard is written atomically as ``shard_NNNNN.npz``, its arrays
plus its done record (the pack's fingerprint, its stats, a checksum of the arrays), which
``check_shard`` checks before a resume. Retriever memory is per shard, so the shard size bounds
peak memory; it is reported as ``index_bytes``. A shard reads only its own documents' metadata
(domains, and only when its method uses them), so at a fixed shard size the cost per shard
stays flat as the corpus grows.
"""

from __future__ import annotations

import io
import json
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from contextlab.data.packing.config import PackConfig
from contextlab.data.packing.methods import PACKERS, RETRIEVERS
from contextlab.data.packing.sequencer import Sequencer, flatten
from contextlab.data.shards.done_markers import arrays_checksum, check_record, done_record
from contextlab.data.shards.progress import batched, draws_here
from contextlab.data.shards.ranges import ranges_of_ends
from contextlab.data.store import TokenStore
from contextlab.errors import UserError
from contextlab.io import atomic_write_bytes


def store_shard_ranges(store: TokenStore, n_shards: int) -> list[tuple[int, int]]:
    """``shards.ranges.shard_ranges`` of the store's documents, read from its offsets (the cumulative lengths)
    by binary search: a few pages of the map, not an array per document."""
    return ranges_of_ends(store.offsets[1:], n_shards)


def shard_file(partial: Path, index: int) -> Path:
    return partial / "shards" / f"shard_{index:05d}.npz"


def shard_rows(store: TokenStore, lo: int, hi: int, at: int | None = None) -> list[dict]:
    """The docs.jsonl rows of documents [lo, hi), parsing only their lines. ``at``: the byte where
    line ``lo`` starts (``line_starts``), so the earlier lines are not read at all; without it
    they are skipped unparsed (one pass over them per shard, which grows with the corpus)."""
    import itertools

    meta = store.path / "docs.jsonl"
    if not meta.is_file():
        raise UserError(f"store {store.path} is incomplete: docs.jsonl is missing; ingest the source again")
    with open(meta, "rb") as fh:
        if at is not None:
            fh.seek(at)
        first = 0 if at is not None else lo
        rows = [json.loads(line) for line in itertools.islice(fh, first, first + hi - lo)]
    if len(rows) != hi - lo:
        raise UserError(
            f"store {store.path} is corrupt: docs.jsonl has fewer than {hi} lines; ingest the source again"
        )
    return rows


def domain_codes(store: TokenStore, lo: int, hi: int, at: int | None = None) -> np.ndarray:
    """int64 codes of the ``domain`` of documents [lo, hi), numbered in order of first appearance
    (their rows read as ``shard_rows`` reads them)."""
    names: dict[str, int] = {}
    rows = shard_rows(store, lo, hi, at)
    return np.array([names.setdefault(str(r.get("domain", "")), len(names)) for r in rows], dtype=np.int64)


def line_starts(path: Path, lines: list[int], chunk: int = 1 << 23) -> list[int | None]:
    """The byte where each of ``lines`` (0-based line numbers, any order) starts in ``path``, found
    in one pass that counts line ends chunk by chunk (None: the file has fewer lines)."""
    order = sorted(range(len(lines)), key=lines.__getitem__)
    out: list[int | None] = [0 if line == 0 else None for line in lines]
    k = sum(1 for line in lines if line == 0)  # the next of `order` to find
    seen = pos = 0  # line ends before the chunk, and the chunk's first byte
    with open(path, "rb") as fh:
        while k < len(order) and (block := fh.read(chunk)):
            n, ends = block.count(b"\n"), None
            while k < len(order) and lines[order[k]] - seen <= n:  # line L starts after the L-th end
                if ends is None:
                    ends = np.flatnonzero(np.frombuffer(block, np.uint8) == ord("\n"))
                out[order[k]] = pos + int(ends[lines[order[k]] - seen - 1]) + 1
                k += 1
            seen, pos = seen + n, pos + len(block)
    return out


def build_retriever(
    store: TokenStore,
    doc_ids: np.ndarray,
    cfg: PackConfig,
    docs_at: int | None = None,
    bars: bool = False,
    first: int | None = None,
):
    """The retriever over the shard's documents ``doc_ids`` (ascending; gaps where documents are held
    out); one that reads their metadata (repo: their paths) is given their rows of docs.jsonl
    (``shard_rows`` from document ``first``, default ``doc_ids[0]``, whose line starts at byte
    ``docs_at``); one with a slow build shows a bar of it when ``bars`` and this process draws bars
    (not a pool worker: its parent draws the pack's one bar)."""
    kind = RETRIEVERS[cfg.retriever]
    extra = {"progress": bars and draws_here()} if kind.shows_progress else {}
    if kind.reads_meta:
        rows = []
        if len(doc_ids):
            lo = int(doc_ids[0]) if first is None else first
            every = shard_rows(store, lo, int(doc_ids[-1]) + 1, docs_at)
            rows = [every[int(d) - lo] for d in doc_ids]
        return kind.build(store, doc_ids, cfg, rows=rows, **extra)
    return kind.build(store, doc_ids, cfg, **extra)


def packed_documents(lo: int, hi: int, heldout: str | None) -> np.ndarray:
    """The documents of [lo, hi) a shard packs: all but those of the pack's ``heldout.npy`` (sorted ids,
    read through a memory map: only the slice in the range)."""
    doc_ids = np.arange(lo, hi, dtype=np.int64)
    if heldout is None:
        return doc_ids
    held = np.load(heldout, mmap_mode="r")
    a, b = np.searchsorted(held, [lo, hi])
    return np.setdiff1d(doc_ids, np.asarray(held[a:b]), assume_unique=True)


def pack_shard(
    store: TokenStore,
    cfg: PackConfig,
    index: int,
    lo: int,
    hi: int,
    on_take: Callable[[int], None] | None = None,
    docs_at: int | None = None,
    bars: bool = False,
    heldout: str | None = None,
) -> tuple[dict, dict]:
    """Pack documents [lo, hi) but the held-out ones (``heldout``: the pack's heldout.npy, or None);
    returns (arrays, stats). ``on_take(doc)`` sees every packed document; ``docs_at``: the byte of
    docs.jsonl where document ``lo``'s line starts (see ``shard_rows``); ``bars``: a slow retriever
    build may show its own bar (``build_retriever``)."""
    packer = PACKERS[cfg.method]
    t0 = time.perf_counter()
    if (
        not store.verified()
    ):  # a store the driver checked whole (TokenStore.check_content) needs no second read
        store.check_ids(docs=(lo, hi))  # each shard its own tokens: no pass over the whole store anywhere
    doc_ids = packed_documents(lo, hi, heldout)
    local = doc_ids - lo  # their places among the shard's documents
    sep = cfg.separator == "eot"
    seq = Sequencer(
        np.diff(np.asarray(store.offsets[lo : hi + 1]))[local],  # this shard's lengths only
        lambda: domain_codes(store, lo, hi, docs_at)[local],  # read only if the method draws within a domain
        row_len=cfg.row_len,
        separator=sep,
        remainder=cfg.remainder,
        order=cfg.order if packer.ordered else "identity",
        rng=np.random.default_rng([cfg.seed, index]),
    )
    retriever = None
    if cfg.uses_retriever and len(doc_ids):
        retriever = build_retriever(store, doc_ids, cfg, docs_at, bars, first=lo)
    seq.on_take.extend([on_take] if on_take else [])  # progress: a document was packed
    packer.fill(seq, retriever, cfg)
    entries, offsets, sims = flatten(seq.sequences, doc_ids)
    stats = {
        "shard": index,
        "docs": [lo, hi],
        "n_docs": len(doc_ids),  # packed: the range's documents but the held-out ones
        "n_sequences": len(seq.sequences),
        "n_entries": len(entries),
        "dropped_tokens": int(seq.dropped_tokens),
        "dropped_near_duplicates": [int(doc_ids[j]) for j in seq.dropped_docs],
        "unused_docs": int(seq.n_unused),
        "index_bytes": int(getattr(retriever, "index_bytes", 0)),
        "index_seconds": round(float(getattr(retriever, "build_seconds", 0.0)), 3),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    return {"entries": entries, "seq_offsets": offsets, "similarity": sims}, stats


def write_shard(path: Path, arrays: dict, stats: dict, fingerprint: str) -> None:
    """A shard's file: its arrays and a record (the pack's fingerprint, the shard's stats, which
    name its index and document range, and a checksum of the arrays, checked before a resume)."""
    buf = io.BytesIO()
    record = json.dumps(done_record(fingerprint, stats, arrays_checksum(arrays)))
    np.savez(buf, record=np.frombuffer(record.encode(), dtype=np.uint8), **arrays)
    atomic_write_bytes(path, buf.getvalue())


ARRAYS = ("entries", "seq_offsets", "similarity")


def check_shard(
    path: Path, fingerprint: str, index: int, docs: tuple[int, int], *, checksum: bool = True
) -> tuple[dict | None, str | None]:
    """(the stats of shard ``index`` of documents ``docs`` = [lo, hi), None) when ``path`` holds
    exactly that shard, else (None, why): why is None for a missing file, else what is wrong with
    it (unreadable or cut short, another config, another shard's index or documents, arrays that
    do not match the checksum written with them). ``checksum=False`` reads only the record."""
    if not path.is_file():
        return None, None
    try:
        with np.load(path) as z:
            record = json.loads(z["record"].tobytes().decode())
            arrays = {name: z[name] for name in ARRAYS} if checksum else None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        return None, f"unreadable ({type(exc).__name__})"
    identity = {"shard": index, "docs": [int(docs[0]), int(docs[1])]}
    sums = (lambda: arrays_checksum(arrays)) if arrays is not None else None
    stats, why = check_record(record, fingerprint, identity, sums, output="its arrays")
    if stats is not None and arrays is not None:
        ids = arrays["entries"][:, 0] if len(arrays["entries"]) else np.zeros(0, np.int64)
        if len(ids) and (ids.min() < docs[0] or ids.max() >= docs[1]):
            return None, "its entries name documents outside its range"
    return stats, why


def shard_array(path: Path, name: str, length: int) -> np.ndarray:
    """One array of a finished shard ("entries", "seq_offsets" or "similarity"), checked to hold
    ``length`` rows (its record's count)."""
    try:
        with np.load(path) as z:
            arr = z[name]
    except (OSError, ValueError, KeyError) as exc:
        arr, why = None, str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    else:
        why = f"{name} has {len(arr)} rows, its record says {length}"
    if arr is None or len(arr) != length:
        raise UserError(f"shard file {path} is corrupt ({why}); delete it and run the same command again")
    return arr


def run_shard(
    store_path: str,
    cfg: PackConfig,
    index: int,
    lo: int,
    hi: int,
    out: str,
    fingerprint: str,
    docs_at: int | None = None,
    bars: bool = False,
    heldout: str | None = None,
    count: Callable[[int], None] | None = None,
) -> dict:
    """Pack one shard and write its file (a top-level function: runs in worker processes).
    ``docs_at``, ``bars``, ``heldout``: see ``pack_shard``; ``count(n)``: n more documents packed,
    called every few documents and once at the end."""
    store = TokenStore(store_path)
    one, flush = batched(count or (lambda n: None))
    arrays, stats = pack_shard(store, cfg, index, lo, hi, one, docs_at, bars, heldout)
    flush()
    write_shard(Path(out), arrays, stats, fingerprint)
    return stats
