"""Corpus -> token store: parallel, resumable, atomic.

The work is split three ways so both cores stay busy: a reader thread walks the source
and hands over batches of about a MB of text; long documents are cut where the tokenizer
proves a cut changes no id, and the tokenizer encodes all pieces of a batch with its
native thread pool (Rust in HF ``tokenizers`` and tiktoken, so the GIL is released); the
main thread appends the ids to the partial store. Memory stays flat: at most a couple of
batches are alive at once, whatever the corpus size; a file past ``--long-doc-mb`` is
streamed through the tokenizer and the writer in pieces (``ingest_long``). Every file the
source leaves out is named, with its reason, in ``OUT/skipped.jsonl``.

Resume: everything is written to ``OUT.partial/``. After each batch the data files are
fsynced and ``progress.json`` records how many source documents were consumed and the
committed file sizes. A run killed at any moment restarts from that record: files are
truncated back to the committed sizes and the source is re-walked, skipping (without
tokenizing) the documents already stored. So no document is lost or stored twice. The
record also holds a fingerprint of the source files, options and tokenizer: resuming with
anything different is refused. When the source is exhausted the partial directory is
finalized (``store.finalize_store``, restartable from any point: a kill while finalizing is
finished by the next run) and renamed to OUT in one step.

One writer per store: the whole ingest holds ``.OUT.lock`` (``store.output_lock``), so a
second ingest into the same --out is refused with one line naming the first. A full disk
ends with one line; the torn batch is cut off the partial files and the rerun resumes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from contextlab.config import opt, save_toml, to_dict
from contextlab.data.heap import steady_heap
from contextlab.data.ingest_long import add_streamed, batches
from contextlab.data.source_bytes import source_bytes
from contextlab.data.source_files import LongText
from contextlab.data.source_rows import NoRowHasField
from contextlab.data.sources import Document, SourceOptions, fingerprint_options, open_source
from contextlab.data.store import (
    StoreWriter,
    TokenStore,
    WriterState,
    dtype_for_vocab,
    finalize_store,
    holds_output_lock,
    is_store,
    pending_finalize,
)
from contextlab.data.store_write import refuse_non_store
from contextlab.data.tokenizer_base import tokenizer_threads
from contextlab.data.tokenizer_spec import SPECS_HELP, parse_spec, spec_path
from contextlab.data.tokenizers import Tokenizer, load_saved_tokenizer, load_tokenizer
from contextlab.errors import UserError
from contextlab.io import atomic_write_json, atomic_write_text, open_partial, partial_dir
from contextlab.outputs import refuse_non_folder

SKIPPED_FILE = "skipped.jsonl"  # in the store: every file (or row) the source left out, and why


@dataclass
class IngestConfig:
    """How a corpus becomes a token store."""

    tokenizer: str = opt("byte", f"tokenizer spec: {SPECS_HELP}")
    min_tokens: int = opt(1, "skip documents with fewer tokens than this (they are counted)")
    max_tokens: int = opt(0, "skip documents with more tokens than this; 0 = no limit")
    batch_mb: float = opt(1.0, "MB of text per tokenizer batch; progress is committed after each")
    bpe_sample_mb: float = opt(0.0, "train bpe:N on at most this many MB of the source; 0 = all of it")
    source: SourceOptions = opt(factory=SourceOptions, help="how the source is read")

    def __post_init__(self) -> None:
        if self.min_tokens < 0 or self.max_tokens < 0:
            raise ValueError("min_tokens and max_tokens must be >= 0")
        if self.max_tokens and self.max_tokens < self.min_tokens:
            raise ValueError(f"max_tokens ({self.max_tokens}) < min_tokens ({self.min_tokens})")
        if self.batch_mb <= 0:
            raise ValueError("batch_mb must be > 0")


@dataclass
class IngestReport:
    """What an ingest did, for the console and for tests."""

    store: TokenStore
    seconds: float
    bytes_read: int
    resumed_from_docs: int
    skipped_short: int
    skipped_long: int
    up_to_date: bool = False

    @property
    def mb_per_s(self) -> float:
        return self.bytes_read / 1e6 / max(self.seconds, 1e-9)


def resolve_tokenizer_spec(spec: str) -> str:
    """``store:STORE`` means "the tokenizer of that store" (which must be a token store): its
    ``dir:`` spec; any other spec is checked (``tokenizer_spec``) and returned as it is."""
    parsed = parse_spec(spec)
    if parsed.kind == "store":
        store = TokenStore(parsed.arg)
        return f"dir:{store.path / 'tokenizer'}"
    return spec


def _ingest_inputs(call: dict) -> list:
    """The paths an ingest reads: its source, when local, and the tokenizer's folder or store."""
    source = call["source"]
    tokenizer = spec_path(getattr(call.get("config"), "tokenizer", "byte"))
    return [source if isinstance(source, (str, Path)) else None, tokenizer]


@holds_output_lock("token store", inputs=_ingest_inputs)
def ingest(
    source: str | Path,
    out: str | Path,
    config: IngestConfig | None = None,
    *,
    overwrite: bool = False,
    progress: bool = True,
    store_documents: Callable[..., dict] | None = None,
    notes: bool = True,
) -> IngestReport:
    """Tokenize ``source`` into a token store at ``out`` (resuming an unfinished run);
    ``store_documents``: how, if not by ``tokenize_documents`` in this process
    (``ingest_parts.in_parts``: in parts, on the shard engine's executors). ``notes``: print the
    source's notes (its splits, files that look like its own notes, one file of many documents),
    which name ``data ingest``'s flags; a caller with other options says its own.

    One ingest at a time writes ``out`` (a second one is refused, naming the first). A full
    disk ends with one line; the partial store keeps what was committed (the torn batch is cut
    off) and the same command resumes once there is space.
    """
    config = config or IngestConfig()
    out = Path(out)
    try:
        return _ingest(source, out, config, overwrite, progress, store_documents or tokenize_documents, notes)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise UserError(
            f"no space left on the disk while writing {exc.filename or partial_dir(out)} ({exc.strerror}); "
            f"free some space and run the same command again: it resumes from the last committed batch "
            f"kept in {partial_dir(out)}"
        ) from None


def refuse_store_source(source) -> None:
    """One line for a SOURCE that is a token or packed store: ingesting it read its meta.json, docs.jsonl
    and config.toml as documents and exited 0."""
    from contextlab.data.store_meta import what_it_is

    what = what_it_is(source)
    if what:
        raise UserError(
            f"{source} is {what}; its tokens are ingested already: give the text it was made from "
            "as SOURCE, or `--tokenizer store:STORE` to ingest other text with its tokenizer"
        )


def _ingest(
    source, out: Path, config: IngestConfig, overwrite: bool, progress: bool, store_documents, notes: bool
):
    """``ingest`` without the lock and the full-disk message."""
    refuse_non_folder(out)
    refuse_store_source(source)
    src = open_source(source, config.source)
    for note in (
        (
            src.split_note(),
            src.provenance_note(),
            src.rows_as_text_note(),
            src.table_as_text_note(),
            src.one_document_note(),
            *src.pattern_notes(),
        )
        if notes
        else ()
    ):
        if note is not None:
            print(note)
    src.check_encoding()  # strict: every undecodable file named before any work is done
    fingerprint = _fingerprint(src, config)
    if out.exists():
        done = _existing_output(out, fingerprint, overwrite, src, config)
        if done is not None:
            return done
    pending = pending_finalize(partial_dir(out))
    if pending is not None and pending.get("ingest_fingerprint") == fingerprint:
        print(f"finishing the interrupted ingest into {out}")
        finalize_store(partial_dir(out), out, pending, overwrite=overwrite)
        return _report_of(TokenStore(out), up_to_date=False)
    resolve_tokenizer_spec(config.tokenizer)  # a bad spec is one line before OUT.partial exists
    partial, record = _open_partial(out, fingerprint, overwrite)
    start = time.perf_counter()
    resumed_from = int(record["source_pos"])
    try:
        tokenizer = _partial_tokenizer(partial, record, config, src)
        counts = store_documents(partial, record, tokenizer, src, config, source, out, progress)
    except UserError as exc:
        # nothing a rerun could resume (an ingest in parts keeps its finished parts: its error
        # says so), or a field no row has (the fixed command is another ingest)
        nothing = resumed_from == 0 and int(record.get("source_pos", 0)) == 0 and not _parts_done(partial)
        if isinstance(exc, NoRowHasField) or nothing:
            shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(partial / "parts", ignore_errors=True)  # an --ray run's work files
    meta = _store_meta(tokenizer, src, config, counts, fingerprint)
    save_toml({"source": str(source), **to_dict(config)}, partial / "config.toml")
    finalize_store(partial, out, meta, overwrite=overwrite)
    return IngestReport(
        store=TokenStore(out),
        seconds=time.perf_counter() - start,
        bytes_read=int(src.stats.bytes_read),
        resumed_from_docs=resumed_from,
        skipped_short=counts["skipped_short"],
        skipped_long=counts["skipped_long"],
    )


def _open_partial(out: Path, fingerprint: str, overwrite: bool) -> tuple[Path, dict]:
    """The partial store directory and its progress record: the one to resume, or a fresh one."""
    return open_partial(
        out,
        fresh_record(fingerprint),
        overwrite=overwrite,
        has_work=lambda folder, old: (
            (old is not None and int(old.get("source_pos", 0)) > 0)
            or pending_finalize(folder) is not None
            or _parts_done(folder)
        ),
        what="ingest of a different source or config",
    )


def _parts_done(partial: Path) -> bool:
    """Whether an ingest in parts (``--ray``) has finished parts in ``partial``: work a rerun of other
    input would throw away (it started over without a word; a one-process ingest refuses)."""
    from contextlab.data.ingest_parts import PARTS

    return any((partial / PARTS).glob("part_*.json"))


def tokenize_documents(
    partial: Path,
    record: dict,
    tokenizer: Tokenizer,
    src,
    config: IngestConfig,
    source: str | Path,
    out: Path,
    progress: bool,
    empty_ok: bool = False,
) -> dict:
    """Tokenize the documents not stored yet into ``partial``, committing ``record`` after each
    batch; return the filter counts. Raises when no document is left, unless ``empty_ok``.
    The one-process ingest's loop, and each part's (``ingest_parts``)."""
    state = WriterState(**record["writer"])
    writer = StoreWriter(partial, dtype_for_vocab(tokenizer.vocab_size), state)
    counts = dict(record["counts"])
    resumed_from = int(record["source_pos"])
    if resumed_from:
        print(f"resuming ingest into {out}: {state.n_docs:,} documents already stored")
    piece_chars = max(1 << 16, int(config.batch_mb * 1e6) // (4 * tokenizer_threads()))
    with steady_heap(), contextlib.ExitStack() as closing:
        closing.callback(writer.close)
        pos = resumed_from
        bar = _progress_bar(progress, src, state)
        closing.callback(bar.close)  # also on an error, so its line is cleared before the message
        for batch in _prefetch(batches(iter(src), resumed_from, int(config.batch_mb * 1e6))):
            if isinstance(batch[0].text, LongText):
                step = lambda _: bar.update(src.stats.bytes_read - bar.n)
                add_streamed(writer, batch[0], tokenizer, piece_chars, config, counts, step)
            else:
                ids = tokenizer.encode_pieces([d.text for d in batch], piece_chars)
                _add_filtered(writer, batch, ids, config, counts)
            pos += len(batch)
            durable = writer.flush()
            record.update(source_pos=pos, writer=vars(durable), counts=counts)
            atomic_write_json(partial / "progress.json", record)
            bar.update(src.stats.bytes_read - bar.n)
        bar.close()
    atomic_write_text(partial / SKIPPED_FILE, "".join(json.dumps(e) + "\n" for e in src.skipped))
    if writer.state.n_docs == 0 and not empty_ok:  # nothing worth resuming: a rerun starts afresh
        shutil.rmtree(partial, ignore_errors=True)
        raise UserError(
            f"no documents left in {source} after filtering ({counts['skipped_short']} shorter than "
            f"--min-tokens {config.min_tokens}, {counts['skipped_long']} longer than --max-tokens); "
            f"relax the filters"
        )
    return counts


def _add_filtered(
    writer: StoreWriter, batch: list[Document], ids, config: IngestConfig, counts: dict
) -> None:
    """Add the documents of a batch within the length filters; count the others in ``counts``."""
    for doc, arr in zip(batch, ids):
        n = len(arr)
        if n < max(config.min_tokens, 1):
            counts["skipped_short"] += 1
        elif config.max_tokens and n > config.max_tokens:
            counts["skipped_long"] += 1
        else:
            writer.add(arr, doc.meta)


def _store_meta(tokenizer: Tokenizer, src, config: IngestConfig, counts: dict, fingerprint: str) -> dict:
    """The finished store's meta.json entries that describe the ingest."""
    return {
        "tokenizer": tokenizer.spec(),
        "dtype": dtype_for_vocab(tokenizer.vocab_size).name,
        "source": src.describe(),
        "source_stats": src.stats.as_dict(),
        "filters": {"min_tokens": config.min_tokens, "max_tokens": config.max_tokens, **counts},
        "ingest_fingerprint": fingerprint,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# ---------------------------------------------------------------------------- helpers


def source_fingerprint(source: str | Path, config: IngestConfig) -> str:
    """The ``ingest_fingerprint`` a store ingested now from ``source`` with ``config`` would have: a
    store whose own differs was made from other files or options (one stat per file)."""
    return _fingerprint(open_source(source, config.source), config)


def _fingerprint(src, config: IngestConfig) -> str:
    cfg = {**to_dict(config), "source": fingerprint_options(config.source)}
    blob = json.dumps({"source": src.fingerprint(), "config": cfg}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _existing_output(
    out: Path, fingerprint: str, overwrite: bool, src, config: IngestConfig
) -> IngestReport | None:
    """An up-to-date store is returned as is; another store needs --overwrite, naming what differs; a
    folder holding anything else is refused either way (``refuse_non_store``: --overwrite replaces
    only a token store)."""
    if is_store(out):
        store = TokenStore(out)
        if store.meta.get("ingest_fingerprint") == fingerprint and not overwrite:
            return _report_of(store, up_to_date=True)
        if not overwrite:
            raise UserError(
                f"{out} already holds a different token store ({_ingest_differs(store, src, config)}); "
                "choose another --out or pass --overwrite"
            )
    if out.exists() or out.is_symlink():  # a file, a link, another folder, a store holding a user's files
        refuse_non_store(out)
    return None


def _ingest_differs(store: TokenStore, src, config: IngestConfig) -> str:
    """What makes the store at hand another ingest than this one, in words: the source, the tokenizer,
    the source options that differ (``exclude [] there, ['SOURCE.*'] now``), else the files."""
    old = store.meta.get("source") or {}
    here = str(Path(src.path).resolve())
    diffs = [f"source {old.get('path')} there, {here} now"] if str(old.get("path")) != here else []
    there, now = old.get("options") or {}, fingerprint_options(config.source)
    diffs += [
        f"{k} {there.get(k)!r} there, {v!r} now" for k, v in now.items() if k in there and there[k] != v
    ]
    if diffs:
        return "; ".join(diffs)
    same = f"the same source ({old.get('path')}) and source options"
    there, now = store.tokenizer_spec, _tokenizer_now(config.tokenizer)
    if now is None:  # a BPE trained on the text now (or one not loaded here): not known to be the same
        return (
            f"{same}: its tokenizer ({there.get('name')} there), its files or another setting (e.g. "
            "--batch-mb) differ"
        )
    if (there.get("name"), there.get("hash")) != now:
        return f"{same}; its tokenizer differs: {there.get('name')} there, {now[0]} now"
    return (
        f"{same} and tokenizer ({now[0]}): its files differ (one added, removed or edited since it was "
        "ingested) or another setting (e.g. --batch-mb)"
    )


def _tokenizer_now(spec: str) -> tuple[str, str] | None:
    """(name, hash) of the tokenizer a spec gives, for the line saying what differs (None for ``bpe:N``,
    trained on the text, and for one that cannot be loaded: the ingest itself says why)."""
    if parse_spec(spec).kind == "bpe":
        return None
    try:
        tok = load_tokenizer(resolve_tokenizer_spec(spec))
    except (UserError, OSError, ValueError):
        return None
    return tok.spec().get("name"), tok.spec().get("hash")


def _report_of(store: TokenStore, up_to_date: bool) -> IngestReport:
    """The report of an ingest that had nothing left to tokenize."""
    return IngestReport(
        store=store,
        seconds=0.0,
        bytes_read=0,
        resumed_from_docs=store.n_docs,
        skipped_short=store.meta["filters"].get("skipped_short", 0),
        skipped_long=store.meta["filters"].get("skipped_long", 0),
        up_to_date=up_to_date,
    )


def fresh_record(fingerprint: str) -> dict:
    """The progress record of an ingest that has stored nothing yet."""
    return {
        "fingerprint": fingerprint,
        "source_pos": 0,
        "writer": vars(WriterState()),
        "counts": {"skipped_short": 0, "skipped_long": 0},
        "tokenizer_saved": False,
    }


def _partial_tokenizer(partial: Path, record: dict, config: IngestConfig, src) -> Tokenizer:
    """Load the tokenizer saved in the partial store, or build (train) and save it."""
    tok_dir = partial / "tokenizer"
    if record.get("tokenizer_saved"):
        return load_saved_tokenizer(tok_dir)
    spec = resolve_tokenizer_spec(config.tokenizer)
    texts = _sample_texts(src, config.bpe_sample_mb) if spec.startswith("bpe:") else None
    tokenizer = load_tokenizer(spec, texts=texts)
    if tok_dir.exists():
        shutil.rmtree(tok_dir)
    tokenizer.save(tok_dir)
    record["tokenizer_saved"] = True
    atomic_write_json(partial / "progress.json", record)
    return tokenizer


def _sample_texts(src, sample_mb: float) -> Callable[[], Iterable[str]]:
    def texts() -> Iterator[str]:
        budget = sample_mb * 1e6 if sample_mb > 0 else float("inf")
        seen = 0
        for doc in src:
            if seen >= budget:
                return
            seen += len(doc.text)
            if isinstance(doc.text, LongText):
                yield from doc.text.chunks()
            else:
                yield doc.text

    return texts


def _prefetch(it: Iterator, depth: int = 2) -> Iterator:
    """Run ``it`` in a reader thread, ``depth`` items ahead; errors surface in the caller."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def run() -> None:
        try:
            for item in it:
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(end)
        except BaseException as exc:  # handed to the consumer
            q.put(exc)

    thread = threading.Thread(target=run, name="contextlab-ingest-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is end:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


def _progress_bar(enabled: bool, src, state: WriterState):
    from contextlab import bars

    return bars.bar(
        total=source_bytes(src),  # counted in bytes_read: see tokenize_documents
        unit="B",
        unit_scale=True,
        desc="ingest",
        disable=None if enabled else True,
        dynamic_ncols=True,
        leave=False,
    )
