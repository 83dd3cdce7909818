"""Shard worker processes that die with their parent, and a progress bar of documents packed.

``run_shards`` packs shards in this process or in a spawned process pool. Every worker is
tied to the parent's life twice over: on Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` makes
the kernel kill it when the parent dies (SIGKILL included), and everywhere a daemon thread
polls the parent pid and exits when it changes (the worker was re-parented). Without them,
idle workers of a killed ``contextlab data pack --workers N`` wait on their task queue for
ever, because each holds a copy of the queue's write end. A worker that starts after its
parent died exits at once.

Progress: every packed (taken) document of a shard counts, so the bar moves inside a shard,
not only between shards. Workers add to one shared counter in batches of ``BATCH`` documents
and the parent redraws the bar from it twice a second. Trade-off: one lock per ``BATCH``
documents across processes, instead of exact per-document counts.
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

from contextlab.errors import UserError

BATCH = 64  # documents counted locally before the shared counter is touched
PR_SET_PDEATHSIG = 1  # linux/prctl.h
_counter = None  # in a worker: the parent's shared documents-packed counter


def progress_bar(total: int, enabled: bool):
    """A tqdm bar of documents packed (on stderr; shard lines go through ``bar.write``)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="doc", desc="pack", disable=not enabled, dynamic_ncols=True, leave=False)


def die_with_parent(parent: int, counter=None) -> None:
    """Worker initializer: exit when process ``parent`` dies; keep the shared ``counter``."""
    global _counter
    _counter = counter
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


def add_to_shared_counter(n: int) -> None:
    """Count ``n`` more documents packed (in a worker: on the parent's shared counter)."""
    if _counter is not None:
        with _counter.get_lock():
            _counter.value += n


def batched(add: Callable[[int], None]) -> tuple[Callable[[int], None], Callable[[], None]]:
    """(per-document hook, flush): ``add`` is called once per ``BATCH`` documents and at flush."""
    pending = [0]

    def one(_doc: int) -> None:
        pending[0] += 1
        if pending[0] >= BATCH:
            add(pending[0])
            pending[0] = 0

    def flush() -> None:
        if pending[0]:
            add(pending[0])
            pending[0] = 0

    return one, flush


def run_shards(
    fn: Callable[..., dict],
    jobs: list[tuple],
    total_docs: int,
    workers: int,
    report: Callable[[dict, object], None],
    progress: bool,
) -> None:
    """Run ``fn(*job, add)`` for every job (``add(n)`` counts documents packed), in this process
    or in ``workers`` spawned processes; ``report(stats, bar)`` after each finished job."""
    with progress_bar(total_docs, progress) as bar:
        if workers <= 1 or len(jobs) <= 1:
            for job in jobs:
                report(fn(*job, bar.update), bar)
            return
        ctx = mp.get_context("spawn")
        counter = ctx.Value("q", 0)
        pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=die_with_parent, initargs=(os.getpid(), counter)
        )
        with pool:
            pending = {pool.submit(fn, *job, add_to_shared_counter) for job in jobs}
            try:
                while pending:
                    done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    bar.update(counter.value - bar.n)
                    for future in done:
                        report(future.result(), bar)
            except BrokenProcessPool:  # a worker was killed (by a user, or for memory)
                pool.shutdown(wait=True, cancel_futures=True)
                raise UserError(
                    "a worker process died before its shard was finished (killed, or out of memory); "
                    "the shards already finished are kept: run the same command again to pack the rest"
                    + (" (with fewer --workers if memory ran out)" if workers > 1 else "")
                ) from None
            except BaseException:  # a failed shard: do not start the others (finished ones are kept)
                pool.shutdown(wait=True, cancel_futures=True)
                raise
