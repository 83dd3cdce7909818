"""Packing: a token store -> a packed store (document order + sequence boundaries).

Methods (``PACKERS``): ``ep`` example packing, ``ep-domain`` within-domain example packing,
``splice`` (seed Algorithm 1: BFS over retrieved related documents), ``icp`` (In-Context
Pretraining's greedy most-similar path). Retrievers (``RETRIEVERS``): ``bm25`` (bm25s),
``dense`` (sentence-transformers + Faiss), ``repo`` (directory tree). Every packer is
``fn(sequencer, retriever_or_None, config)``; every retriever builder is
``fn(store, doc_ids, config)``. Entry points: ``pack`` (Python API), ``PackedStore``
(reader), ``pack_stats`` (diagnostics).
"""

from __future__ import annotations

from contextlab.data.packing.config import PackConfig
from contextlab.data.packing.dense import build_dense
from contextlab.data.packing.example import pack_ep, pack_ep_domain
from contextlab.data.packing.icp import pack_icp
from contextlab.data.packing.pack import PackReport, pack
from contextlab.data.packing.packed_store import PackedStore, is_packed_store
from contextlab.data.packing.retrievers import build_bm25, build_repo
from contextlab.data.packing.splice import pack_splice
from contextlab.data.packing.stats import pack_stats, zipf_coefficient

PACKERS = {
    "ep": pack_ep,
    "ep-domain": pack_ep_domain,
    "splice": pack_splice,
    "icp": pack_icp,
}

RETRIEVERS = {
    "bm25": build_bm25,
    "dense": build_dense,
    "repo": build_repo,
}

__all__ = [
    "PACKERS",
    "RETRIEVERS",
    "PackConfig",
    "PackReport",
    "PackedStore",
    "is_packed_store",
    "pack",
    "pack_stats",
    "zipf_coefficient",
]
