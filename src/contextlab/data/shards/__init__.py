"""The shard engine: one contract for the sharded work of ingest, pack and export.

``contract``: what a shard is (a top-level function over small inputs that writes its output,
then its done marker) and which shards a run still has to do; ``done_markers``: the done record
(fingerprint, stats, checksum) and its check; ``ranges``: contiguous input ranges balanced by
size; ``progress``: one progress bar fed from any process; ``local_pool`` and ``on_ray``: the
executors (``EXECUTORS``, the plain dict of where shards can run). What a shard does stays with
its job: ``packing.shards`` packs a shard of documents, ``ingest_parts`` ingests a part of a
source, ``export`` writes a split. Trade-off: shards talk to the driver only through small stats
records and files, so scaling out needs a shared filesystem, never the driver's memory.
"""

from __future__ import annotations

from contextlab.data.shards.contract import ShardedJob, ShardExecutor, finished_stats, shards_to_run
from contextlab.data.shards.local_pool import LocalExecutor
from contextlab.data.shards.on_ray import RayExecutor

EXECUTORS = {
    "local": LocalExecutor,  # this process (workers 1) or a pool of spawned processes
    "ray": RayExecutor,  # Ray tasks on a cluster (or a local Ray instance)
}


def make_executor(ray: str | None, workers: int = 1, ray_cpus: int = 0) -> ShardExecutor:
    """``RayExecutor`` when ``--ray`` was given (``ray`` is its address, '' or 'local' for a local
    instance), else the local process pool of ``workers``."""
    if ray is None:
        return EXECUTORS["local"](workers)
    return EXECUTORS["ray"](address=ray or None, num_cpus=ray_cpus)


__all__ = [
    "EXECUTORS",
    "LocalExecutor",
    "RayExecutor",
    "ShardExecutor",
    "ShardedJob",
    "finished_stats",
    "make_executor",
    "shards_to_run",
]
