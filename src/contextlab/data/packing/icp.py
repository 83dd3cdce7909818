"""In-Context Pretraining (Shi et al. 2024): documents in one greedy most-similar path.

ICP orders a shard as a path: from the current document, walk to the most similar
*unvisited* document; when none is left (no related unused document), start a new path at
a random unvisited document. The path is cut into sequences of ``context + 1`` tokens and
continues across sequence boundaries (unlike SPLICE, which restarts from a random root
in every sequence). Optional near-duplicate filter: a document whose similarity to the
current one is at least ``icp_dedup`` is dropped (taken, never emitted; counted), and the
walk asks for the next best.

Differences from the paper, on purpose: the paper builds a fixed kNN graph first and
starts paths at the lowest-degree unvisited node; we query the exclusion-aware retriever
directly (so "most similar unvisited" is exact, not limited to a kNN list) and start new
paths at random, which keeps the method retriever-agnostic (bm25, dense, repo).
"""

from __future__ import annotations

from collections.abc import Iterator

from contextlab.data.packing.retrievers import Retriever
from contextlab.data.packing.sequencer import Sequencer


def pack_icp(seq: Sequencer, retriever: Retriever, cfg) -> None:
    """The greedy path over one shard (near-duplicate filter: ``cfg.icp_dedup``)."""
    dedup = cfg.icp_dedup
    seq.on_take.append(retriever.remove)

    def expand(d: int, _k: int) -> Iterator[tuple[int, float]]:
        while True:
            hits = retriever.query(d, 1)
            if not hits:
                return
            j, sim = hits[0]
            if dedup > 0 and sim >= dedup:
                seq.take(j)
                seq.dropped_docs.append(j)
                continue
            yield j, sim
            return

    seq.run(expand, 1, path=True)
