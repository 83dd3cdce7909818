"""The packed store: a document order and sequence boundaries over a token store, no token copies.

Layout of a packed store directory (format version 1)::

    meta.json        format "contextlab-packed-store", version, method and every knob
                     (k, order, retriever and its settings, noise, separator, remainder,
                     context, seed, shards), the token store's path (absolute, and
                     ``relative_path`` from the packed store when the two share a folder
                     below the root), content hash and tokenizer hash, the separator id,
                     n_sequences, n_entries, per-shard stats (documents, sequences, index
                     memory bytes, seconds), row_len
                     (internal: context + 1 tokens per sequence). Stores written before
                     the rename record only ``seq_len`` (= context + 1) and open the same.
    entries.npy      int64 (n_entries, 3): document index, begin token, end token. A trimmed
                     document is an entry with end < its length; its tail may be a later
                     entry (remainder "next"/"pool") beginning where this one ended. An entry
                     with begin = end = its length is its separator alone: the document's
                     tokens filled the row before, to the last token.
    seq_offsets.npy  int64 (n_sequences + 1): sequence i is entries[off[i]:off[i+1]]
    similarity.npy   float32 (n_entries): the retriever's similarity that brought the entry
                     in (NaN: a root, a random document, or a carried-over piece)
    heldout.npy      int64 (n): the documents held out for validation (``--val-fraction``),
                     sorted; none is packed, and meta.json's ``heldout`` says how they were
                     drawn (val_fraction, split_seed: ``views.split_documents``, as a
                     data.store run draws its validation documents). Absent when none was.
    config.toml      the resolved PackConfig

Sequence i as tokens = its entries' token ranges concatenated, with the separator after
every entry that reaches the end of its document (policy "eot"), cut to ``context + 1``
tokens (the inputs and their shifted targets). So every sequence but the last ones of a
shard holds exactly ``context + 1`` tokens. Opening
validates sizes against meta.json and that the token store still has the content hash it
was packed from (a re-ingested store would silently shift every entry otherwise). The token
store is looked for at its absolute path, then at its relative path (a project folder moved
whole); one moved elsewhere is given by the caller (``store=``: ``--store`` of ``data export``
and ``data pack-stats``, ``data.store`` of ``train``) and accepted by its content hash.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import numpy as np

from contextlab.data.store import TokenStore
from contextlab.data.store_meta import MetaKind, has_format, read_meta
from contextlab.errors import UserError

PACKED_FORMAT = "contextlab-packed-store"
HELDOUT_FILE = "heldout.npy"
_FIX = "re-create it with `contextlab data pack ... --overwrite`"
PACKED_META = MetaKind(
    format=PACKED_FORMAT,
    what="packed store",
    title="contextlab packed store",
    make="contextlab data pack",
    make_input="STORE",
    fix=_FIX,
    keys=("n_sequences", "n_entries", "config", "store"),
)


def is_packed_store(path: str | os.PathLike) -> bool:
    return has_format(path, PACKED_FORMAT)


class PackedStore:
    """A read-only packed store; ``sequence_tokens(i)`` builds sequence i from the token store."""

    def __init__(self, path: str | os.PathLike, store: TokenStore | None = None):
        self.path = Path(path)
        self.meta = read_meta(self.path, PACKED_META)
        self.n_sequences = int(self.meta["n_sequences"])
        self.n_entries = int(self.meta["n_entries"])
        self.context = packed_context(self.meta)
        self.row_len = self.context + 1  # tokens per sequence
        self.separator_id: int | None = self.meta.get("separator_id")
        self.entries = self._load("entries.npy", np.int64, (self.n_entries, 3))
        self.seq_offsets = self._load("seq_offsets.npy", np.int64, (self.n_sequences + 1,))
        self.similarity = self._load("similarity.npy", np.float32, (self.n_entries,))
        if self.n_sequences and (self.seq_offsets[0] != 0 or self.seq_offsets[-1] != self.n_entries):
            raise UserError(
                f"packed store {self.path} is corrupt: seq_offsets.npy does not span the entries; {_FIX}"
            )
        self.store = store if store is not None else self._open_store()
        want = self.meta["store"]["content_hash"]
        if self.store.hash != want:
            again = (
                f"`contextlab data pack {shlex.quote(str(self.store.path))} ... "
                f"--out {shlex.quote(str(self.path))} --overwrite`"
            )
            if store is not None and self.store.path.resolve() not in self.store_places():
                raise UserError(
                    f"the token store {self.store.path} is not the one {self.path} was packed from "
                    f"(content hash {self.store.hash[:12]}, packed from {want[:12]} at "
                    f"{self.meta['store']['path']}); give the store it was packed from"
                )
            raise UserError(
                f"the token store {self.store.path} changed since {self.path} was packed (content hash "
                f"{self.store.hash[:12]}, packed from {want[:12]}); pack it again with {again}"
            )

    def _load(self, name: str, dtype, shape: tuple[int, ...]) -> np.ndarray:
        f = self.path / name
        if not f.is_file():
            raise UserError(f"packed store {self.path} is incomplete: {name} is missing; {_FIX}")
        try:
            arr = np.load(f, mmap_mode="r")
        except (ValueError, OSError, EOFError) as exc:
            raise UserError(
                f"packed store {self.path} is corrupt: {name} cannot be read ({exc}); {_FIX}"
            ) from None
        if arr.dtype != dtype or arr.shape != shape:
            raise UserError(
                f"packed store {self.path} is corrupt: {name} is {arr.dtype}{arr.shape} but meta.json "
                f"implies {np.dtype(dtype)}{shape}; {_FIX}"
            )
        return arr

    def heldout_documents(self) -> np.ndarray | None:
        """The documents of the token store held out for validation when this store was packed
        (sorted int64), or None when it was packed holding out none (a run then holds out sequences)."""
        if not self.meta.get("heldout"):
            return None
        return np.asarray(self._load(HELDOUT_FILE, np.int64, (int(self.meta["heldout"]["documents"]),)))

    def store_places(self) -> list[Path]:
        """Where the token store may be: the absolute path recorded, then the path relative to this
        packed store recorded beside it (stores packed inside one project folder), which finds the
        store after the whole folder moved."""
        rec = self.meta["store"]
        places = [Path(rec["path"])] + ([Path(rec["relative_path"])] if rec.get("relative_path") else [])
        return list(dict.fromkeys(p if p.is_absolute() else (self.path / p).resolve() for p in places))

    def _open_store(self) -> TokenStore:
        """The first of ``store_places`` holding a token store with the content hash packed from (a
        place holding other content is opened when none has it: the check in ``__init__`` says so)."""
        found = [p for p in self.store_places() if (p / "meta.json").is_file()]
        stores = [TokenStore(p) for p in found]
        want = self.meta["store"]["content_hash"]
        if stores:
            return next((s for s in stores if s.hash == want), stores[0])
        raise UserError(
            f"the token store {self.meta['store']['path']} that {self.path} was packed from is missing; "
            f"restore it, or give its new place: --store NEW_PATH (data export, data pack-stats) or "
            f"data.store=NEW_PATH (train), a store with content hash {want[:12]}"
        )

    # ------------------------------------------------------------------ access
    def __len__(self) -> int:
        return self.n_sequences

    def sequence_entries(self, i: int) -> np.ndarray:
        """(n, 3) int64 rows (document, begin, end) of sequence ``i``."""
        if not 0 <= i < self.n_sequences:
            raise IndexError(f"sequence {i} out of range for a packed store of {self.n_sequences}")
        return np.asarray(self.entries[self.seq_offsets[i] : self.seq_offsets[i + 1]])

    def sequence_tokens(
        self, i: int, separator_id: int | str | None = "auto"
    ) -> tuple[np.ndarray, np.ndarray]:
        """(tokens int64, doc_ids int32) of sequence ``i``, at most ``row_len`` (context + 1) long.

        ``separator_id``: "auto" = the id recorded at packing time (None when the policy is
        "none"); an int overrides it; None leaves separators out. A separator carries the
        document id of the document it ends."""
        sep = self.separator_id if separator_id == "auto" else separator_id
        parts, ids = [], []
        ends = self.store.offsets  # document d is ends[d]:ends[d + 1] (read per entry, not held whole)
        for d, b, e in self.sequence_entries(i):
            toks = np.asarray(self.store.doc(int(d))[b:e], dtype=np.int64)
            n = len(toks) + int(sep is not None and e == ends[d + 1] - ends[d])
            if n > len(toks):
                toks = np.append(toks, np.int64(sep))
            parts.append(toks)
            ids.append(np.full(n, d, dtype=np.int32))
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int32)
        tokens, doc_ids = np.concatenate(parts), np.concatenate(ids)
        return tokens[: self.row_len], doc_ids[: self.row_len]

    def sequence_lengths(self) -> np.ndarray:
        """Token count of every sequence (separators included, cut to row_len)."""
        return sequence_lengths(
            np.asarray(self.entries),
            np.asarray(self.seq_offsets),
            self.store.lengths(),
            self.separator_id is not None,
            self.row_len,
        )

    def __repr__(self) -> str:
        c = self.meta["config"]
        return (
            f"PackedStore({str(self.path)!r}, method={c['method']}, context={self.context}, "
            f"n_sequences={self.n_sequences:,}, n_entries={self.n_entries:,})"
        )


def packed_context(meta: dict) -> int:
    """The training context a packed store's sequences are for (old stores: ``seq_len`` - 1)."""
    config = meta["config"]
    return int(config["context"]) if "context" in config else int(config["seq_len"]) - 1


def sequence_lengths(
    entries: np.ndarray, offsets: np.ndarray, doc_len: np.ndarray, separator: bool, row_len: int
) -> np.ndarray:
    """Tokens per sequence from the entries alone (vectorized)."""
    n = entries[:, 2] - entries[:, 1]
    if separator and len(n):
        n = n + (entries[:, 2] == doc_len[entries[:, 0]])
    sums = np.zeros(len(offsets) - 1, dtype=np.int64)
    nonempty = np.diff(offsets) > 0
    if len(n):
        sums[nonempty] = np.add.reduceat(n, offsets[:-1][nonempty])
    return np.minimum(sums, row_len)


def packed_split(packed: PackedStore, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) sequence ids of ``packed``: a seeded ``val_fraction`` of its sequences is held
    out (for a store packed holding out no documents: ``PackedStore.heldout_documents``).

    Example packing puts each document in one sequence, so held-out sequences are mostly
    unseen documents; SPLICE may place a document's pieces in several sequences, so use a
    separate ``val_store`` when the validation loss must be on strictly unseen text.
    """
    n = len(packed)
    n_val = int(round(n * val_fraction)) if val_fraction > 0 else 0
    if n_val >= n:
        raise UserError(f"val_fraction {val_fraction} holds out all {n} sequences of {packed.path}; lower it")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])
