"""Writing a token store: the resumable partial writer, restartable finalize, one writer at a time.

``StoreWriter`` appends documents to ``OUT.partial/`` and commits after every batch (fsync),
so a killed ingest resumes without losing or duplicating a document; a failed write (a full
disk) cuts the files back to the last commit. ``finalize_store`` turns the partial directory
into the store in steps that can each be repeated, so a kill while finalizing is finished by
calling it again. ``output_lock`` keeps a second writer off the same OUT.

Trade-off: finalizing writes ``offsets.npy`` and reads the whole store once for its content
hash before the rename; a step log (``finalize.json``) costs one small file but makes every
point of that sequence resumable.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from contextlab import FORMAT_VERSION, __version__
from contextlab.data.store_meta import has_format
from contextlab.errors import UserError
from contextlab.io import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_npy,
    exclusive_lock,
    fsync_dir,
    remove_stale_staging,
    sibling,
)
from contextlab.outputs import OutputKind, refuse_foreign, refuse_overlap, replace_dir

STORE_FORMAT = "contextlab-token-store"


def is_token_store(path: Path) -> bool:
    """Whether ``path`` holds a token store (its meta.json's format); ``own`` for ``replace_dir``."""
    return has_format(path, STORE_FORMAT)


STORE = OutputKind(  # what --overwrite of a store writer may replace (``refuse_foreign``)
    "a token store",
    is_token_store,
    (
        "meta.json",
        "tokens.bin",
        "offsets.npy",
        "docs.jsonl",
        "docs.parquet",
        "skipped.jsonl",
        "config.toml",
        "tokenizer",
        "parity.json",  # a synthetic store's task
        "mqar.json",
        "doc_lengths.png",  # data info's plot
        "report.html",  # `contextlab report STORE`'s page
        ".verified.json",  # a reader's cache
    ),
)


def refuse_non_store(out: Path) -> None:
    """One line, before any work, for an ``--out`` that --overwrite may not replace: a file, a link, or a
    folder holding anything but a token store (``refuse_foreign``)."""
    refuse_foreign(out, STORE)


F = TypeVar("F", bound=Callable[..., Any])


def content_hash(
    tokens_file: Path,
    offsets_file: Path,
    chunk: int = 1 << 20,
    on_tokens: Callable[[bytes], None] | None = None,
) -> str:
    """sha256 over tokens.bin then offsets.npy's array bytes, both read in chunks (flat memory).
    ``on_tokens(block)`` sees every block of tokens.bin as it is hashed (whole ids: ``chunk`` is a
    multiple of every id width), so a caller can check the ids in the same read."""
    h = hashlib.sha256()
    with open(tokens_file, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
            if on_tokens is not None:
                on_tokens(block)
    fmt = np.lib.format
    with open(offsets_file, "rb") as f:
        read_header = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(
            fmt.read_magic(f)
        )
        if read_header is None or read_header(f)[1]:  # another npy version, or Fortran order
            h.update(np.ascontiguousarray(np.load(offsets_file)).tobytes())
            return h.hexdigest()
        while block := f.read(chunk):  # the array's bytes as stored: what .tobytes() gives
            h.update(block)
    return h.hexdigest()


def output_lock(out: str | os.PathLike, what: str) -> contextlib.AbstractContextManager[None]:
    """Hold the one-writer lock of the store (or packed store) being written at ``out``.

    The lock file is ``.OUT.lock`` beside ``out`` (a long OUT shortened: ``io.sibling``), not inside
    it: ``OUT`` and ``OUT.partial`` are replaced and removed while the lock is held. A second writer
    gets one line naming the first (``contextlab.io.exclusive_lock``).
    """
    out = Path(out)
    return exclusive_lock(sibling(out, ".", ".lock"), f"{what} {out}")


def holds_output_lock(
    what: str, *, unless: str | None = None, inputs: Callable[[dict], Iterable] | None = None
) -> Callable[[F], F]:
    """Decorate a writer ``fn(src, out, ...)`` so it holds ``output_lock(out)`` while it runs.

    ``unless`` names an argument that, when given (not None), makes the call run unlocked: a
    pack of ``only_shards`` writes just its own shard files, atomically, so many such calls may
    share an OUT (the documented scale-out); the assembling call takes the lock. ``inputs``
    maps the call's arguments to the paths it reads: an ``out`` that is, contains or lies inside
    one is refused (``outputs.refuse_overlap``) before anything, the lock file included, is written.
    """

    def wrap(fn: F) -> F:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def locked(*args, **kwargs):
            bound = signature.bind(*args, **kwargs).arguments
            if inputs is not None:
                refuse_overlap(bound["out"], inputs(bound))
            if unless is not None and bound.get(unless) is not None:
                return fn(*args, **kwargs)
            with output_lock(bound["out"], what):
                remove_stale_staging(bound["out"])  # left by a writer that was killed; none runs now
                return fn(*args, **kwargs)

        return locked  # type: ignore[return-value]

    return wrap


@dataclass
class WriterState:
    """What has been durably written to a partial store (the resume point)."""

    n_docs: int = 0
    n_tokens: int = 0
    docs_bytes: int = 0


class StoreWriter:
    """Appends documents to ``partial_dir``; ``commit()`` makes them durable.

    Files: ``tokens.bin`` (appended), ``offsets.i64`` (end offset of every document, raw
    int64, appended), ``docs.jsonl`` (appended). ``open`` truncates each file back to the
    last committed state, which drops whatever a killed run wrote after its last commit.
    """

    def __init__(self, partial_dir: Path, dtype: np.dtype, state: WriterState):
        self.dir = Path(partial_dir)
        self.dtype = np.dtype(dtype)
        self.state = WriterState(**vars(state))
        self.dir.mkdir(parents=True, exist_ok=True)
        self._files = {}
        _restore_raw_offsets(self.dir)
        for name, size in (
            ("tokens.bin", state.n_tokens * self.dtype.itemsize),
            ("offsets.i64", state.n_docs * 8),
            ("docs.jsonl", state.docs_bytes),
        ):
            path = self.dir / name
            fh = open(path, "r+b" if path.exists() else "w+b")
            if os.fstat(fh.fileno()).st_size < size:
                fh.close()
                raise UserError(
                    f"partial ingest in {self.dir} is damaged ({name} is shorter than its "
                    f"committed size); delete {self.dir} and ingest again"
                )
            fh.truncate(size)
            fh.seek(size)
            self._files[name] = fh
        self._durable = WriterState(**vars(state))

    def add(self, tokens: np.ndarray, meta: dict[str, Any]) -> None:
        arr = np.asarray(tokens)
        with self._rolled_back_on_error():
            self._write_tokens(arr)
            self._end_doc(int(arr.size), meta)

    def add_parts(
        self, parts: Iterable[np.ndarray], meta: dict[str, Any], min_tokens: int, max_tokens: int
    ) -> int:
        """Add one document given as consecutive id arrays (a long document streamed through the
        tokenizer) and return its length; one outside ``min_tokens``..``max_tokens`` (0 = no
        limit; reading stops once it is passed) is cut back off the file and not added."""
        with self._rolled_back_on_error():
            fh = self._files["tokens.bin"]
            start, n = fh.tell(), 0
            for arr in parts:
                self._write_tokens(np.asarray(arr))
                n += len(arr)
                if max_tokens and n > max_tokens:
                    break
            if n < min_tokens or (max_tokens and n > max_tokens):
                fh.truncate(start)
                fh.seek(start)
                return n
            self._end_doc(n, meta)
        return n

    @contextlib.contextmanager
    def _rolled_back_on_error(self):
        """A failed write (a full disk) cuts the files back to the last durable state."""
        try:
            yield
        except OSError:
            self._roll_back()
            raise

    def _write_tokens(self, arr: np.ndarray) -> None:
        if arr.size and int(arr.max()) > np.iinfo(self.dtype).max:
            raise ValueError(f"token id {int(arr.max())} does not fit {self.dtype}")
        self._files["tokens.bin"].write(arr.astype(self.dtype, copy=False).tobytes())

    def _end_doc(self, n_tokens: int, meta: dict[str, Any]) -> None:
        line = (json.dumps(meta, ensure_ascii=False) + "\n").encode("utf-8")
        self.state.n_tokens += n_tokens
        self.state.n_docs += 1
        self._files["offsets.i64"].write(np.int64(self.state.n_tokens).tobytes())
        self._files["docs.jsonl"].write(line)
        self.state.docs_bytes += len(line)

    def flush(self) -> WriterState:
        """Flush and fsync the data files; returns the state that is now durable."""
        try:
            for fh in self._files.values():
                fh.flush()
                os.fsync(fh.fileno())
        except OSError:
            self._roll_back()
            raise
        self._durable = WriterState(**vars(self.state))
        return WriterState(**vars(self.state))

    def _roll_back(self) -> None:
        """After a failed write (a full disk): close the files and cut them back to the last
        durable state, so the space a torn batch took is given back and a rerun resumes."""
        sizes = {
            "tokens.bin": self._durable.n_tokens * self.dtype.itemsize,
            "offsets.i64": self._durable.n_docs * 8,
            "docs.jsonl": self._durable.docs_bytes,
        }
        for name, fh in self._files.items():
            with contextlib.suppress(OSError):
                fh.close()  # its buffered bytes may not fit either
            os.truncate(self.dir / name, sizes[name])
        self._files = {}
        self.state = WriterState(**vars(self._durable))

    def close(self) -> None:
        for fh in self._files.values():
            fh.close()
        self._files = {}


def _restore_raw_offsets(partial_dir: Path) -> None:
    """Rebuild ``offsets.i64`` from ``offsets.npy`` in a partial store whose finalizing was cut
    short before ``finalize.json`` existed (earlier versions unlinked offsets.i64 first, leaving
    such partial stores unresumable)."""
    raw, npy = partial_dir / "offsets.i64", partial_dir / "offsets.npy"
    if not raw.exists() and npy.is_file():
        atomic_write_bytes(raw, np.load(npy)[1:].astype(np.int64).tobytes())


FINALIZE_FILE = "finalize.json"  # the meta being finalized: present while finalizing is under way


def finalize_store(partial_dir: Path, out_dir: Path, meta: dict, *, overwrite: bool) -> None:
    """Turn a complete partial directory into a store at ``out_dir`` (atomic rename).

    Restartable from any point: a kill anywhere in here is finished by calling it again (with
    any ``meta``: the one recorded first wins, see ``pending_finalize``). Every step is atomic
    and can be repeated, and nothing is removed before what replaces it is durable:

    1. ``finalize.json`` records ``meta`` (skipped when it is there, or meta.json is);
    2. ``offsets.npy`` is written from ``offsets.i64`` (while ``offsets.i64`` exists);
    3. ``meta.json`` gets the counts and the content hash, computed from the final files;
    4. ``offsets.i64``, ``progress.json``, temporary files of killed writes and then
       ``finalize.json`` are removed: the partial directory is now a complete store;
    5. the directory is renamed to ``out_dir``.
    """
    partial_dir, out_dir = Path(partial_dir), Path(out_dir)
    record = partial_dir / FINALIZE_FILE
    done = (partial_dir / "meta.json").is_file() and not record.exists()
    if not done:
        if not record.is_file():
            atomic_write_json(record, {"meta": meta})
        meta = json.loads(record.read_text(encoding="utf-8"))["meta"]
        offsets = _final_offsets(partial_dir)
        meta = dict(meta)
        meta.update(
            format=STORE_FORMAT,
            version=FORMAT_VERSION,
            code_version=__version__,
            n_docs=int(len(offsets) - 1),
            n_tokens=int(offsets[-1]),
            content_hash=content_hash(partial_dir / "tokens.bin", partial_dir / "offsets.npy"),
        )
        atomic_write_json(partial_dir / "meta.json", meta)
    for name in ("offsets.i64", "progress.json"):
        (partial_dir / name).unlink(missing_ok=True)
    for tmp in partial_dir.glob(".*.tmp"):  # left by a write that was killed before its rename
        tmp.unlink()
    (partial_dir / FINALIZE_FILE).unlink(missing_ok=True)
    fsync_dir(partial_dir)
    replace_dir(partial_dir, out_dir, overwrite=overwrite, kind=STORE)


def _final_offsets(partial_dir: Path, chunk: int = 1 << 23) -> np.ndarray:
    """``offsets.npy`` of a partial store (memory-mapped), written from ``offsets.i64`` unless that
    is gone. Streamed: the file is the bytes ``np.save`` writes for [0, *ends], never all in memory."""
    raw = partial_dir / "offsets.i64"
    if raw.exists():

        def blocks():
            yield np.zeros(1, np.int64)
            with open(raw, "rb") as f:
                while block := f.read(chunk):
                    yield block

        atomic_write_npy(partial_dir / "offsets.npy", np.int64, (raw.stat().st_size // 8 + 1,), blocks())
    return np.load(partial_dir / "offsets.npy", mmap_mode="r")


def pending_finalize(partial_dir: Path) -> dict | None:
    """The meta of a finalize that was interrupted in ``partial_dir`` (None: none was).

    Once finalizing has started the data files are no longer appendable (``offsets.i64`` may
    be gone), so the caller must finish it with ``finalize_store`` rather than resume writing.
    """
    partial_dir = Path(partial_dir)
    try:
        if (partial_dir / FINALIZE_FILE).is_file():
            return dict(json.loads((partial_dir / FINALIZE_FILE).read_text(encoding="utf-8"))["meta"])
        if (partial_dir / "meta.json").is_file():  # finalized; only the rename is left
            return dict(json.loads((partial_dir / "meta.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None
