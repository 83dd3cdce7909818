"""SPLICE (seed Algorithm 1): breadth-first packing of retrieved related documents.

Per sequence: a random unused root; pop documents breadth first; each popped document
retrieves its top-k related *unused* documents and appends them (and queues them) until
the sequence holds ``context + 1`` tokens; then order (identity / reverse / shuffle) and trim
(``Sequencer`` does roots, ordering, trimming and remainders). A tail carried over from the
previous sequence (``--remainder next``) opens the sequence, but the tree grows from the fresh
root, never from that tail: grown from it, every sequence continued the previous one's path and
k = 1 packed exactly as ``icp`` does. Every document is used at
most once in the whole shard, because the retriever excludes used documents.

Noise (seed Table 7): each of the k slots is, with probability p, filled by a random unused
document of the query's domain instead of a retrieved one. The coin flips come first, so
only the slots that stay "retrieved" are asked of the retriever (p = 1 never queries it)
and p = 1 is exactly within-domain example packing's draw (``ep-domain``). When the
retriever has no related unused document left (BM25: no shared term), the BFS queue runs
dry and the sequence continues from a fresh random root.
"""

from __future__ import annotations

from collections.abc import Iterator

from contextlab.data.packing.retrievers import Retriever
from contextlab.data.packing.sequencer import NAN, Sequencer


def splice_expand(seq: Sequencer, retriever: Retriever | None, noise: float):
    """The RETRIEVE(d, k) step with noise, as an expansion for ``Sequencer.run``."""

    def expand(d: int, k: int) -> Iterator[tuple[int, float]]:
        noisy = seq.rng.random(k) < noise if noise > 0 else None
        n_retrieved = k - int(noisy.sum()) if noisy is not None else k
        found = iter(retriever.query(d, n_retrieved) if n_retrieved and retriever is not None else ())
        for slot in range(k):
            if noisy is not None and noisy[slot]:
                j = seq.random_in_domain(int(seq.domains[d]))
                if j is None:
                    return
                yield j, NAN
            else:
                hit = next(found, None)
                if hit is not None:
                    yield hit

    return expand


def pack_splice(seq: Sequencer, retriever: Retriever | None, cfg) -> None:
    """SPLICE over one shard with ``cfg.k``, ``cfg.noise`` (order and trimming: ``Sequencer``)."""
    if retriever is not None:
        seq.on_take.append(retriever.remove)
    seq.run(splice_expand(seq, retriever, cfg.noise), cfg.k, from_carry=False)
