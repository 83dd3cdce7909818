"""Ingest in parts (``contextlab data ingest --ray``): the one-process ingest's store, built in parallel.

The source's files (sorted, as the source walks them) are cut into contiguous parts balanced
by bytes (``shards.ranges``). Each part is a shard of the engine's contract (``data.shards``):
``ingest_part`` runs the one-process ingest's own loop (``ingest.tokenize_documents``: batches,
long documents, filters, per-batch commits) into ``OUT.partial/parts/part_NNNNN/`` and, last,
writes its done marker ``part_NNNNN.json`` (the ingest's fingerprint; the part's counts, writer
state and source statistics; a checksum of its files). Any executor can run it (Ray tasks with
``--ray``). The driver then concatenates the parts in order (token ids, offsets shifted by the
tokens before them, document lines, skipped files) into ``OUT.partial`` and finalizes it exactly
as the one-process ingest does, so the store is byte for byte the same (the ``created`` time in
meta.json aside).

Resume: a part whose marker checks out is never run again, a part whose marker does not (its
files changed, another ingest's) is named and ingested afresh, and a part cut short resumes from
its own last committed batch; once assembled, ``progress.json`` says so and a rerun only
finalizes.
Trade-offs: the driver copies the parts' bytes once more (file to file on the shared
filesystem, never through Ray); a single-file source (one text file, one JSONL, a saved HF
dataset, whose rows are numbered across its files) is one part, so it gains nothing.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
from pathlib import Path

import numpy as np

from contextlab.data.ingest import IngestConfig, fresh_record, tokenize_documents
from contextlab.data.shards import ShardedJob, finished_stats, shards_to_run
from contextlab.data.shards.done_markers import (
    check_record,
    done_record,
    files_checksum,
    read_json_marker,
    write_json_marker,
)
from contextlab.data.shards.ranges import shard_ranges
from contextlab.data.source_files import domain_depth
from contextlab.data.sources import Source, SourceOptions
from contextlab.data.store import WriterState, dtype_for_vocab
from contextlab.data.tokenizer_base import set_tokenizer_threads
from contextlab.data.tokenizers import Tokenizer, load_saved_tokenizer
from contextlab.errors import UserError
from contextlab.io import atomic_write_json, atomic_write_text

PARTS = "parts"  # in OUT.partial: part_NNNNN/ (a part's partial store) and part_NNNNN.json (it is done)
PART_FILES = ("tokens.bin", "offsets.i64", "docs.jsonl", "skipped.jsonl")  # what a part's checksum covers
CHUNK = 1 << 22  # bytes (or offsets) copied at a time while assembling


class PartSource(Source):
    """Some consecutive files of a source, read exactly as the whole source reads them."""

    def __init__(self, given: str, options: SourceOptions, files: list[tuple[str, Path]]):
        super().__init__(given, options)
        self._part_files = files

    def files(self):
        return list(self._part_files), []  # the walk's skipped entries belong to the whole source

    def __iter__(self):
        try:
            yield from super().__iter__()
        except UserError as exc:  # a part with no documents is fine; the whole source is checked
            if self.stats.documents or str(exc) != self._empty_message():
                raise


def split_files(src: Source, n_parts: int) -> list[list[tuple[str, Path]]]:
    """The source's files in ``n_parts`` consecutive groups of about equal bytes."""
    files, _ = src.files()
    if src.kind in ("file", "hf-dataset") or len(files) <= 1:
        return [files]
    sizes = np.array([max(1, path.stat().st_size) for _, path in files], dtype=np.int64)
    return [files[lo:hi] for lo, hi in shard_ranges(sizes, n_parts)]


def part_options(src: Source) -> SourceOptions:
    """The whole source's options, with the folder depth of its domains fixed for every part (with
    ``--doc-start`` and no ``--domain-depth`` a document's domain is its file, whatever the depth)."""
    if src.kind != "folder" or src.options.domain_depth or src.options.doc_start is not None:
        return src.options
    depth = domain_depth([rel for rel, _ in src.files()[0]], 0)
    return dataclasses.replace(src.options, domain_depth=depth)


def part_dir(partial: Path, index: int) -> Path:
    return Path(partial) / PARTS / f"part_{index:05d}"


def part_marker(partial: Path, index: int) -> Path:
    """The done marker of part ``index``, beside its folder."""
    return part_dir(partial, index).with_suffix(".json")


def check_part(
    partial: Path, index: int, fingerprint: str, checksum: bool = True
) -> tuple[dict | None, str | None]:
    """The engine's check of part ``index``'s done marker: (its stats, None) when done; (None, why)
    when the marker is unusable; (None, None) when there is none (``done_markers.check_record``)."""
    record, why = read_json_marker(part_marker(partial, index))
    if record is None:
        return None, why
    sums = (lambda: files_checksum(part_dir(partial, index) / f for f in PART_FILES)) if checksum else None
    return check_record(record, fingerprint, {"part": index}, sums)


def ingest_part(
    source: str,
    options: SourceOptions,
    config: IngestConfig,
    index: int,
    files: list[tuple[str, Path]],
    partial: str,
    fingerprint: str,
    threads: int = 0,
    count=None,
) -> dict:
    """Ingest one part into ``partial/parts/`` and write its done marker (the shard function of
    an ingest in parts: runs anywhere the filesystem is shared), tokenizing on ``threads`` threads
    (0: one per core). Returns the part's stats; ``count(n)`` gets the documents read. A task of a
    killed driver may still be on it: the part's lock makes this one wait for it."""
    if threads:
        set_tokenizer_threads(threads)
    (Path(partial) / PARTS).mkdir(exist_ok=True)
    with open(part_dir(Path(partial), index).with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released by the kernel if the holder dies
        done, why = check_part(Path(partial), index, fingerprint)
        if done is None:  # resumed from its own last batch, or afresh when its marker was unusable
            done = _ingest_part(
                source, options, config, index, files, Path(partial), fingerprint, why is None
            )
    if count is not None:
        count(done["n_docs"])
    return done


def _ingest_part(
    source, options, config, index, files, partial: Path, fingerprint: str, resume: bool
) -> dict:
    """``ingest_part`` under its lock, when the part is not done yet (``resume``: from its own
    last committed batch, when its progress record is of this ingest)."""
    folder = part_dir(partial, index)
    try:
        record = json.loads((folder / "progress.json").read_text()) if resume else None
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict) or record.get("fingerprint") != fingerprint:
        shutil.rmtree(folder, ignore_errors=True)
        record = fresh_record(fingerprint)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = load_saved_tokenizer(partial / "tokenizer")
    src = PartSource(source, options, files)
    counts = tokenize_documents(folder, record, tokenizer, src, config, source, folder, False, True)
    stats = {
        "part": index,
        "n_docs": src.stats.documents,
        "writer": record["writer"],
        "counts": counts,
        "source_stats": src.stats.as_dict(),
    }
    write_json_marker(
        part_marker(partial, index),
        done_record(fingerprint, stats, files_checksum(folder / f for f in PART_FILES)),
    )
    return stats


def in_parts(executor, n_parts: int):
    """The ``store_documents`` of ``ingest.ingest`` that runs ``n_parts`` parts on ``executor``."""

    def store_documents(partial, record, tokenizer, src, config, source, out, progress) -> dict:
        return store_parts(partial, record, tokenizer, src, config, progress, executor, n_parts)

    return store_documents


def store_parts(
    partial: Path,
    record: dict,
    tokenizer: Tokenizer,
    src: Source,
    config: IngestConfig,
    progress: bool,
    executor,
    n_parts: int,
) -> dict:
    """``ingest.tokenize_documents`` done in parts by ``executor``: the same files in ``partial``
    (and ``src.stats`` / ``src.skipped`` as a whole iteration leaves them); returns the counts."""
    fp = record["fingerprint"]
    if not record.get("assembled"):
        groups, options = split_files(src, n_parts), part_options(src)
        job = ShardedJob(
            fn=ingest_part,
            check=lambda i, checksum: check_part(partial, i, fp, checksum),
            marker=lambda i: part_marker(partial, i),
            noun="part",
            verb="ingest",
        )
        todo = shards_to_run(job, list(range(len(groups))))
        if progress and len(todo) < len(groups):
            print(f"resuming ingest: {len(groups) - len(todo)} of {len(groups)} part(s) already ingested")
        threads = part_threads(executor) if len(todo) > 1 else 0  # a part alone has the cores
        jobs = [(src.given, options, config, i, groups[i], str(partial), fp, threads) for i in todo]
        job.run(executor, jobs, None, lambda stats, bar: None, progress)
        parts = finished_stats(job, list(range(len(groups))), partial)
        _assemble(partial, parts, tokenizer, src, record)
        shutil.rmtree(partial / PARTS, ignore_errors=True)
    src.stats.reset()
    for name, value in record["source_stats"].items():
        setattr(src.stats, name, value)
    if record["writer"]["n_docs"] == 0:  # nothing worth resuming: a rerun starts afresh
        shutil.rmtree(partial, ignore_errors=True)
        raise UserError(
            src._empty_message()
            if not src.stats.documents
            else f"no documents left in {src.given} after filtering ({record['counts']['skipped_short']} "
            f"shorter than --min-tokens {config.min_tokens}, {record['counts']['skipped_long']} longer "
            "than --max-tokens); relax the filters"
        )
    return dict(record["counts"])


def part_threads(executor) -> int:
    """The tokenizer threads of a part: the CPUs its Ray task reserves, one in a pool of local
    processes (a pool of processes each on every core ran cores × workers threads), else 0 (this
    process, one per core)."""
    if hasattr(executor, "cpus_per_task"):
        return max(1, int(executor.cpus_per_task))
    return 1 if getattr(executor, "workers", 1) > 1 else 0


def _assemble(partial: Path, parts: list[dict], tokenizer: Tokenizer, src: Source, record: dict) -> None:
    """Concatenate the parts (``parts``: their stats) into ``partial``'s store files, then commit
    ``record`` (assembled)."""
    itemsize = dtype_for_vocab(tokenizer.vocab_size).itemsize
    state = WriterState()
    names = ("tokens.bin", "offsets.i64", "docs.jsonl")
    with (
        open(partial / names[0], "wb") as tokens,
        open(partial / names[1], "wb") as offsets,
        open(partial / names[2], "wb") as docs,
    ):
        for i, part in enumerate(parts):
            folder, w = part_dir(partial, i), part["writer"]
            _copy(folder / names[0], tokens, w["n_tokens"] * itemsize)
            # a part whose every document was filtered out has empty files (mmap refuses them)
            ends = (
                np.memmap(folder / names[1], dtype=np.int64, mode="r", shape=(w["n_docs"],))
                if w["n_docs"]
                else ()
            )
            for lo in range(0, w["n_docs"], CHUNK):
                offsets.write((ends[lo : lo + CHUNK] + state.n_tokens).astype(np.int64).tobytes())
            _copy(folder / names[2], docs, w["docs_bytes"])
            state = WriterState(**{k: v + w[k] for k, v in vars(state).items()})
        for fh in (tokens, offsets, docs):
            fh.flush()
            os.fsync(fh.fileno())
    _merge_source_stats(src, parts, partial)
    counts = {k: sum(p["counts"][k] for p in parts) for k in parts[0]["counts"]}
    record.update(
        source_pos=src.stats.documents,
        writer=vars(state),
        counts=counts,
        source_stats=src.stats.as_dict(),
        assembled=True,
    )
    atomic_write_json(partial / "progress.json", record)


def _merge_source_stats(src: Source, parts: list[dict], partial: Path) -> None:
    """``src.stats`` and ``src.skipped`` as one whole iteration leaves them (and skipped.jsonl)."""
    src.stats.reset()  # the walk's skipped files first, then every part's, in order
    _, src.skipped = src.files()
    for entry in src.skipped:
        src._count_skip(entry["reason"])
    for i, part in enumerate(parts):
        for name, value in part["source_stats"].items():
            setattr(src.stats, name, getattr(src.stats, name) + value)
        text = (part_dir(partial, i) / "skipped.jsonl").read_text(encoding="utf-8")
        src.skipped += [json.loads(line) for line in text.splitlines() if line]
    atomic_write_text(partial / "skipped.jsonl", "".join(json.dumps(e) + "\n" for e in src.skipped))


def _copy(path: Path, out, n_bytes: int) -> None:
    """Copy the first ``n_bytes`` of ``path`` (its committed part) to the open file ``out``."""
    with open(path, "rb") as f:
        while n_bytes > 0:
            block = f.read(min(CHUNK, n_bytes))
            if not block:
                raise UserError(f"{path} is shorter than its record says; delete {path.parent} and run again")
            out.write(block)
            n_bytes -= len(block)
