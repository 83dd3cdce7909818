"""Packing: a token store -> a packed store (document order + sequence boundaries).

Methods (``PACKERS``, one ``Packer`` record each): ``ep`` example packing, ``ep-domain``
within-domain example packing, ``splice`` (seed Algorithm 1: BFS over retrieved related
documents), ``icp`` (In-Context Pretraining's greedy most-similar path). Retrievers
(``RETRIEVERS``, one ``RetrieverKind`` each): ``bm25`` (bm25s), ``dense``
(sentence-transformers + Faiss), ``repo`` (directory tree). The records live in
``methods`` (``PackConfig`` validates names against them as it is built) and are the only
list of names: the config's help, the shards and the command line all read them. Entry
points: ``pack`` (Python API), ``PackedStore`` (reader), ``pack_stats`` (diagnostics).
"""

from __future__ import annotations

from contextlab.data.packing.config import PackConfig
from contextlab.data.packing.methods import PACKERS, RETRIEVERS, Packer, RetrieverKind
from contextlab.data.packing.pack import PackReport, pack
from contextlab.data.packing.packed_store import PackedStore, is_packed_store
from contextlab.data.packing.stats import pack_stats, zipf_coefficient

__all__ = [
    "PACKERS",
    "RETRIEVERS",
    "PackConfig",
    "PackReport",
    "PackedStore",
    "Packer",
    "RetrieverKind",
    "is_packed_store",
    "pack",
    "pack_stats",
    "zipf_coefficient",
]
