"""The shard contract: what a sharded job (ingest parts, pack shards, export splits) gives the engine.

A job is cut into shards numbered 0..n-1 (``ranges`` cuts its input; the numbers of the files),
named from 1 in every message ("shard 2/4" is shard 1, ``ShardedJob.name``). Each shard is run as
``fn(*inputs, count)``: a top-level function, so a spawned process or a Ray task can import it,
given small picklable inputs (paths, ranges, the config) and a counting hook ``count(n)`` for the
progress bar (``progress``). It reads its input from the filesystem, writes its output atomically,
then its done marker (``done_markers``: the job's fingerprint, the shard's stats, a checksum of
its output), and returns its small stats record. The executor only decides where it runs
(``local_pool``: this process or spawned processes; ``on_ray``: Ray tasks).

Before running, ``shards_to_run`` asks the job's ``check`` for every shard's marker: a shard whose
marker checks out is skipped, one whose marker is unusable is named with the reason and run
again, the rest simply run. ``finished_stats`` collects every shard's stats once all have run.
So a killed run is resumed by the same command, and since a shard's output depends only on its
inputs, the result does not depend on where, or in which order, the shards ran. Trade-off: the
shard is the unit of redo (a shard killed half-way starts again unless its function resumes
itself, as ingest parts do), and inputs and outputs are files, so machines need a shared
filesystem.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from contextlab.errors import UserError

Report = Callable[[dict, object], None]  # (stats of a finished shard, the progress bar)
Check = Callable[[int, bool], tuple[dict | None, str | None]]
"""``check(i, checksum)``: shard i's done marker, read (and its output's checksum compared when
``checksum``): (stats, None) done; (None, why) an unusable marker; (None, None) no marker."""


class ShardExecutor(Protocol):
    def run(
        self,
        fn: Callable[..., dict],
        jobs: list[tuple],
        total: int | None,
        report: Report,
        *,
        progress: bool = True,
        desc: str = "pack",
        unit: str = "doc",
        leave: bool = False,
    ) -> None:
        """Run ``fn(*job, count)`` for every job; ``report(stats, bar)`` as each one finishes."""


@dataclass(frozen=True)
class ShardedJob:
    """A job the engine runs shard by shard."""

    fn: Callable[..., dict]  # fn(*inputs, count) -> stats: one shard, output and done marker written
    check: Check  # reads shard i's done marker (see ``Check``)
    marker: Callable[[int], Path]  # where shard i's done marker is (named when it is unusable)
    noun: str = "shard"  # what one shard is called in messages ("part")
    verb: str = "pack"  # what the job does: the progress bar's label, "packing it again"
    unit: str = "doc"  # what ``count`` counts
    n: int = 0  # how many shards the job has, for "shard 2/4" in messages (0: not said)

    def name(self, i: int) -> str:
        """Shard ``i`` (0-based, as in the file names) in words: counted from 1, as "shard 2/4"."""
        return f"{self.noun} {i + 1}" + (f"/{self.n}" if self.n else "")

    def run(
        self, executor: ShardExecutor, jobs: list[tuple], total: int | None, report: Report, progress: bool
    ):
        """Run the shards whose inputs are ``jobs`` on ``executor``."""
        executor.run(self.fn, jobs, total, report, progress=progress, desc=self.verb, unit=self.unit)


def shards_to_run(job: ShardedJob, indices: list[int], say: Callable[[str], None] = print) -> list[int]:
    """The shards of ``indices`` without a usable done marker (checksum compared); each one whose
    marker is there but unusable is named with what is wrong, in one line through ``say``."""
    todo = []
    for i in indices:
        stats, why = job.check(i, True)
        if stats is None:
            todo.append(i)
            if why is not None:
                gerund = job.verb[:-1] if job.verb.endswith("e") else job.verb
                say(f"{job.name(i)}: {job.marker(i).name} is not usable ({why}); {gerund}ing it again")
    return todo


def finished_stats(job: ShardedJob, indices: list[int], where: Path) -> list[dict]:
    """The stats of every shard of ``indices``, read from their done markers (the outputs were
    checked before the run or written by it: no checksum); one line naming the first missing."""
    stats = []
    for i in indices:
        got, why = job.check(i, False)
        if got is None:
            raise UserError(
                f"{job.name(i)} of {where} ({job.marker(i).name}) is {why or 'missing'}; "
                f"run the same command again to {job.verb} it again"
            )
        stats.append(got)
    return stats
