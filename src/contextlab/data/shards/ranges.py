"""Where a sharded job cuts its input: contiguous ranges of items balanced by size.

Pack cuts a token store's documents and ingest cuts a source's files this way. Items stay in
their order (ingest walks folders sorted, so a directory or repository stays in one shard), a
shard is just two integers [lo, hi), and the cuts are found by binary search on the cumulative
sizes, not by a pass over every item. Trade-off: consecutive ranges balance less well than a
free assignment (one huge item makes its shard large), in exchange for locality and order.
"""

from __future__ import annotations

import math

import numpy as np


def shard_ranges(lengths: np.ndarray, n_shards: int) -> list[tuple[int, int]]:
    """``n_shards`` contiguous [lo, hi) ranges of items with about equal total ``lengths``."""
    return ranges_of_ends(np.cumsum(lengths), n_shards)


def ranges_of_ends(cum: np.ndarray, n_shards: int) -> list[tuple[int, int]]:
    """``shard_ranges`` from the cumulative lengths ``cum`` (integers, non-decreasing)."""
    n = len(cum)
    n_shards = max(1, min(n_shards, n))
    total = int(cum[-1]) if n else 0
    # The first end >= total * s / n_shards; for integer ends that is the first >= its ceiling, and an
    # integer needle keeps the search on ``cum`` as it is (a float one would convert it whole).
    needles = [np.int64(math.ceil(total * s / n_shards)) for s in range(1, n_shards)]
    cuts = [0] + [int(np.searchsorted(cum, x, side="left")) + 1 for x in needles] + [n]
    for s in range(1, len(cuts)):  # keep every shard non-empty and cuts increasing
        cuts[s] = min(max(cuts[s], cuts[s - 1] + 1), n - (len(cuts) - 1 - s))
    return [(cuts[s], cuts[s + 1]) for s in range(n_shards)]
