"""Shards in this process or in a pool of spawned worker processes that die with their parent.

``LocalExecutor(workers)`` runs each shard's function in this process (``workers`` 1, or a single
shard) or in a spawned ``ProcessPoolExecutor`` (spawned, so numba/Faiss/torch threads are never
forked). Every worker is tied to the parent's life twice over: on Linux
``prctl(PR_SET_PDEATHSIG, SIGKILL)`` makes the kernel kill it when the parent dies (SIGKILL
included), and everywhere a daemon thread polls the parent pid and exits when it changes (the
worker was re-parented). Without them, idle workers of a killed ``--workers N`` run wait on their
task queue for ever, because each holds a copy of the queue's write end. A worker that starts
after its parent died exits at once. A worker killed mid-shard (by a user, or for memory) ends the
run with one line; the finished shards are kept for the rerun. Trade-off: a failed shard stops
the run (the shards not started are cancelled) rather than letting the others finish.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from contextlab.data.shards.progress import (
    add_to_shared_counter,
    progress_bar,
    timed_from_first,
    use_shared_counter,
)
from contextlab.errors import UserError

PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclass
class LocalExecutor:
    """Shards in this process (``workers`` 1) or in a pool of spawned worker processes."""

    workers: int = 1

    def run(self, fn, jobs, total, report, *, progress=True, desc="pack", unit="doc", leave=False) -> None:
        """Run ``fn(*job, count)`` for every job (``count(n)``: n more units done);
        ``report(stats, bar)`` after each finished job."""
        with progress_bar(total, progress, desc, unit, leave) as bar:
            if self.workers <= 1 or len(jobs) <= 1:
                update = timed_from_first(bar)
                for job in jobs:
                    report(fn(*job, update), bar)
                return
            run_in_pool(fn, jobs, self.workers, report, bar, desc)


def run_in_pool(fn: Callable[..., dict], jobs: list[tuple], workers: int, report, bar, desc: str) -> None:
    """``LocalExecutor.run`` on ``workers`` spawned processes, the bar fed by a shared counter."""
    ctx = mp.get_context("spawn")
    counter = ctx.Value("q", 0)
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(os.getpid(), counter)
    )
    with pool:
        pending = {pool.submit(fn, *job, add_to_shared_counter) for job in jobs}
        update = timed_from_first(bar)
        try:
            while pending:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                update(counter.value - bar.n)
                for future in done:
                    report(future.result(), bar)
        except BrokenProcessPool:  # a worker was killed (by a user, or for memory)
            pool.shutdown(wait=True, cancel_futures=True)
            raise UserError(
                "a worker process died before its shard was finished (killed, or out of memory); "
                f"the shards already finished are kept: run the same command again to {desc} the rest "
                "(with fewer --workers if memory ran out)"
            ) from None
        except BaseException:  # a failed shard, Ctrl-C, SIGTERM: start no other, stop the running ones
            _stop_workers(pool)  # waiting let them finish, and the one queued behind them (a user's
            pool.shutdown(wait=True, cancel_futures=True)  # SIGTERM saw 3 shards written after it)
            raise


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate ``pool``'s worker processes: a shard is written whole or not at all (its file is
    renamed into place), so one stopped half-way is simply done again by the next run."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            process.terminate()
        except (OSError, ValueError):  # already gone
            pass


def _init_worker(parent: int, counter) -> None:
    """Pool initializer: die with process ``parent``; count progress into its ``counter``."""
    use_shared_counter(counter)
    die_with_parent(parent)


def die_with_parent(parent: int) -> None:
    """Exit this process when process ``parent`` dies."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass  # the watchdog below still works
    if os.getppid() != parent:  # the parent died before the kernel was told
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="parent-watchdog", daemon=True).start()


def _watch_parent(parent: int, interval: float = 0.5) -> None:
    while os.getppid() == parent:
        time.sleep(interval)
    os._exit(1)
