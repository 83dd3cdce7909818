"""Views over a token store: subsets of documents, optionally cut to a fixed length.

A view never copies tokens: it is the store plus an index array (and a length cap).
Two views matter for context-use research:

* ``long_documents(store, L)``: every document of at least L tokens, cut to exactly L.
  This is the LongCrawl64 protocol of the compute-optimal-context study: when all
  documents are long, a model trained at context L sees real long-range structure instead
  of concatenated short documents, and contextwise loss curves are comparable.
* ``split_documents(store, val_fraction, seed)``: a train/validation split by document
  (never by token, so no document leaks across), deterministic from the seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contextlab.data.store import TokenStore
from contextlab.errors import UserError


@dataclass
class DocView:
    """Documents ``indices`` of ``store``, each cut to at most ``max_len`` tokens (0 = whole)."""

    store: TokenStore
    indices: np.ndarray
    max_len: int = 0

    def __len__(self) -> int:
        return int(len(self.indices))

    def doc(self, i: int) -> np.ndarray:
        tokens = self.store.doc(int(self.indices[i]))
        return tokens[: self.max_len] if self.max_len else tokens

    def lengths(self) -> np.ndarray:
        lens = self.store.lengths()[self.indices]
        return np.minimum(lens, self.max_len) if self.max_len else lens

    def n_tokens(self) -> int:
        return int(self.lengths().sum())

    def subset(self, positions: np.ndarray) -> "DocView":
        return DocView(self.store, self.indices[np.asarray(positions, dtype=np.int64)], self.max_len)


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
        raise UserError(f"no document has {length} tokens or more (the longest has {longest}); "
                        f"choose a shorter length")
    return DocView(view.store, view.indices[keep], length)


def split_documents(source: TokenStore | DocView, val_fraction: float, seed: int = 0) -> tuple[DocView, DocView]:
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
