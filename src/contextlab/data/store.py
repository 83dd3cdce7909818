"""The token store: a corpus as one flat array of token ids plus document offsets.

Layout of a store directory (format version 1)::

    meta.json      format, version, tokenizer spec + hash, dtype, n_docs, n_tokens,
                   source description and statistics, content hash, code version
    tokens.bin     all documents back to back, no separators (uint16 when the vocabulary
                   fits, else uint32)
    offsets.npy    int64, n_docs + 1 entries; document i is tokens[offsets[i]:offsets[i+1]]
    docs.jsonl     one JSON object per document: id, source path, domain, ...
    tokenizer/     the tokenizer, saved so the store is self-describing
    config.toml    the resolved ingest config

Reading goes through ``np.memmap``: opening a store costs the same for 1 MB or 1 TB, and
memory use does not grow with the corpus. Opening validates that the files agree with
``meta.json`` (sizes, counts, monotone offsets) so a truncated or hand-edited store is
caught at once with one clear line, not later as garbage tokens. The full content hash is
computed once at the end of ingest; re-checking it costs a read of the whole store, so
that is an explicit ``verify()`` rather than part of opening.

Writing (``StoreWriter``) appends to a ``.partial`` directory and commits its progress
after every batch, so an ingest killed at any moment resumes without losing or
duplicating a document (see ``contextlab.data.ingest``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from contextlab import FORMAT_VERSION, __version__
from contextlab.errors import UserError
from contextlab.io import atomic_write_json, replace_dir

STORE_FORMAT = "contextlab-token-store"
_FIX = "re-create it with `contextlab data ingest ... --overwrite`"


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab <= 65536), else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def is_store(path: str | os.PathLike) -> bool:
    meta = Path(path) / "meta.json"
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text()).get("format") == STORE_FORMAT
    except (OSError, ValueError):
        return False


class TokenStore:
    """A read-only, memory-mapped token store. ``store.doc(i)`` is a zero-copy view."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.meta = _read_meta(self.path)
        self.n_docs = int(self.meta["n_docs"])
        self.n_tokens = int(self.meta["n_tokens"])
        self.dtype = np.dtype(self.meta["dtype"])
        self.tokenizer_spec: dict = self.meta["tokenizer"]
        self.offsets = self._open_offsets()
        self.tokens = self._open_tokens()
        self._docs_meta: list[dict] | None = None

    # ---------------------------------------------------------------- validation
    def _open_offsets(self) -> np.ndarray:
        f = self.path / "offsets.npy"
        if not f.is_file():
            raise UserError(f"store {self.path} is incomplete: offsets.npy is missing; {_FIX}")
        try:
            offsets = np.load(f, mmap_mode="r")
        except (ValueError, OSError, EOFError) as exc:
            raise UserError(
                f"store {self.path} is corrupt: offsets.npy cannot be read ({exc}); {_FIX}"
            ) from None
        if offsets.dtype != np.int64 or offsets.ndim != 1:
            raise UserError(f"store {self.path} is corrupt: offsets.npy must be 1-d int64; {_FIX}")
        if len(offsets) != self.n_docs + 1:
            raise UserError(
                f"store {self.path} is corrupt: offsets.npy has {len(offsets)} entries but meta.json "
                f"says n_docs={self.n_docs} (expected {self.n_docs + 1}); {_FIX}"
            )
        if self.n_docs and (offsets[0] != 0 or offsets[-1] != self.n_tokens):
            raise UserError(
                f"store {self.path} is corrupt: offsets.npy spans {offsets[0]}..{offsets[-1]} but meta.json "
                f"says n_tokens={self.n_tokens}; {_FIX}"
            )
        if self.n_docs and bool(np.any(np.diff(offsets) < 0)):
            raise UserError(f"store {self.path} is corrupt: offsets.npy is not increasing; {_FIX}")
        return offsets

    def _open_tokens(self) -> np.ndarray:
        f = self.path / "tokens.bin"
        if not f.is_file():
            raise UserError(f"store {self.path} is incomplete: tokens.bin is missing; {_FIX}")
        size = f.stat().st_size
        expected = self.n_tokens * self.dtype.itemsize
        if size != expected:
            raise UserError(
                f"store {self.path} is corrupt: tokens.bin has {size} bytes but meta.json says "
                f"n_tokens={self.n_tokens} x {self.dtype.itemsize} bytes = {expected}; {_FIX}"
            )
        if self.n_tokens == 0:
            return np.zeros(0, dtype=self.dtype)
        return np.memmap(f, dtype=self.dtype, mode="r", shape=(self.n_tokens,))

    def verify(self) -> None:
        """Recompute the content hash (reads everything) and compare with meta.json."""
        got = content_hash(self.path / "tokens.bin", self.path / "offsets.npy")
        if got != self.meta.get("content_hash"):
            raise UserError(
                f"store {self.path} is corrupt: content hash {got[:12]} differs from meta.json's; {_FIX}"
            )

    # ---------------------------------------------------------------- access
    def __len__(self) -> int:
        return self.n_docs

    def doc(self, i: int) -> np.ndarray:
        """Tokens of document ``i`` (a view into the memmap)."""
        if not -self.n_docs <= i < self.n_docs:
            raise IndexError(f"document {i} out of range for a store of {self.n_docs}")
        i %= self.n_docs
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(self.n_docs):
            yield self.doc(i)

    def lengths(self) -> np.ndarray:
        """Token count of every document (int64)."""
        return np.diff(np.asarray(self.offsets))

    def docs_meta(self) -> list[dict]:
        """Per-document metadata from docs.jsonl (loaded on first use)."""
        if self._docs_meta is None:
            f = self.path / "docs.jsonl"
            if not f.is_file():
                raise UserError(f"store {self.path} is incomplete: docs.jsonl is missing; {_FIX}")
            with open(f, "rb") as fh:
                rows = [json.loads(line) for line in fh]
            if len(rows) != self.n_docs:
                raise UserError(
                    f"store {self.path} is corrupt: docs.jsonl has {len(rows)} lines but meta.json "
                    f"says n_docs={self.n_docs}; {_FIX}"
                )
            self._docs_meta = rows
        return self._docs_meta

    def doc_meta(self, i: int) -> dict:
        return self.docs_meta()[i]

    @property
    def hash(self) -> str:
        return str(self.meta["content_hash"])

    @property
    def tokenizer_hash(self) -> str:
        return str(self.tokenizer_spec["hash"])

    def tokenizer(self):
        """The store's tokenizer, loaded from its ``tokenizer/`` folder."""
        from contextlab.data.tokenizers import load_saved_tokenizer

        return load_saved_tokenizer(self.path / "tokenizer")

    def check_tokenizer(self, spec: dict, what: str = "the model") -> None:
        """Raise one clear UserError when ``spec`` is not this store's tokenizer."""
        from contextlab.data.tokenizers import check_same_tokenizer

        check_same_tokenizer(spec, self.tokenizer_spec, what, f"the data store {self.path}")

    def __repr__(self) -> str:
        return (
            f"TokenStore({str(self.path)!r}, n_docs={self.n_docs:,}, n_tokens={self.n_tokens:,}, "
            f"tokenizer={self.tokenizer_spec.get('name')})"
        )


def _read_meta(path: Path) -> dict:
    if not path.exists():
        raise UserError(
            f"store not found: {path} (create one with `contextlab data ingest SOURCE --out {path}`)"
        )
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        raise UserError(
            f"{path} is not a contextlab token store (no meta.json); create one with `contextlab data ingest`"
        )
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"store {path} is corrupt: meta.json is not valid JSON ({exc}); {_FIX}") from None
    if meta.get("format") != STORE_FORMAT:
        raise UserError(
            f"{path} is not a contextlab token store (meta.json format is {meta.get('format')!r})"
        )
    if int(meta.get("version", -1)) > FORMAT_VERSION:
        raise UserError(
            f"store {path} has format version {meta['version']}, newer than this contextlab "
            f"({FORMAT_VERSION}); upgrade contextlab"
        )
    for key in ("n_docs", "n_tokens", "dtype", "tokenizer"):
        if key not in meta:
            raise UserError(f"store {path} is corrupt: meta.json lacks '{key}'; {_FIX}")
    return meta


def content_hash(tokens_file: Path, offsets_file: Path, chunk: int = 1 << 20) -> str:
    """sha256 over tokens.bin then offsets.npy's array bytes."""
    h = hashlib.sha256()
    with open(tokens_file, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    h.update(np.ascontiguousarray(np.load(offsets_file, mmap_mode="r")).tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------------------- writing


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

    def add(self, tokens: np.ndarray, meta: dict[str, Any]) -> None:
        arr = np.asarray(tokens)
        self._write_tokens(arr)
        self._end_doc(int(arr.size), meta)

    def add_parts(
        self, parts: Iterable[np.ndarray], meta: dict[str, Any], min_tokens: int, max_tokens: int
    ) -> int:
        """Add one document given as consecutive id arrays (a long document streamed through the
        tokenizer) and return its length; one outside ``min_tokens``..``max_tokens`` (0 = no
        limit; reading stops once it is passed) is cut back off the file and not added."""
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

    def _write_tokens(self, arr: np.ndarray) -> None:
        if arr.size and int(arr.max()) > np.iinfo(self.dtype).max:
            raise ValueError(f"token id {int(arr.max())} does not fit {self.dtype}")
        self._files["tokens.bin"].write(arr.astype(self.dtype, copy=False).tobytes())

    def _end_doc(self, n_tokens: int, meta: dict[str, Any]) -> None:
        self.state.n_tokens += n_tokens
        self.state.n_docs += 1
        self._files["offsets.i64"].write(np.int64(self.state.n_tokens).tobytes())
        line = (json.dumps(meta, ensure_ascii=False) + "\n").encode("utf-8")
        self._files["docs.jsonl"].write(line)
        self.state.docs_bytes += len(line)

    def flush(self) -> WriterState:
        """Flush and fsync the data files; returns the state that is now durable."""
        for fh in self._files.values():
            fh.flush()
            os.fsync(fh.fileno())
        return WriterState(**vars(self.state))

    def close(self) -> None:
        for fh in self._files.values():
            fh.close()
        self._files = {}


def finalize_store(partial_dir: Path, out_dir: Path, meta: dict, *, overwrite: bool) -> None:
    """Turn a complete partial directory into a store at ``out_dir`` (atomic rename)."""
    partial_dir, out_dir = Path(partial_dir), Path(out_dir)
    ends = np.fromfile(partial_dir / "offsets.i64", dtype=np.int64)
    offsets = np.concatenate([np.zeros(1, np.int64), ends])
    tmp = partial_dir / ".offsets.npy.tmp"
    with open(tmp, "wb") as fh:
        np.save(fh, offsets)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, partial_dir / "offsets.npy")
    (partial_dir / "offsets.i64").unlink()
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
    (partial_dir / "progress.json").unlink(missing_ok=True)
    replace_dir(partial_dir, out_dir, overwrite=overwrite)
