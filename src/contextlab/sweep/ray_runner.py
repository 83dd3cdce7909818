"""Sweep runs as Ray tasks (``contextlab sweep SWEEP.toml --ray [ADDRESS]``).

Each pending run becomes one Ray task holding its resources (CPUs, GPUs per run); the task
runs the run's own command chain (``runner._run_one``: train, under torchrun on the task's node
when a run has several processes, then its evaluations) and returns its exit status and
seconds. The driver records the start and the end with the local runner's own code
(``runner.Sweep.start`` / ``end``: sweep_state.json, RUN/sweep_status.json, results.csv), so
resume, skipping finished runs and the failure records are those of the local runner.

Trade-off: run directories, logs and the token stores must be on a filesystem every node
sees at the same path; in exchange nothing but an exit status crosses the network.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from contextlab.ray_engine import as_completed, cancel_all, connect
from contextlab.sweep.runner import Sweep, _run_one
from contextlab.sweep.spec import Run, SweepSection

LOST = -9  # the exit status recorded for a run whose Ray task was lost (as a process killed by SIGKILL)


def run_chain(section: SweepSection, run: Run, threads: int, nproc: int) -> tuple[int, float]:
    """Run one sweep run's commands to the end where this task runs: (exit status, seconds)."""
    t0 = time.time()
    proc = _run_one(section, run, threads, nproc)
    try:
        code = proc.wait()
    finally:
        proc.log.close()
    return code, time.time() - t0


@dataclass
class RayRuns:
    """Where and with what each run goes: the cluster ``address`` (None: a local instance with
    ``num_cpus``, 0 = all), ``cpus`` and ``gpus`` reserved per run, ``procs`` training processes
    per run (torchrun on one node when > 1; threads per process = cpus // procs)."""

    address: str | None = None
    num_cpus: int = 0
    cpus: float = 1.0
    gpus: float = 0.0
    procs: int = 1

    def run(self, sweep: Sweep, todo: list[Run]) -> None:
        ray = connect(self.address, self.num_cpus)
        threads = sweep.section.threads_per_run or max(1, int(self.cpus) // max(1, self.procs))
        task = ray.remote(run_chain).options(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=0)
        refs = {}
        for run in todo:
            sweep.start(run, "queued on Ray:")  # Ray starts it when a node has its resources
            refs[task.remote(sweep.section, run, threads, self.procs)] = run
        try:
            for run, result in as_completed(ray, refs, on_tick=sweep.tick, errors=True):
                if isinstance(result, Exception):  # its worker or node was lost: a failed run, as a crash
                    print(f"{run.name}: the Ray task failed: {str(result).splitlines()[0][:300]}")
                    result = (LOST, 0.0)
                sweep.end(run, *result)
        except BaseException:
            cancel_all(ray, refs)
            raise
