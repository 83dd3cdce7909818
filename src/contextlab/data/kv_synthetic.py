"""Key-value retrieval files written here, in the lost-in-the-middle format, for any context.

The lost-in-the-middle key-value files (Liu et al. 2023, ``kv-retrieval-{75,140}_keys``) are
themselves synthetic: every example is a list of random UUID keys with random UUID values and
one key to look up. ``write_kv_file`` writes the same format (one JSON object a line, ``key``
and ``ordered_kv_records``; gzip when the name ends in ``.gz``) from a seeded generator, so a
user without the paper's files (or with a model whose context holds only a few pairs of them)
still gets the task: ``contextlab profile`` writes one and fits the pair count to the model.
``pairs_that_fit`` finds the most pairs whose prompt (``eval.kv.kv_prompt``) fits a token budget.

Trade-off: the UUIDs come from a seeded ``random.Random``, not ``uuid.uuid4`` (which reads the
OS entropy pool), so the same seed always writes the same file and a profile resumes on it.
"""

from __future__ import annotations

import gzip
import json
import random
import uuid
from collections.abc import Callable
from pathlib import Path

from contextlab.io import atomic_write_bytes


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def kv_examples(n_examples: int, n_pairs: int, seed: int = 0) -> list[dict]:
    """``n_examples`` examples of ``n_pairs`` random UUID pairs each, one of them the key asked."""
    rng = random.Random(seed)
    out = []
    for _ in range(n_examples):
        records = [[_uuid(rng), _uuid(rng)] for _ in range(n_pairs)]
        out.append({"key": rng.choice(records)[0], "ordered_kv_records": records})
    return out


def kv_lines(examples: list[dict]) -> bytes:
    """The examples as the lines of a key-value file (one JSON object a line, UTF-8)."""
    return "".join(json.dumps(e) + "\n" for e in examples).encode()


def write_kv_file(path: str | Path, n_examples: int, n_pairs: int, seed: int = 0) -> Path:
    """Write the examples to ``path`` atomically (gzip if it ends in .gz); returns the path."""
    path = Path(path)
    text = kv_lines(kv_examples(n_examples, n_pairs, seed))
    atomic_write_bytes(path, gzip.compress(text, mtime=0) if path.name.endswith(".gz") else text)
    return path


def pairs_that_fit(count_tokens: Callable[[int], int], budget: int, most: int = 200) -> int:
    """The largest n <= ``most`` with ``count_tokens(n) <= budget`` (growing with n); 0 if none."""
    lo, hi = 0, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo
