"""Views over a token store: subsets of documents, optionally cut to a fixed length.

A view never copies tokens: it is the store plus an index array (and a length cap).
Two views matter for context-use research:

* ``long_documents(store, L)``: every document of at least L tokens, cut to exactly L.
  This is the LongCrawl64 protocol of the compute-optimal-context study: when all
  documents are long, a model trained at context L sees real long-range structure instead
  of concatenated short documents, and contextwise loss curves are comparable.
* ``split_documents(store, val_fraction, seed)``: a train/validation split by document
  (no document leaks across), deterministic from the seed. For corpora of one or a few
  long documents (Tiny Shakespeare), ``split_tail`` holds out the last fraction of every
  document's tokens instead.

A packed store is split by sequence ids (``packing.packed_store.packed_split``), or, when it was
packed holding documents out (``data pack --val-fraction``), by those documents.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contextlab.data.store import TokenStore
from contextlab.errors import UserError


@dataclass
class DocView:
    """Documents ``indices`` of ``store``; of each, tokens ``begin[i]:end[i]`` (default: all),
    cut to at most ``max_len`` tokens (0 = no cut)."""

    store: TokenStore
    indices: np.ndarray
    max_len: int = 0
    begin: np.ndarray | None = None
    end: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.indices)

    def doc(self, i: int) -> np.ndarray:
        tokens = self.store.doc(int(self.indices[i]))
        if self.begin is not None:
            tokens = tokens[int(self.begin[i]) : int(self.end[i])]
        return tokens[: self.max_len] if self.max_len else tokens

    def lengths(self) -> np.ndarray:
        lens = self.store.lengths()[self.indices] if self.begin is None else self.end - self.begin
        return np.minimum(lens, self.max_len) if self.max_len else lens

    def n_tokens(self) -> int:
        return int(self.lengths().sum())

    def subset(self, positions: np.ndarray) -> DocView:
        pos = np.asarray(positions, dtype=np.int64)
        if self.begin is None:
            return DocView(self.store, self.indices[pos], self.max_len)
        return DocView(self.store, self.indices[pos], self.max_len, self.begin[pos], self.end[pos])


def all_documents(store: TokenStore) -> DocView:
    return DocView(store, np.arange(store.n_docs, dtype=np.int64))


def long_documents(source: TokenStore | DocView, length: int) -> DocView:
    """Documents with at least ``length`` tokens, each cut to ``length`` (LongCrawl64 style)."""
    view = source if isinstance(source, DocView) else all_documents(source)
    if length <= 0:
        raise UserError(f"the long-document length must be positive, got {length}")
    keep = np.flatnonzero(view.lengths() >= length)
    if len(keep) == 0:
        longest = int(view.lengths().max()) if len(view) else 0
        raise UserError(
            f"no document has {length} tokens or more (the longest has {longest}); choose a shorter length"
        )
    return DocView(view.store, view.indices[keep], length)


def split_documents(
    source: TokenStore | DocView, val_fraction: float, seed: int = 0
) -> tuple[DocView, DocView]:
    """(train, validation) views; at least one document goes to each side."""
    view = source if isinstance(source, DocView) else all_documents(source)
    if not 0.0 < val_fraction < 1.0:
        raise UserError(f"val_fraction must be between 0 and 1, got {val_fraction}")
    n = len(view)
    if n < 2:
        raise UserError(f"cannot split {n} document(s) into train and validation; ingest more documents")
    n_val = min(max(1, int(round(n * val_fraction))), n - 1)
    perm = np.random.default_rng(seed).permutation(n)
    val, train = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    return view.subset(train), view.subset(val)


def split_tail(source: TokenStore | DocView, val_fraction: float) -> tuple[DocView, DocView]:
    """(train, validation): the first (1 - f) of every document's tokens, and the rest."""
    view = source if isinstance(source, DocView) else all_documents(source)
    if not 0.0 < val_fraction < 1.0:
        raise UserError(f"val_fraction must be between 0 and 1, got {val_fraction}")
    lens = view.lengths()
    cut = np.floor(lens * (1.0 - val_fraction)).astype(np.int64)
    zero = np.zeros_like(cut)
    train = DocView(view.store, view.indices, 0, zero, cut)
    val = DocView(view.store, view.indices, 0, cut, lens)
    keep_t, keep_v = np.flatnonzero(cut > 0), np.flatnonzero(lens - cut > 0)
    return train.subset(keep_t), val.subset(keep_v)


def first_tokens(source: TokenStore | DocView, n_tokens: int, seed: int = 0) -> DocView:
    """The first ``n_tokens`` tokens of the documents taken in a seeded random order, the last
    document cut so the total is exact: the data-size axis of a sweep. With the same seed a
    smaller size is a prefix of a larger one (nested subsets), so sizes differ only in how
    much data there is, not in which kind."""
    view = source if isinstance(source, DocView) else all_documents(source)
    total = view.n_tokens()
    if n_tokens <= 0:
        raise UserError(f"the training-token cap must be positive, got {n_tokens}")
    if n_tokens > total:
        raise UserError(
            f"data.train_tokens is {n_tokens:,} but the training documents hold only {total:,} tokens; "
            f"lower data.train_tokens or ingest more text"
        )
    order = np.random.default_rng(seed).permutation(len(view))
    lens = view.lengths()[order]
    ends = np.cumsum(lens)
    k = int(np.searchsorted(ends, n_tokens))  # the document where the cap falls
    keep = order[: k + 1]
    begin = np.zeros(k + 1, dtype=np.int64) if view.begin is None else view.begin[keep].astype(np.int64)
    end = begin + view.lengths()[keep].astype(np.int64)
    end[-1] = begin[-1] + (n_tokens - (int(ends[k - 1]) if k else 0))
    return DocView(view.store, view.indices[keep], view.max_len, begin, end)
