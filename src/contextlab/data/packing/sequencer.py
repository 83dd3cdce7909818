"""The shared engine of every packer: unused-document bookkeeping, roots, trimming, remainders.

All four methods are the same loop with a different *expansion* (which documents follow a
document in a sequence):

* ``ep``: a random unused document;          * ``ep-domain``: a random unused document of
  the same domain;                            * ``splice``: the top-k retrieved unused
  documents, breadth first (seed Algorithm 1); * ``icp``: the single most similar unused
  document, the path continuing across sequences (Shi et al. 2024).

One sequence: start from the pieces carried over from the previous sequence (if any; they
seed the queue, except for splice, whose every sequence grows from a random root after them),
else a random unused root; pop documents breadth first, append what the expansion returns
until the pieces cost at least ``row_len`` tokens (a document costs its length plus one
when a separator follows it); when nothing is left to expand, draw another root. Then
order the pieces (identity / reverse / shuffle) and lay them out: the piece crossing
``row_len`` (its tokens plus its separator) is trimmed and its tail follows the remainder
policy (``drop``, ``next`` = it starts the next sequence, ``pool`` = it goes back to the
random-root pool); a document whose tokens fill the row exactly leaves a tail of no tokens,
its separator alone, so no separator is lost either (``drop`` counts it); whole pieces
past ``row_len`` (only possible after reordering) always start the next sequence, so no
document is silently lost. A document is *taken* once; only its tail pieces reappear.

Trade-off: random draws use one seeded permutation with a moving pointer (and one per
domain, cut from the same permutation), skipping documents taken meanwhile. Each document
is skipped at most once per list, so all draws together cost O(n), and the packing is a
pure function of (documents, config, seed), independent of process count or timing.
The per-domain lists are built on the first within-domain draw, so methods that never draw
within a domain never read the domains (at a million documents, reading them was more than
half of a shard's time).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

import numpy as np

# a piece of a document inside a sequence: (local doc, begin token, end token, similarity)
Piece = tuple[int, int, int, float]
Expand = Callable[[int, int], Iterable[tuple[int, float]]]
NAN = float("nan")


class Sequencer:
    """Packs one shard. Documents are local ids 0..n-1 with ``lengths`` and ``domains`` codes
    (an array, or a function returning it: called only when a method first draws within a domain)."""

    def __init__(
        self,
        lengths: np.ndarray,
        domains: np.ndarray | Callable[[], np.ndarray],
        *,
        row_len: int,
        separator: bool,
        remainder: str,
        order: str,
        rng: np.random.Generator,
    ):
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.n = len(self.lengths)
        self.row_len, self.separator, self.remainder, self.order = row_len, separator, remainder, order
        self.rng = rng
        self.unused = np.ones(self.n, dtype=bool)
        self.n_unused = self.n
        self.on_take: list[Callable[[int], None]] = []
        perm = rng.permutation(self.n)
        self._perm, self._ptr = perm, 0
        self._domains_from = domains
        self._domains: np.ndarray | None = None
        self.pool: list[Piece] = []
        self.carry: list[Piece] = []
        self.sequences: list[list[Piece]] = []
        self.dropped_tokens = 0
        self.dropped_docs: list[int] = []  # taken but never emitted (icp near-duplicates)

    @property
    def domains(self) -> np.ndarray:
        """int64 (n,) domain codes, read on first use (most methods never draw within a domain)."""
        if self._domains is None:
            src = self._domains_from
            domains = np.asarray(src() if callable(src) else src, dtype=np.int64)
            perm = self._perm
            # each domain's documents in random order, domain after domain
            self._dom_perm = perm[np.argsort(domains[perm], kind="stable")]
            counts = np.bincount(domains, minlength=int(domains.max()) + 1 if self.n else 0)
            self._dom_start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
            self._dom_end = np.cumsum(counts).astype(np.int64)
            self._dom_ptr = self._dom_start.copy()
            self._domains = domains
        return self._domains

    # ------------------------------------------------------------------ bookkeeping
    def take(self, i: int) -> None:
        """Mark document ``i`` used (everywhere: also in the retriever's index)."""
        self.unused[i] = False
        self.n_unused -= 1
        for fn in self.on_take:
            fn(i)

    def random_unused(self) -> int | None:
        perm, n = self._perm, self.n
        while self._ptr < n and not self.unused[perm[self._ptr]]:
            self._ptr += 1
        return int(perm[self._ptr]) if self._ptr < n else None

    def random_in_domain(self, domain: int) -> int | None:
        """A random unused document of ``domain``; any unused document once the domain is exhausted."""
        _ = self.domains  # the per-domain lists exist from here on
        p, end, perm = int(self._dom_ptr[domain]), int(self._dom_end[domain]), self._dom_perm
        while p < end and not self.unused[perm[p]]:
            p += 1
        self._dom_ptr[domain] = p
        return int(perm[p]) if p < end else self.random_unused()

    def draw_root(self) -> Piece | None:
        """Uniform over unused documents and pooled tails; the document is taken."""
        total = self.n_unused + len(self.pool)
        if total == 0:
            return None
        if self.pool:
            u = int(self.rng.integers(total))
            if u < len(self.pool):
                piece = self.pool[u]
                self.pool[u] = self.pool[-1]
                self.pool.pop()
                return piece
        i = self.random_unused()
        self.take(i)
        return (i, 0, int(self.lengths[i]), NAN)

    def cost(self, piece: Piece) -> int:
        d, b, e, _ = piece
        return e - b + int(self.separator and e == self.lengths[d])

    # ------------------------------------------------------------------ the loop
    def run(
        self, expand: Expand, k: int, *, path: bool = False, from_carry: bool = True
    ) -> list[list[Piece]]:
        """Build every sequence of the shard. ``path``: the BFS queue survives sequence ends (icp).
        ``from_carry``: the pieces carried into a sequence seed its queue (ep-domain: their domain goes
        on); False: the carried pieces open the sequence and a fresh random root grows the rest (splice:
        a tree per sequence, as the seed's Algorithm 1; grown from the carried tail, k = 1 was one
        path across sequences, icp's)."""
        queue: deque[int] = deque()
        while True:
            pieces, self.carry = self.carry, []
            cost = sum(self.cost(p) for p in pieces)
            if not path:
                queue = deque(p[0] for p in pieces) if from_carry else deque()
            while cost < self.row_len:
                if not queue:
                    root = self.draw_root()
                    if root is None:
                        break
                    pieces.append(root)
                    cost += self.cost(root)
                    queue.append(root[0])
                    continue
                d = queue.popleft()
                for j, sim in expand(d, k):
                    if not self.unused[j]:
                        continue
                    self.take(j)
                    piece = (j, 0, int(self.lengths[j]), float(sim))
                    pieces.append(piece)
                    cost += self.cost(piece)
                    queue.append(j)
                    if cost >= self.row_len:
                        break
            if not pieces:
                return self.sequences
            self._layout(self._ordered(pieces))

    def _ordered(self, pieces: list[Piece]) -> list[Piece]:
        if self.order == "reverse":
            return pieces[::-1]
        if self.order == "shuffle":
            return [pieces[i] for i in self.rng.permutation(len(pieces))]
        return pieces

    def _layout(self, pieces: list[Piece]) -> None:
        room, out = self.row_len, []
        for idx, (d, b, e, s) in enumerate(pieces):
            if room <= 0:
                self.carry.extend((p[0], p[1], p[2], NAN) for p in pieces[idx:])
                break
            if self.cost((d, b, e, s)) <= room:  # its tokens and its separator fit
                out.append((d, b, e, s))
                room -= self.cost((d, b, e, s))
                continue
            # The piece crosses the sequence end: its first `room` tokens stay here, and its tail
            # (the rest and the separator) follows the remainder policy. When only the separator did
            # not fit, the tail holds no token: (d, end, end) is the separator alone.
            out.append((d, b, b + room, s))
            tail = (d, b + room, e, NAN)
            if self.remainder == "next":
                self.carry.append(tail)
            elif self.remainder == "pool":
                self.pool.append(tail)
            else:
                self.dropped_tokens += self.cost(tail)  # the separator too: a row loses it
            self.carry.extend((p[0], p[1], p[2], NAN) for p in pieces[idx + 1 :])
            break
        self.sequences.append(out)


def flatten(sequences: list[list[Piece]], doc_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(entries (n, 3) int64 with global doc ids, seq_offsets int64, similarities float32)."""
    flat = [p for seq in sequences for p in seq]
    entries = np.array([(p[0], p[1], p[2]) for p in flat], dtype=np.int64).reshape(-1, 3)
    if len(entries):
        entries[:, 0] = np.asarray(doc_ids, dtype=np.int64)[entries[:, 0]]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sequences], dtype=np.int64)]).astype(np.int64)
    sims = np.array([p[3] for p in flat], dtype=np.float32)
    return entries, offsets, sims
