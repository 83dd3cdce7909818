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
``meta.json`` (sizes, counts, monotone offsets, the vocabulary size against the dtype and the
saved tokenizer's spec) so a truncated or hand-edited store is caught at once with one clear
line, not later as garbage tokens or a model with the wrong vocabulary. The full content hash
is computed once at the end of ingest; re-checking it costs a read of the whole store, so it is
not part of opening. The commands that consume a store, ``train``, ``data pack`` and ``eval``,
call ``check_content()`` first: the content hash against meta.json and every id against the
vocabulary, in one read (a token changed in place, same size, is caught there); the result is
remembered in ``STORE/.verified.json`` by the files' size, modification time and inode, so an
unchanged store is read once, not on every run (a store that cannot be written is re-read each
time). ``data.verify = false`` / ``--no-verify`` skips it. ``verify()`` (``contextlab data
verify``) checks the same and the tokenizer's vocabulary, always reading everything.

Writing (``StoreWriter``, ``finalize_store``: ``contextlab.data.store_write``) appends to a
``.partial`` directory and commits its progress after every batch, so an ingest killed at
any moment, finalizing included, resumes without losing or duplicating a document.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from contextlab.data.store_meta import MetaKind, has_format, read_meta
from contextlab.data.store_write import (  # noqa: F401 (the writing side, re-exported)
    FINALIZE_FILE,
    STORE_FORMAT,
    StoreWriter,
    WriterState,
    content_hash,
    finalize_store,
    holds_output_lock,
    output_lock,
    pending_finalize,
)
from contextlab.data.tokenizer_base import SPEC_FILE
from contextlab.errors import UserError
from contextlab.io import CACHE_FILES, atomic_write_json

VERIFIED_FILE = CACHE_FILES[0]  # check_content's memory of a store it found intact
_FIX = "re-create it with `contextlab data ingest ... --overwrite`"
STORE_META = MetaKind(
    format=STORE_FORMAT,
    what="store",
    title="contextlab token store",
    make="contextlab data ingest",
    make_input="SOURCE",
    fix=_FIX,
    keys=("n_docs", "n_tokens", "dtype", "tokenizer"),
)


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (vocab <= 65536), else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def is_store(path: str | os.PathLike) -> bool:
    return has_format(path, STORE_FORMAT)


SCAN_ENTRIES = 1 << 16  # offsets read at a time by the open-time check (512 KB)


def _first_decrease(path: Path, header: int) -> int | None:
    """The first entry of ``offsets.npy`` (its array starts at byte ``header``) that is below the
    one before it (None: none is).

    Read in ``SCAN_ENTRIES`` chunks through the file rather than the memory map, so opening a
    store keeps its memory flat: a whole-array ``np.diff`` cost 17 bytes per document at the
    peak (the diff, its comparison and the mapped pages), 17 GB for a billion documents."""
    with open(path, "rb") as fh:
        fh.seek(header)
        base, prev = 0, None  # base: the index of chunk[0]; prev: the entry before it
        buf = np.empty(SCAN_ENTRIES - 1, dtype=bool)
        while (chunk := np.fromfile(fh, dtype=np.int64, count=SCAN_ENTRIES)).size:
            if prev is not None and chunk[0] < prev:
                return base
            down = np.less(chunk[1:], chunk[:-1], out=buf[: chunk.size - 1])
            if down.any():
                return base + int(np.argmax(down)) + 1
            base, prev = base + chunk.size, chunk[-1]
    return None


class TokenStore:
    """A read-only, memory-mapped token store. ``store.doc(i)`` is a zero-copy view."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.meta = read_meta(self.path, STORE_META)
        self.n_docs = int(self.meta["n_docs"])
        self.n_tokens = int(self.meta["n_tokens"])
        self.dtype = np.dtype(self.meta["dtype"])
        self.tokenizer_spec: dict = self.meta["tokenizer"]
        self.vocab_size = self._check_vocab()
        self.offsets = self._open_offsets()
        self.tokens = self._open_tokens()
        self._docs_meta: list[dict] | None = None

    # ---------------------------------------------------------------- validation
    def _check_vocab(self) -> int:
        """The vocabulary size, cross-checked with the dtype and the saved tokenizer's spec file
        (cheap: one small file; ``verify`` loads the tokenizer itself and reads every id)."""
        vocab = int(self.tokenizer_spec.get("vocab_size") or 0)
        if vocab - 1 > np.iinfo(self.dtype).max:
            raise UserError(
                f"store {self.path} is corrupt: its dtype {self.dtype} cannot hold the ids of a "
                f"vocabulary of {vocab}; {_FIX}"
            )
        spec_file = self.path / "tokenizer" / SPEC_FILE
        if not spec_file.is_file():
            return vocab
        try:
            saved = json.loads(spec_file.read_text(encoding="utf-8"))
            saved_vocab, saved_hash = int(saved["vocab_size"]), saved["hash"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserError(
                f"store {self.path} is corrupt: {spec_file} cannot be read ({exc}); {_FIX}"
            ) from None
        if saved_vocab != vocab:
            raise UserError(
                f"store {self.path} is corrupt: meta.json says vocab_size {vocab} but its tokenizer/ "
                f"folder says {saved_vocab}; {_FIX}"
            )
        if saved_hash != self.tokenizer_spec.get("hash"):
            raise UserError(
                f"store {self.path} is corrupt: its tokenizer/ folder (hash {str(saved_hash)[:8]}) is "
                f"not the tokenizer meta.json names (hash {str(self.tokenizer_spec.get('hash'))[:8]}); {_FIX}"
            )
        return vocab

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
        at = _first_decrease(f, offsets.offset) if self.n_docs else None
        if at is not None:
            raise UserError(
                f"store {self.path} is corrupt: offsets.npy is not increasing (entry {at} is below "
                f"entry {at - 1}); {_FIX}"
            )
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
        """Check everything (reads the whole store): the vocabulary size against the tokenizer,
        every id against the vocabulary, and the content hash against meta.json."""
        tok = self.tokenizer()
        if tok.vocab_size != self.vocab_size:
            raise UserError(
                f"store {self.path} is corrupt: meta.json says vocab_size {self.vocab_size} but its "
                f"tokenizer has {tok.vocab_size}; {_FIX}"
            )
        got, top = self._read_content()
        self._check_top_id(top, fix=_FIX)
        if got != self.meta.get("content_hash"):
            raise UserError(
                f"store {self.path} is corrupt: content hash {got[:12]} differs from meta.json's; {_FIX}"
            )

    def check_content(self, skip: str | None = "--no-verify") -> None:
        """One line when tokens.bin or offsets.npy no longer hash to meta.json's content hash or hold
        an id outside the vocabulary (both in one read of the files); see the module docstring for
        when it reads and what it remembers. ``skip``: how the calling command skips this check, named
        in the line (None: it cannot, so the line names no option that does not exist there)."""
        if self.verified():
            return
        got, top = self._read_content()
        if got != self.hash:
            how = f" (or skip this check with {skip} to use it as it is)" if skip else ""
            raise UserError(
                f"store {self.path} changed after it was written: its content hash is {got[:12]}, meta.json "
                f"says {self.hash[:12]}; ingest the source again{how}"
            )
        self._check_top_id(top)
        try:
            atomic_write_json(self.path / VERIFIED_FILE, {"stamp": self._stamp(), "content_hash": self.hash})
        except OSError:
            pass  # a read-only store: checked again next time

    def _read_content(self) -> tuple[str, int]:
        """(content hash, largest id) of tokens.bin and offsets.npy, both from one read of the files:
        the one content check ``verify`` and ``check_content`` share (each raises its own line)."""
        top = [-1]

        def see(block: bytes) -> None:  # the largest id, from the blocks the hash reads anyway
            if block:
                top[0] = max(top[0], int(np.frombuffer(block, self.dtype).max()))

        return content_hash(self.path / "tokens.bin", self.path / "offsets.npy", on_tokens=see), top[0]

    def verified(self) -> bool:
        """Whether ``check_content`` found this store intact and its files have not changed since."""
        try:
            seen = json.loads((self.path / VERIFIED_FILE).read_text())
        except (OSError, ValueError):
            return False
        return seen == {"stamp": self._stamp(), "content_hash": self.hash}

    def _stamp(self) -> dict:
        """Size, modification time (ns) and inode of the files the content hash covers."""
        out = {}
        for name in ("tokens.bin", "offsets.npy"):
            st = (self.path / name).stat()
            out[name] = [st.st_size, st.st_mtime_ns, st.st_ino]
        return out

    def check_ids(
        self, fix: str | None = None, chunk: int = 1 << 23, docs: tuple[int, int] | None = None
    ) -> None:
        """Raise one line when an id is outside the vocabulary (reads every token, ~GB/s; ``docs``:
        only those of documents [lo, hi)).

        Each packing shard calls this for its own documents: an out-of-range id would otherwise
        crash a retriever with a raw error (SPLICE) or be packed silently (EP) and fail only in
        training. Read through the file, not the memory map, so the pages read do not stay in
        this process's memory.
        """
        lo, hi = (
            (0, self.n_tokens) if docs is None else (int(self.offsets[docs[0]]), int(self.offsets[docs[1]]))
        )
        top = -1
        with open(self.path / "tokens.bin", "rb") as fh:
            fh.seek(lo * self.dtype.itemsize)
            while lo < hi and (ids := np.fromfile(fh, dtype=self.dtype, count=min(chunk, hi - lo))).size:
                top, lo = max(top, int(ids.max())), lo + ids.size
        self._check_top_id(top, docs, fix)

    def _check_top_id(self, top: int, docs: tuple[int, int] | None = None, fix: str | None = None) -> None:
        """One line when ``top``, the largest id read (of documents ``docs``), is outside the vocabulary."""
        if self.vocab_size and top >= self.vocab_size:
            where = "" if docs is None else f" (in documents {docs[0]:,}..{docs[1] - 1:,})"
            raise UserError(
                f"store {self.path} is corrupt: it holds token id {top}{where}, outside the vocabulary "
                f"0..{self.vocab_size - 1} of its tokenizer; "
                + (fix or f"check it with `contextlab data verify {shlex.quote(str(self.path))}` and {_FIX}")
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
        """Per-document metadata from docs.jsonl (loaded on first use, and kept: a dict per
        document; ``iter_docs_meta`` reads it without keeping it)."""
        if self._docs_meta is None:
            self._docs_meta = list(self.iter_docs_meta())
        return self._docs_meta

    def iter_docs_meta(self) -> Iterator[dict]:
        """Per-document metadata from docs.jsonl, a row at a time; raises at the end when the file
        does not hold one line per document."""
        f = self.path / "docs.jsonl"
        if not f.is_file():
            raise UserError(f"store {self.path} is incomplete: docs.jsonl is missing; {_FIX}")
        n = 0
        with open(f, "rb") as fh:
            for line in fh:
                n += 1
                yield json.loads(line)
        if n != self.n_docs:
            raise UserError(
                f"store {self.path} is corrupt: docs.jsonl has {n} lines but meta.json says "
                f"n_docs={self.n_docs}; {_FIX}"
            )

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
