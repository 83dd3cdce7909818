"""``pack``: token store -> packed store, sharded, parallel, resumable, atomic, deterministic.

Work goes to ``OUT.partial/``: ``progress.json`` holds the fingerprint of (config, token
store hash, tokenizer hash); every finished shard is one file in ``shards/``. A run killed
at any moment restarts by skipping the shards already written, and since a shard's result
depends only on (documents, config, seed, shard index), the resumed output is
byte-identical to an uninterrupted one (timings in meta.json aside). When every shard is
there, the arrays are concatenated in shard order, config.toml and then meta.json written
(meta.json last: it marks the folder finished), the work files removed and the directory
renamed to OUT in one step. A run killed while finalizing resumes there: before meta.json
it writes the same files again from the shards; after it, it only completes the clean-up
and the rename, packing nothing again.

Validation documents: before any shard runs, ``--val-fraction`` of the store's documents are drawn
(``views.split_documents``, as a data.store run draws its validation documents) into
``OUT.partial/heldout.npy``; every shard packs its range but those, so no packing method and no
retriever sees them, and every packing of one store with one val_fraction and split_seed holds out
the same ones (runs on them validate on the same rows). The file stays in the packed store.

Scale-out: ``workers`` runs shards in that many processes (spawned, so numba/Faiss/torch
threads are never forked); ``only_shards`` packs just those shards and stops before
finalizing, so a SLURM array or many machines sharing a filesystem can each take a slice,
and a final call without ``only_shards`` assembles the result. ``executor`` runs the same
shards as Ray tasks instead (``contextlab data pack --ray``). The shard engine (``data.shards``)
does the running, the skipping of finished shards and the check of their done markers; this
module says what a pack's shards are and assembles them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import contextlab.data.packing.shards as shards_mod
from contextlab import FORMAT_VERSION, __version__
from contextlab.config import save_toml, to_dict
from contextlab.data.packing.config import PackConfig
from contextlab.data.packing.methods import RETRIEVERS
from contextlab.data.packing.packed_store import (
    HELDOUT_FILE,
    PACKED_FORMAT,
    PackedStore,
    is_packed_store,
    sequence_lengths,
)
from contextlab.data.shards import LocalExecutor, ShardedJob, ShardExecutor, finished_stats, shards_to_run
from contextlab.data.store import TokenStore, holds_output_lock
from contextlab.data.views import split_documents
from contextlab.errors import UserError
from contextlab.io import atomic_write_json, atomic_write_npy, open_partial, partial_dir
from contextlab.outputs import OutputKind, refuse_foreign, refuse_non_folder, replace_dir

PACKED = OutputKind(  # what --overwrite of a pack may replace
    "a packed store",
    is_packed_store,
    (
        "meta.json",
        "config.toml",
        "entries.npy",
        "seq_offsets.npy",
        "similarity.npy",
        HELDOUT_FILE,
        "pack_stats.*",
        "report.html",  # `contextlab report PACKED`'s page
    ),
)


@dataclass
class PackReport:
    """What a pack call did."""

    packed: PackedStore | None  # None when only some shards were asked for
    seconds: float
    shards_packed: int
    shards_resumed: int
    up_to_date: bool = False
    docs_packed: int = 0  # documents of the shards this call packed (not those resumed)


def fingerprint(cfg: PackConfig, store: TokenStore) -> str:
    blob = json.dumps(
        {
            "format": PACKED_FORMAT,
            "version": FORMAT_VERSION,
            "config": cfg.fingerprint_dict(),
            "store": store.hash,
            "tokenizer": store.tokenizer_hash,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _pack_inputs(call: dict) -> list:
    store = call["store"]
    return [store.path if isinstance(store, TokenStore) else store]


@holds_output_lock("packed store", unless="only_shards", inputs=_pack_inputs)
def pack(
    store: str | Path | TokenStore,
    out: str | Path,
    config: PackConfig | None = None,
    *,
    overwrite: bool = False,
    workers: int = 1,
    only_shards: list[int] | None = None,
    progress: bool = True,
    executor: ShardExecutor | None = None,
    verify: bool = True,
) -> PackReport:
    """Pack ``store`` into a packed store at ``out`` (resuming an unfinished run). ``executor``
    says where the shards run (``data.shards.EXECUTORS``; default: ``workers`` local processes).
    ``verify``: check the store's content hash first (``TokenStore.check_content``)."""
    given = config or PackConfig()
    tstore = store if isinstance(store, TokenStore) else TokenStore(store)
    if tstore.n_docs == 0:
        raise UserError(f"store {tstore.path} has no documents; ingest a corpus first")
    if verify and only_shards is None:  # an --only-shards machine checks its own documents' ids only
        tstore.check_content()
    cfg = _holdout_that_fits(_shards_that_fit(given, tstore), tstore)
    sep_id = _separator_id(tstore, cfg)
    fp = fingerprint(cfg, tstore)
    out = Path(out)
    refuse_non_folder(out)
    if out.exists():  # a store packed before the shards were cut to fit records those asked for
        done = _existing_output(out, {fp, fingerprint(given, tstore)}, overwrite, cfg, tstore)
        if done is not None:
            return done
    t0, ranges = time.perf_counter(), shards_mod.store_shard_ranges(tstore, cfg.shards)
    _note_large_shards(cfg, ranges)
    wanted = _wanted_shards(only_shards, len(ranges))  # validated before OUT.partial is created
    if only_shards is None and _finalized(partial_dir(out), fp):  # killed after meta.json was written
        _complete(partial_dir(out), out, overwrite)
        return PackReport(PackedStore(out, store=tstore), time.perf_counter() - t0, 0, len(wanted))
    partial = _open_partial(out, fp, overwrite, cfg, tstore)
    held = _write_heldout(partial, tstore, cfg)
    if only_shards is None:
        _say_heldout(tstore, cfg, held)
    job = _sharded_job(partial, fp, ranges)
    todo = shards_to_run(job, wanted)  # a shard file that does not hold exactly its shard is named
    if progress and len(todo) < len(wanted):
        print(f"resuming pack into {out}: {len(wanted) - len(todo)} of {len(wanted)} shard(s) already packed")
    counts = [ranges[s][1] - ranges[s][0] - int(np.diff(np.searchsorted(held, ranges[s]))[0]) for s in todo]
    _run(job, tstore, cfg, ranges, todo, counts, partial, fp, executor or LocalExecutor(workers), progress)
    n_docs = sum(counts)
    done = dict(shards_packed=len(todo), shards_resumed=len(wanted) - len(todo), docs_packed=n_docs)
    if only_shards is not None:
        return PackReport(None, time.perf_counter() - t0, **done)
    stats = finished_stats(job, list(range(len(ranges))), partial)
    _finalize(tstore, cfg, ranges, partial, stats, fp, sep_id, out)
    _complete(partial, out, overwrite)
    return PackReport(PackedStore(out, store=tstore), time.perf_counter() - t0, **done)


def _open_partial(out: Path, fp: str, overwrite: bool, cfg: PackConfig, store: TokenStore) -> Path:
    """OUT.partial with its shards/ folder, resumed when it holds the same fingerprint; its record holds
    the config and store, so that another one is refused naming what differs."""

    def differs(old: dict | None) -> str:
        if old and old.get("config"):
            return f"pack ({_what_differs(old, cfg, store)})"
        return "pack with another config or store"

    record = {"fingerprint": fp, "config": to_dict(cfg), "store": {"content_hash": store.hash}}
    record.update(code_version=__version__, version=FORMAT_VERSION)  # said when only the format differs
    record["store"]["tokenizer_hash"] = store.tokenizer_hash
    partial, _ = open_partial(
        out,
        record,
        overwrite=overwrite,
        has_work=lambda folder, _: any((folder / "shards").glob("shard_*.npz")),
        what=differs,
    )
    (partial / "shards").mkdir(exist_ok=True)
    return partial


def _holdout_that_fits(cfg: PackConfig, store: TokenStore) -> PackConfig:
    """``cfg`` holding out no document of a store of one (none can be spared), said in one line."""
    if cfg.val_fraction == 0 or store.n_docs >= 2:
        return cfg
    print(
        f"note: {store.path} has {store.n_docs} document, so none is held out for validation (meta.json "
        "records val_fraction 0); a run on this packed store holds out data.val_fraction of its sequences "
        "instead, or give it a data.val_store",
        file=sys.stderr,
    )
    return dataclasses.replace(cfg, val_fraction=0.0)


def _write_heldout(partial: Path, store: TokenStore, cfg: PackConfig) -> np.ndarray:
    """``partial/heldout.npy``: the documents held out for validation (``views.split_documents``, what a
    data.store run with this val_fraction and split_seed holds out), which no shard packs; returned
    (sorted ids; none for val_fraction 0)."""
    if cfg.val_fraction == 0:
        return np.zeros(0, np.int64)
    ids = np.asarray(split_documents(store, cfg.val_fraction, cfg.split_seed)[1].indices, np.int64)
    atomic_write_npy(partial / HELDOUT_FILE, np.int64, (len(ids),), [ids])
    return ids


def _say_heldout(store: TokenStore, cfg: PackConfig, held: np.ndarray) -> None:
    """A note when the held-out documents surprise: too short for one validation window (a run on the
    pack could not validate), or a far larger share of the store than ``--val-fraction`` asks (a store
    of few documents holds out at least one; a large fraction leaves little to train on)."""
    if not len(held):
        return
    n, tokens = len(held), int(store.lengths()[held].sum())
    seps = n if store.tokenizer_spec.get("eot_id") is not None else 0  # a run's windows end each with one
    share = tokens / max(1, int(store.lengths().sum()))
    them = f"{n:,} document{'s' * (n != 1)} held out for validation ({tokens:,} tokens)"
    are = "are" if n != 1 else "is"
    if (tokens + seps - 1) // cfg.context == 0:
        print(
            f"note: the {them} {'make' if n != 1 else 'makes'} no window of {cfg.context + 1:,} tokens, so "
            "a run on this pack has nothing to validate on; pack with a larger --val-fraction or another "
            "--split-seed",
            file=sys.stderr,
        )
    elif share > 0.5:
        print(
            f"note: the {them} {are} {share:.0%} of the store's tokens, so the pack trains on "
            f"{store.n_docs - n:,} of its {store.n_docs:,} documents; a smaller --val-fraction trains on "
            "more",
            file=sys.stderr,
        )
    elif n / store.n_docs > 2 * cfg.val_fraction + 0.05:
        print(
            f"note: the {them} {are} {n:,} of the store's {store.n_docs:,} documents ({share:.0%} of its "
            f"tokens), more than --val-fraction {cfg.val_fraction:g} asks: a store of few documents holds "
            "out at least one; pack with --val-fraction 0 to train on every document (a run then holds out "
            "sequences) or give a run a data.val_store",
            file=sys.stderr,
        )


def _wanted_shards(only_shards: list[int] | None, n_shards: int) -> list[int]:
    wanted = list(range(n_shards)) if only_shards is None else list(only_shards)
    for s in wanted:
        if not 0 <= s < n_shards:
            raise UserError(
                f"shard {s} does not exist: --only-shards takes indices from 0, as the shard files are "
                f"numbered, and this store packs into {n_shards} shard(s): 0..{n_shards - 1}"
            )
    return wanted


def _sharded_job(partial: Path, fp: str, ranges) -> ShardedJob:
    """A pack's shards for the engine: ``run_shard`` each, checked by their files' records."""
    return ShardedJob(
        fn=shards_mod.run_shard,
        check=lambda s, checksum: shards_mod.check_shard(
            shards_mod.shard_file(partial, s), fp, s, ranges[s], checksum=checksum
        ),
        marker=lambda s: shards_mod.shard_file(partial, s),
        noun="shard",
        verb="pack",
        n=len(ranges),
    )


def _separator_id(store: TokenStore, cfg: PackConfig) -> int | None:
    if cfg.separator == "none":
        return None
    eot = store.tokenizer_spec.get("eot_id")
    if eot is None:
        raise UserError(
            f"the tokenizer of {store.path} has no end-of-text token to separate documents; "
            f"pass --separator none"
        )
    return int(eot)


LARGE_SHARD = 20_000  # documents: a retrieving shard past this costs more per document (docs/packing.md)


def _note_large_shards(cfg: PackConfig, ranges) -> None:
    """One line when a retrieving method packs shards far larger than the 10K-20K documents its cost is
    measured at: the index and each query grow with the shard, so 32,777 documents took 35 s in one
    shard and 13 s in four. The shard count is the user's (it changes the packing): only said."""
    if not cfg.uses_retriever or RETRIEVERS[cfg.retriever].reads_meta or not len(ranges):  # repo: cheap
        return
    largest = max(hi - lo for lo, hi in ranges)
    if largest <= LARGE_SHARD:
        return
    total = sum(hi - lo for lo, hi in ranges)
    suggest = -(-total // 15_000)
    print(
        f"note: {len(ranges)} shard{'s' * (len(ranges) != 1)} of up to {largest:,} documents: retrieval "
        f"costs more per document as a shard grows (it runs within a shard); --shards {suggest} packs "
        "shards of about 15,000 (docs/packing.md, 'Shards'), a different packing of the same documents",
        file=sys.stderr,
    )


def _shards_that_fit(cfg: PackConfig, store: TokenStore) -> PackConfig:
    """``cfg`` with at most one shard per document (a shard packs at least one), said in one line.
    The pack then records, and is fingerprinted by, the shards it packs: asking for 20 or for 10
    shards of 10 documents is the same pack, and the same command run again resumes it."""
    if cfg.shards <= store.n_docs:
        return cfg
    print(
        f"note: --shards {cfg.shards} is more than the {store.n_docs:,} documents of {store.path}: packing "
        f"{store.n_docs:,} shards of one document each (meta.json records shards {store.n_docs:,})",
        file=sys.stderr,
    )
    return dataclasses.replace(cfg, shards=store.n_docs)


def _existing_output(
    out: Path, fps: set[str], overwrite: bool, cfg: PackConfig, store: TokenStore
) -> PackReport | None:
    """Up to date when ``out`` is the packed store of a fingerprint in ``fps``; else one line naming
    what differs, unless ``overwrite``."""
    if is_packed_store(out):
        meta = json.loads((out / "meta.json").read_text())
        if meta.get("fingerprint") in fps and not overwrite:
            return PackReport(PackedStore(out), 0.0, 0, 0, up_to_date=True)
        if not overwrite:
            raise UserError(
                f"{out} already holds a different packed store ({_what_differs(meta, cfg, store)}); "
                f"choose another --out or pass --overwrite"
            )
    if out.exists() or out.is_symlink():  # --overwrite replaces a packed store only, and nothing put into one
        refuse_foreign(out, PACKED)
    return None


_BEFORE_IT = {"val_fraction": 0.0}  # settings added later whose default differs from what packs did before


def _what_differs(meta: dict, cfg: PackConfig, store: TokenStore) -> str:
    """What makes the packed store of ``meta`` another pack than ``cfg`` of ``store``: the settings
    that differ (``shards 20 there, 10 now``), else the token store, else the version that wrote it."""
    there = dict(meta.get("config") or {})
    if "context" not in there and "seq_len" in there:  # written before the rename to context
        there["context"] = int(there.pop("seq_len")) - 1
    defaults, now = to_dict(PackConfig()), to_dict(cfg)  # a setting added later: its default there
    defaults.update(_BEFORE_IT)
    said = lambda v: '""' if v == "" else str(v)
    diffs = [
        f"{k} {said(there.get(k, defaults[k]))} there, {said(v)} now"
        for k, v in now.items()
        if there.get(k, defaults[k]) != v
    ]
    if diffs:
        return "; ".join(diffs)
    old = meta.get("store") or {}
    for what, was, is_ in (
        ("content hash", old.get("content_hash"), store.hash),
        ("tokenizer hash", old.get("tokenizer_hash"), store.tokenizer_hash),
    ):
        if was != is_:
            return f"packed from another token store: {what} {str(was)[:12]} there, {is_[:12]} now"
    return f"written by contextlab {meta.get('code_version')}, format version {meta.get('version')}"


def _run(
    job: ShardedJob,
    store: TokenStore,
    cfg: PackConfig,
    ranges,
    todo: list[int],
    counts: list[int],
    partial: Path,
    fp: str,
    executor: ShardExecutor,
    progress: bool,
) -> None:
    def report(stats: dict, bar) -> None:
        if progress:
            bar.write(
                f"  shard {stats['shard'] + 1}/{len(ranges)}: {stats['n_docs']:,} documents -> "
                f"{stats['n_sequences']:,} sequences, index {stats['index_bytes'] / 2**20:,.1f} MiB, "
                f"{stats['seconds']:,.1f} s"
            )

    # Where each shard's lines of docs.jsonl start, found in one pass when the shards will read their
    # rows (domains, repo paths), so none skips the lines before its own (~0.2 s per shard at 10^6
    # documents, minutes at 10^9); the other methods do not read docs.jsonl at all.
    docs = store.path / "docs.jsonl"
    starts: list[int | None] = [None] * len(todo)
    if cfg.reads_docs_meta and docs.is_file():
        starts = shards_mod.line_starts(docs, [ranges[s][0] for s in todo])
    where = str(store.path.resolve())
    heldout = str(partial / HELDOUT_FILE) if cfg.val_fraction > 0 else None
    jobs = [  # run_shard's inputs; progress: a dense shard may draw its embedding bar (in this process)
        (where, cfg, s, *ranges[s], str(shards_mod.shard_file(partial, s)), fp, at, progress, heldout)
        for s, at in zip(todo, starts)
    ]
    total = sum(counts)  # the documents the shards pack (held-out ones are not)
    job.run(executor, jobs, total, report, progress)


_FILES = {
    "entries.npy": "int64 (n_entries, 3): document, begin, end",
    "seq_offsets.npy": "int64 (n_sequences + 1)",
    "similarity.npy": "float32 (n_entries), NaN = not retrieved",
}
_HELDOUT_DOC = "int64 (n): the documents held out for validation, sorted; none of them is packed"


def _store_record(store: TokenStore, out: Path) -> dict:
    """What meta.json records of the token store a packed store at ``out`` was made from: its path,
    also relative to ``out`` when the two share a folder below the root (a project folder moved
    whole keeps its packed stores working; ``PackedStore.store_places``), and its hashes."""
    where, out = store.path.resolve(), out.resolve()
    shared = os.path.commonpath([where, out]) != where.anchor
    return {
        "path": str(where),
        **({"relative_path": os.path.relpath(where, out)} if shared else {}),
        "content_hash": store.hash,
        "tokenizer_hash": store.tokenizer_hash,
        "tokenizer": store.tokenizer_spec.get("name"),
        "n_docs": store.n_docs,
        "n_tokens": store.n_tokens,
    }


def _finalize(
    store: TokenStore,
    cfg: PackConfig,
    ranges,
    partial: Path,
    stats: list[dict],
    fp: str,
    sep_id: int | None,
    out: Path,
) -> None:
    """Write the arrays, config.toml and, last, meta.json (its presence marks the work done).

    The arrays are the shards' arrays one after another, written a shard at a time: the driver
    never holds more than one shard's (concatenating them all cost ~3 copies of entries.npy, 24
    bytes per entry, i.e. ~70 GB at 10^9 documents). ``stats``: every shard's, from its record."""
    files = [shards_mod.shard_file(partial, s) for s in range(len(ranges))]
    n_entries, n_seq = sum(st["n_entries"] for st in stats), sum(st["n_sequences"] for st in stats)

    def each(name: str):  # one shard's array at a time, checked against its record
        for f, st in zip(files, stats):
            rows = st["n_sequences"] + 1 if name == "seq_offsets" else st["n_entries"]
            yield shards_mod.shard_array(f, name, rows)

    counts = []  # per shard: (full sequences, tokens), measured as its entries are written

    def entries_measured():
        for (lo, hi), entries, offsets in zip(ranges, each("entries"), each("seq_offsets")):
            local = entries - np.array([lo, 0, 0])  # the shard's documents, numbered from its first
            doc_len = np.diff(np.asarray(store.offsets[lo : hi + 1]))
            lens = sequence_lengths(local, offsets, doc_len, sep_id is not None, cfg.row_len)
            counts.append((int((lens == cfg.row_len).sum()), int(lens.sum())))
            yield entries

    def seq_offsets():  # each shard's offsets past its first, moved by the entries before it
        yield np.zeros(1, np.int64)
        base = 0
        for offsets in each("seq_offsets"):
            yield offsets[1:] + base
            base += int(offsets[-1])

    atomic_write_npy(partial / "entries.npy", np.int64, (n_entries, 3), entries_measured())
    atomic_write_npy(partial / "seq_offsets.npy", np.int64, (n_seq + 1,), seq_offsets())
    atomic_write_npy(partial / "similarity.npy", np.float32, (n_entries,), each("similarity"))
    n_full, n_tokens = (sum(c) for c in zip(*counts))
    save_toml(to_dict(cfg), partial / "config.toml")
    heldout = _heldout_record(store, cfg, partial)
    meta = {
        "format": PACKED_FORMAT,
        "version": FORMAT_VERSION,
        "code_version": __version__,
        "config": to_dict(cfg),
        "fingerprint": fp,
        "store": _store_record(store, out),
        "separator_id": sep_id,
        "n_sequences": n_seq,
        "n_entries": n_entries,
        "row_len": cfg.row_len,  # internal: tokens per sequence (context + 1)
        "n_full_sequences": n_full,
        "n_tokens": n_tokens,
        "dropped_tokens": int(sum(s["dropped_tokens"] for s in stats)),
        "dropped_near_duplicates": int(sum(len(s["dropped_near_duplicates"]) for s in stats)),
        "dropped_near_duplicate_tokens": _tokens_of(
            store, [d for s in stats for d in s["dropped_near_duplicates"]]
        ),
        "index_bytes_max": int(max(s["index_bytes"] for s in stats)),
        "shards": stats,
        **({"heldout": heldout} if heldout else {}),
        "files": {**_FILES, **({HELDOUT_FILE: _HELDOUT_DOC} if heldout else {})},
    }
    atomic_write_json(partial / "meta.json", meta)


def _tokens_of(store: TokenStore, docs: list[int]) -> int:
    """The tokens of the documents ``docs`` of ``store``."""
    return int(np.asarray(store.lengths())[docs].sum()) if docs else 0


def _heldout_record(store: TokenStore, cfg: PackConfig, partial: Path) -> dict | None:
    """What meta.json says of the held-out documents (None when none is): how they were drawn, how
    many and their tokens."""
    if cfg.val_fraction == 0:
        return None
    ids = np.load(partial / HELDOUT_FILE)
    tokens = int(store.lengths()[ids].sum()) if len(ids) else 0
    return {
        "val_fraction": cfg.val_fraction,
        "split_seed": cfg.split_seed,
        "documents": len(ids),
        "tokens": tokens,
    }


def _finalized(partial: Path, fp: str) -> bool:
    """``partial`` holds a finished pack of fingerprint ``fp`` (its meta.json, written last)."""
    try:
        return json.loads((partial / "meta.json").read_text()).get("fingerprint") == fp
    except (OSError, ValueError, AttributeError):
        return False


def _complete(partial: Path, out: Path, overwrite: bool) -> None:
    """Clear the work files out of a finalized ``partial`` and rename it to ``out``. Every step
    can be repeated, so a run killed anywhere in here is finished by the next one."""
    shutil.rmtree(partial / "shards", ignore_errors=True)
    for stray in partial.glob(".*.tmp"):  # a temporary file of a write that a kill interrupted
        stray.unlink()
    (partial / "progress.json").unlink(missing_ok=True)
    replace_dir(partial, out, overwrite=overwrite, kind=PACKED)
