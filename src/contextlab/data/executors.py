"""Where shards run: local processes (the default) or Ray tasks; the same shard functions for both.

A shard function (``packing.shards.run_shard``, ``ingest_shards.ingest_part``) reads its input
from the filesystem, writes its result there atomically and returns a small stats record
(with ``n_docs``); the executor only decides where it runs. ``LocalExecutor`` is the spawned
process pool of ``packing.workers``. ``RayExecutor`` submits each shard as a Ray task:
``ray`` is imported only when it is chosen, a task whose worker process dies is run again by
Ray (``max_retries``), and a killed driver leaves the finished shard files for the next run
to skip. Trade-off: on Ray the progress bar moves per finished shard (documents and
documents/s across the cluster, shards done), not per document, so no counter crosses nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from contextlab.ray_engine import as_completed, cancel_all, connect

Report = Callable[[dict, object], None]  # (stats of a finished shard, the progress bar)


class ShardExecutor(Protocol):
    def run(self, fn: Callable[..., dict], jobs: list[tuple], total_docs: int, report: Report, **kw) -> None:
        """Run ``fn(*job, count)`` for every job; ``report(stats, bar)`` as each one finishes."""


@dataclass
class LocalExecutor:
    """Shards in this process (``workers`` 1) or in a pool of spawned worker processes."""

    workers: int = 1

    def run(self, fn, jobs, total_docs, report, *, progress=True, desc="pack") -> None:
        from contextlab.data.packing.workers import run_shards  # here: packing imports this module

        run_shards(fn, jobs, total_docs, self.workers, report, progress)


@dataclass
class RayExecutor:
    """Shards as Ray tasks on the cluster at ``address`` (None: a local Ray instance).

    ``num_cpus``: CPUs of that local instance (0 = all); ``cpus_per_task``: CPUs each shard
    reserves; ``max_retries``: runs of a shard whose worker process died before Ray gives up.
    """

    address: str | None = None
    num_cpus: int = 0
    cpus_per_task: float = 1.0
    max_retries: int = 3

    def run(self, fn, jobs, total_docs, report, *, progress=True, desc="pack") -> None:
        from tqdm.auto import tqdm

        ray = connect(self.address, self.num_cpus)
        task = ray.remote(fn).options(num_cpus=self.cpus_per_task, max_retries=self.max_retries)
        refs = {task.remote(*job, None): i for i, job in enumerate(jobs)}
        bar = tqdm(total=total_docs, unit="doc", desc=f"{desc} (ray)", disable=not progress, leave=False)
        t0, done = time.perf_counter(), 0
        try:
            for _, stats in as_completed(ray, refs, on_tick=bar.refresh):
                done += 1
                bar.update(int(stats.get("n_docs", 0)))
                rate = bar.n / max(time.perf_counter() - t0, 1e-9)
                bar.set_postfix_str(f"shards {done}/{len(jobs)}, {rate:,.0f} docs/s on the cluster")
                report(stats, bar)
        except BaseException:  # a failed shard or an interrupt: stop the others (finished ones are kept)
            cancel_all(ray, refs)
            raise
        finally:
            bar.close()


def make_executor(ray: str | None, workers: int = 1, ray_cpus: int = 0) -> ShardExecutor:
    """``RayExecutor`` when ``--ray`` was given (``ray`` is its address, '' or 'local' for a local
    instance), else the local process pool."""
    if ray is None:
        return LocalExecutor(workers)
    return RayExecutor(address=ray or None, num_cpus=ray_cpus)
