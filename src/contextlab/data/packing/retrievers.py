"""Retrievers for SPLICE and ICP: ``bm25`` (bm25s) and ``repo`` (directory tree); ``dense`` is in dense.py.

A retriever is built over one shard's documents (local ids 0..n-1) and answers
``query(d, k)``: up to k *unused* documents most related to d, best first (ties: lower
id), as ``(local id, similarity)``; ``remove(i)`` marks i used. Packing queries one
document at a time and every answer depends on what earlier answers used, so queries
cannot be batched: the cost that matters is one query against a shrinking set.

**Excluding used documents (bm25).** SPLICE consumes clusters: by the time d is popped,
its best matches are often already used, so "fetch top-(k+m) and filter, growing m" needs
m close to the cluster size, worst case n. Instead we score against an index that holds
only unused documents: each query accumulates the posting lists of d's distinct terms
(a numba loop, or vectorized numpy ``np.repeat`` + ``np.bincount`` without numba; cost =
postings touched),
zeroes the few documents used since the last compaction with one boolean mask, and takes
the top k with ``argpartition``. When more than half of the indexed documents are used
the index is *compacted* (postings of used documents removed, a few vectorized passes over
the arrays), so per-query work shrinks with the pool and the total stays within 2x of an
index that deletes instantly. No per-query Python loop touches the corpus. bm25s'
precomputed per-(term, document) scores are kept as they are (idf and length norms of
the whole shard), so compaction never changes an answer.

Query = the document's distinct terms (bm25s tokenizer, English stopwords removed), each
counted once, as in "more like this" search. Similarity = score / the document's score
against itself, so 1.0 means "as related as itself" (an exact duplicate) and thresholds
such as ICP's near-duplicate filter mean the same on every corpus.

**repo.** Documents are ordered depth-first over their ``path`` directories (files of a
directory, then its subdirectories, all sorted). The neighbours of d are the unused files
of d's directory (after d, then before d), then the files that follow d's directory in
that order (its subdirectories, then sibling directories), wrapping around. "Next unused
position" uses union-find with path compression, so a query is O(k α(n)).
Similarity = 1 / (1 + steps between the two directories in the tree).
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import PurePosixPath

import numpy as np

from contextlab.errors import UserError


class Retriever:
    """Interface (see the module docstring)."""

    index_bytes: int = 0
    build_seconds: float = 0.0

    def query(self, d: int, k: int) -> list[tuple[int, float]]:
        raise NotImplementedError

    def remove(self, i: int) -> None:
        raise NotImplementedError


# ---------------------------------------------------------------------------- BM25


def bm25_tokenize(texts: list[str]):
    """bm25s' own tokenizer with English stopwords: (list of term-id lists, vocab)."""
    import bm25s

    tok = bm25s.tokenize(texts, stopwords="en", show_progress=False, return_ids=True)
    return tok.ids, tok.vocab


def decode_texts(store, doc_ids: np.ndarray, max_tokens: int = 0, done=None) -> list[str]:
    """The documents' text, decoded with the store's tokenizer (first ``max_tokens`` if > 0); ``done(n)``:
    n more documents decoded, every 256."""
    tok = store.tokenizer()
    out = []
    for i in doc_ids:
        ids = store.doc(int(i))
        out.append(tok.decode(ids[:max_tokens] if max_tokens else ids))
        if done is not None and len(out) % 256 == 0:
            done(256)
    if done is not None:
        done(len(out) % 256)
    return out


def _accumulate_numpy(terms, indptr, indices, data, m) -> np.ndarray:
    starts, ends = indptr[terms], indptr[terms + 1]
    lens = ends - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(m)
    # positions of all postings: for term t, starts[t] .. ends[t]-1, without a Python loop
    shift = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    at = np.arange(total, dtype=np.int64) + shift
    return np.bincount(indices[at], weights=data[at], minlength=m)


@functools.cache
def _accumulate_kernel():
    """A numba kernel (one pass over the query's postings, ~20x the numpy gather) when numba is installed.

    Made on the first query, so importing this module (as every command that reads a packed store
    does) never imports numba. The compiled kernel is cached on disk beside this file, or under
    $NUMBA_CACHE_DIR or the user's cache folder; where none of those can be written (a read-only
    install run by a user without a home folder) it is compiled in memory for each run instead."""
    try:
        import numba
    except ImportError:  # pragma: no cover - numpy fallback
        return _accumulate_numpy

    def kernel(terms, indptr, indices, data, m):  # pragma: no cover - compiled
        out = np.zeros(m)
        for t in terms:
            for p in range(indptr[t], indptr[t + 1]):
                out[indices[p]] += data[p]
        return out

    try:
        return numba.njit(cache=True, nogil=True)(kernel)
    except RuntimeError:  # "cannot cache function ...: no locator available": nowhere to write the cache
        return numba.njit(cache=False, nogil=True)(kernel)


def _accumulate(terms, indptr, indices, data, m) -> np.ndarray:
    return _accumulate_kernel()(terms, indptr, indices, data, m)


class BM25Retriever(Retriever):
    """Exact BM25 top-k over unused documents with lazy deletion + compaction."""

    def __init__(self, texts: list[str]):
        import bm25s

        t0 = time.perf_counter()
        ids, vocab = bm25_tokenize(texts)
        self.n = len(texts)
        if vocab:
            model = bm25s.BM25()
            model.index((ids, vocab), show_progress=False)
            sc = model.scores
            data = np.asarray(sc["data"], dtype=np.float32)
            indices = np.asarray(sc["indices"], dtype=np.int32)
            indptr = np.asarray(sc["indptr"], dtype=np.int64)
        else:  # no indexable term at all (e.g. only stopwords)
            data, indices, indptr = np.zeros(0, np.float32), np.zeros(0, np.int32), np.zeros(1, np.int64)
        self.self_score = np.bincount(indices, weights=data, minlength=self.n).astype(np.float64)
        # each document's distinct terms (its query), as one CSR array
        uniq = [np.unique(np.asarray(q, dtype=np.int32)) for q in ids]
        self.q_indptr = np.concatenate([[0], np.cumsum([len(u) for u in uniq])]).astype(np.int64)
        self.q_terms = np.concatenate(uniq).astype(np.int32) if uniq else np.zeros(0, np.int32)
        self.data, self.indices, self.indptr = data, indices, indptr
        self.alive = np.arange(self.n, dtype=np.int64)  # compacted position -> local id
        self.pos = np.arange(self.n, dtype=np.int64)  # local id -> compacted position (-1: gone)
        self.dead = np.zeros(self.n, dtype=bool)  # lazily deleted compacted positions
        self.n_dead = 0
        self.compactions = 0
        self.index_bytes = int(
            sum(
                a.nbytes
                for a in (
                    data,
                    indices,
                    indptr,
                    self.q_indptr,
                    self.q_terms,
                    self.self_score,
                    self.alive,
                    self.pos,
                    self.dead,
                )
            )
        )
        self.build_seconds = time.perf_counter() - t0

    def scores(self, d: int) -> np.ndarray:
        """BM25 scores of d's distinct terms against every indexed (compacted) document."""
        terms = self.q_terms[self.q_indptr[d] : self.q_indptr[d + 1]]
        return _accumulate(terms, self.indptr, self.indices, self.data, len(self.alive))

    def query(self, d: int, k: int) -> list[tuple[int, float]]:
        s = self.scores(d)
        s[self.dead] = 0.0
        if k < len(s):  # every document scoring at least the k-th best (ties included), then exact order
            kth = np.partition(s, len(s) - k)[len(s) - k]
            top = np.flatnonzero(s >= max(kth, np.finfo(np.float64).tiny))
        else:
            top = np.flatnonzero(s > 0)
        top = top[np.lexsort((self.alive[top], -s[top]))][:k]
        norm = self.self_score[d] if self.self_score[d] > 0 else 1.0
        return [(int(self.alive[p]), float(s[p] / norm)) for p in top]

    def remove(self, i: int) -> None:
        p = self.pos[i]
        if p < 0 or self.dead[p]:
            return
        self.dead[p] = True
        self.n_dead += 1
        if self.n_dead * 2 > len(self.alive) and len(self.alive) > 64:
            self._compact()

    def _compact(self) -> None:
        keep = ~self.dead
        newpos = np.cumsum(keep) - 1
        live_post = keep[self.indices]
        term_of = np.repeat(np.arange(len(self.indptr) - 1), np.diff(self.indptr))[live_post]
        counts = np.bincount(term_of, minlength=len(self.indptr) - 1)
        self.indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.indices = newpos[self.indices[live_post]].astype(np.int32)
        self.data = self.data[live_post]
        self.pos[self.alive[self.dead]] = -1
        self.alive = self.alive[keep]
        self.pos[self.alive] = np.arange(len(self.alive))
        self.dead = np.zeros(len(self.alive), dtype=bool)
        self.n_dead = 0
        self.compactions += 1


# ---------------------------------------------------------------------------- repository tree


def _dfs_key(path: str) -> list[tuple[int, str]]:
    parts = PurePosixPath(path).parts
    return [(1, p) for p in parts[:-1]] + [(0, parts[-1] if parts else "")]


class RepoRetriever(Retriever):
    """Depth-first neighbours in the directory tree (see the module docstring)."""

    def __init__(self, paths: list[str]):
        t0 = time.perf_counter()
        if any(not p for p in paths):
            raise UserError(
                "the repo retriever needs a source path for every document (docs.jsonl 'path'); "
                "ingest a folder, or use --retriever bm25"
            )
        n = len(paths)
        order = sorted(range(n), key=lambda i: (_dfs_key(paths[i]), i))
        self.order = np.array(order, dtype=np.int64)  # DFS position -> local id
        self.pos = np.empty(n, dtype=np.int64)
        self.pos[self.order] = np.arange(n)
        dirs = [str(PurePosixPath(paths[i]).parent) for i in order]
        self.dir_start = np.zeros(n, dtype=np.int64)
        self.dir_end = np.zeros(n, dtype=np.int64)
        start = 0
        for p in range(1, n + 1):
            if p == n or dirs[p] != dirs[start]:
                self.dir_start[start:p], self.dir_end[start:p] = start, p
                start = p
        self.dirs = dirs
        self.n = n
        self._next = np.arange(n + 1, dtype=np.int64)  # union-find: next unused position >= p (n = none)
        self._prev = np.arange(
            n + 1, dtype=np.int64
        )  # shifted by one: prev unused position <= p-1 (0 = none)
        self.index_bytes = int(self.order.nbytes * 6)
        self.build_seconds = time.perf_counter() - t0

    @staticmethod
    def _find(parent: np.ndarray, x: int) -> int:
        root = x
        while parent[root] != root:
            root = int(parent[root])
        while parent[x] != root:
            parent[x], x = root, int(parent[x])
        return root

    def _next_unused(self, p: int) -> int:  # n when none
        return self._find(self._next, p) if p < self.n else self.n

    def _prev_unused(self, p: int) -> int:  # -1 when none
        return self._find(self._prev, p + 1) - 1 if p >= 0 else -1

    def remove(self, i: int) -> None:
        p = int(self.pos[i])
        self._next[p] = p + 1
        self._prev[p + 1] = p

    def similarity(self, a: int, b: int) -> float:
        da, db = PurePosixPath(self.dirs[self.pos[a]]).parts, PurePosixPath(self.dirs[self.pos[b]]).parts
        common = 0
        for x, y in zip(da, db):
            if x != y:
                break
            common += 1
        return 1.0 / (1 + len(da) + len(db) - 2 * common)

    def query(self, d: int, k: int) -> list[tuple[int, float]]:
        p = int(self.pos[d])
        lo, hi = int(self.dir_start[p]), int(self.dir_end[p])
        found: list[int] = []
        q = self._next_unused(p + 1)
        while q < hi and len(found) < k:  # same directory, after d
            found.append(q)
            q = self._next_unused(q + 1)
        q = self._prev_unused(p - 1)
        while q >= lo and len(found) < k:  # same directory, before d
            found.append(q)
            q = self._prev_unused(q - 1)
        q, wrapped = self._next_unused(hi), False
        while len(found) < k:  # depth-first onwards (subdirectories, siblings), wrapping around once
            if q >= self.n:
                if wrapped:
                    break
                wrapped, q = True, self._next_unused(0)
                continue
            if wrapped and q >= lo:
                break
            found.append(q)
            q = self._next_unused(q + 1)
        return [(int(self.order[q]), self.similarity(d, int(self.order[q]))) for q in found]


def build_bm25(store, doc_ids: np.ndarray, cfg, progress: bool = False) -> BM25Retriever:
    """The BM25 index of a shard; ``progress``: a bar over the documents read, then 'indexing' (a shard of
    Django's 4,656 files took 3 s to decode and 6 s to index, which the pack's bar of packed documents
    spent at 0)."""
    from contextlab.data.shards.progress import progress_bar

    t0 = time.perf_counter()
    with progress_bar(len(doc_ids), progress, "bm25: reading documents") as bar:
        texts = decode_texts(store, doc_ids, cfg.bm25_max_tokens, bar.update)
        bar.set_description("bm25: indexing")
        r = BM25Retriever(texts)
    r.build_seconds = time.perf_counter() - t0
    return r


def build_repo(store, doc_ids: np.ndarray, cfg, rows: list[dict] | None = None) -> RepoRetriever:
    """``rows``: the docs.jsonl rows of ``doc_ids`` (packing passes its shard's); None reads the
    whole file."""
    if rows is None:
        meta = store.docs_meta()
        rows = [meta[int(i)] for i in doc_ids]
    if any("row" in r and "file" not in r for r in rows):
        _warn_no_paths(str(store.path))
    return RepoRetriever([str(r.get("path") or "") for r in rows])


@functools.cache  # one line per store, not one per shard
def _warn_no_paths(store: str) -> None:
    print(
        f"warning: the documents of {store} are rows of JSONL/Parquet files with no path of their own: "
        "the repo retriever sees one folder per file; ingest with --path-field NAME",
        file=sys.stderr,
    )
