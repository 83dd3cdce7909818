"""The packing methods and retrievers: one record each, the only place their names live.

A ``Packer`` record holds the function that fills a shard's ``Sequencer``, its one-line
help and what it uses (a retriever, the ``order`` knob); a ``RetrieverKind`` holds the
builder of a retriever over a shard and its help. ``PackConfig`` validates names and
builds its ``--method`` / ``--retriever`` help from these dicts, ``shards`` calls the
records, and ``contextlab data pack`` lists them; the package ``__init__`` re-exports both
dicts.

Trade-off: the records sit in this small module rather than in the package ``__init__``,
because ``PackConfig`` checks a method name as it is built and ``__init__`` exports
``PackConfig``: records in ``__init__`` would make config and package import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contextlab.data.packing.dense import build_dense
from contextlab.data.packing.example import pack_ep, pack_ep_domain
from contextlab.data.packing.icp import pack_icp
from contextlab.data.packing.retrievers import build_bm25, build_repo
from contextlab.data.packing.splice import pack_splice


@dataclass(frozen=True)
class Packer:
    """A packing method: ``fill(sequencer, retriever_or_None, config)`` lays out the shard."""

    fill: Callable[..., None]
    help: str  # one line for --help: how the method chooses the next document
    retrieves: bool = False  # builds a retriever over each shard (--retriever and its knobs)
    ordered: bool = True  # honours --order; False keeps the method's own order (icp's path)
    knobs: tuple[str, ...] = ()  # the method-specific PackConfig fields it reads (k, noise, ...)


@dataclass(frozen=True)
class RetrieverKind:
    """A retriever: ``build(store, doc_ids, config)`` indexes one shard's documents (with
    ``rows=`` their docs.jsonl rows when ``reads_meta``, ``progress=`` when ``shows_progress``)."""

    build: Callable[..., Any]
    help: str  # one line for --help: what "related" means
    similarity: str = ""  # what its similarity of two documents is, briefly (pack-stats names it)
    knobs: tuple[str, ...] = ()  # the PackConfig fields it reads (bm25_max_tokens, dense_batch, ...)
    reads_meta: bool = False  # relates documents by their metadata (paths), not their text
    shows_progress: bool = False  # its build is slow enough for a bar of its own (dense: the embedding)


PACKERS: dict[str, Packer] = {
    "ep": Packer(pack_ep, "random documents"),
    "ep-domain": Packer(pack_ep_domain, "random documents of one domain"),
    "splice": Packer(
        pack_splice, "BFS over retrieved related documents", retrieves=True, knobs=("k", "noise")
    ),
    "icp": Packer(pack_icp, "greedy most-similar path", retrieves=True, ordered=False, knobs=("icp_dedup",)),
}

RETRIEVERS: dict[str, RetrieverKind] = {
    "bm25": RetrieverKind(
        build_bm25,
        "bm25s over the text",
        "BM25 score / self-score",
        knobs=("bm25_max_tokens",),
        shows_progress=True,
    ),
    "dense": RetrieverKind(
        build_dense,
        "sentence embeddings + Faiss",
        "cosine of the embeddings",
        knobs=(
            "dense_model",
            "dense_max_tokens",
            "dense_batch",
            "dense_device",
            "ivf_min_docs",
            "ivf_nprobe",
        ),
        shows_progress=True,
    ),
    "repo": RetrieverKind(
        build_repo, "depth-first over the directory tree", "1 / (1 + folder steps)", reads_meta=True
    ),
}


def choices_help(records: dict[str, Packer] | dict[str, RetrieverKind]) -> str:
    """``name (help) | name (help) | ...`` for a --help line."""
    return " | ".join(f"{name} ({record.help})" for name, record in records.items())


def specific_knobs() -> set[str]:
    """The PackConfig fields that only some methods or retrievers read."""
    records = [*PACKERS.values(), *RETRIEVERS.values()]
    return {"order", "retriever"} | {knob for record in records for knob in record.knobs}


def retrieving_methods() -> list[str]:
    """Names of the methods that use a retriever."""
    return [name for name, packer in PACKERS.items() if packer.retrieves]
