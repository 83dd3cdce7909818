"""Tiny stores for packing tests (byte tokenizer: token ids are the UTF-8 bytes, EOT = 256)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from contextlab.data.ingest import IngestConfig, ingest
from contextlab.data.store import TokenStore
from tests.conftest import write_tree

EOT = 256


def make_store(root: Path, files: dict[str, str], name: str = "store") -> TokenStore:
    write_tree(root / f"{name}_src", files)
    return ingest(root / f"{name}_src", root / name, IngestConfig(tokenizer="byte"), progress=False).store


def paths_of(store: TokenStore) -> list[str]:
    return [m["path"] for m in store.docs_meta()]


def sequences_as_paths(packed, store: TokenStore) -> list[list[str]]:
    paths = paths_of(store)
    return [[paths[int(d)] for d in packed.sequence_entries(i)[:, 0]] for i in range(packed.n_sequences)]


def mixed_corpus(n: int = 40, seed: int = 0) -> dict[str, str]:
    """Documents of varied lengths in 4 folders, words from a small vocabulary (some shared)."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(60)]
    files = {}
    for i in range(n):
        words = rng.choice(vocab, size=int(rng.integers(3, 60)))
        files[f"d{i % 4}/doc{i:03d}.txt"] = " ".join(words) + f" tag{i % 7}"
    return files
