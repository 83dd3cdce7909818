"""Shards as Ray tasks on a cluster (``--ray``): the same shard functions as the local pool.

``RayExecutor.run`` submits each shard as a Ray task; ``ray`` is imported only when it is chosen
(``ray_engine.connect``). Only as many tasks are submitted as the cluster runs at once, the next as
one finishes (``submit_window``). A task whose worker process dies is run again by Ray (``max_retries``);
a failed shard or an interrupt cancels the others, and a killed driver leaves the finished
shards' outputs and done markers for the next run to skip. Trade-off: the progress bar moves per
finished shard (units and units/s across the cluster, shards done), not per document, so no
counter crosses nodes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from contextlab.data.shards.progress import progress_bar
from contextlab.ray_engine import as_completed, cancel_all, connect, submit_window


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

    def run(self, fn, jobs, total, report, *, progress=True, desc="pack", unit="doc", leave=False) -> None:
        """Run ``fn(*job, None)`` for every job as a Ray task; ``report(stats, bar)`` as each finishes."""
        ray = connect(self.address, self.num_cpus)
        task = ray.remote(fn).options(num_cpus=self.cpus_per_task, max_retries=self.max_retries)
        waiting, submitted = iter(enumerate(jobs)), {}

        def refill(pending: dict) -> None:
            """Submit the next jobs while fewer run than the cluster runs at once."""
            want = submit_window(ray, self.cpus_per_task)
            while len(pending) < want and (nxt := next(waiting, None)) is not None:
                ref = task.remote(*nxt[1], None)
                pending[ref] = submitted[ref] = nxt[0]

        bar = progress_bar(total, progress, f"{desc} (ray)", unit, leave)
        t0, done = time.perf_counter(), 0
        try:
            for _, stats in as_completed(ray, {}, on_tick=bar.refresh, refill=refill):
                done += 1
                bar.update(int(stats.get("n_docs", 0)))
                rate = bar.n / max(time.perf_counter() - t0, 1e-9)
                bar.set_postfix_str(f"shards {done}/{len(jobs)}, {rate:,.0f} {unit}s/s on the cluster")
                report(stats, bar)
        except BaseException:  # a failed shard or an interrupt: stop the others (finished ones are kept)
            cancel_all(ray, submitted)
            raise
        finally:
            bar.close()
