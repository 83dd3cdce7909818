"""Progress of sharded work: one bar of units done (documents, rows), fed from any process.

A shard's function is handed a counting hook ``count(n)``. In this process it is the bar's own
``update``; in a spawned pool worker it is ``add_to_shared_counter``, which adds to one counter
shared with the parent (set up by ``use_shared_counter``), and the parent redraws the bar from it
twice a second; on Ray no counter crosses nodes and the bar moves per finished shard. ``batched``
sits in front of a hook, so a shard that sees every document touches the shared counter once per
``BATCH``. Trade-off: one lock per ``BATCH`` units across processes instead of exact counts.
"""

from __future__ import annotations

from collections.abc import Callable

BATCH = 64  # units counted locally before the shared counter is touched
_counter = None  # in a pool worker: the parent's shared counter


def progress_bar(
    total: int | None, enabled: bool, desc: str = "pack", unit: str = "doc", leave: bool = False
):
    """A tqdm bar of ``unit`` done (on stderr; lines about finished shards go through ``bar.write``)."""
    from contextlab import bars

    return bars.bar(
        total=total, unit=unit, desc=desc, disable=None if enabled else True, dynamic_ncols=True, leave=leave
    )


def timed_from_first(bar) -> Callable[[int], None]:
    """``bar.update`` whose clock (elapsed, rate, ETA) starts at the first unit done, so the minutes a
    shard spends before its first document (loading and running an embedding model) do not enter
    the rate: a dense packing's bar said 37 minutes left and finished in 2.4."""
    started = [False]

    def update(n: int) -> None:
        if n and not started[0]:
            started[0] = True
            if bar.n == 0 and hasattr(bar, "reset"):  # a tqdm bar (a caller's own counter has no clock)
                bar.reset(total=bar.total)
        bar.update(n)

    return update


def draws_here() -> bool:
    """Whether this process may draw a bar of its own: not a pool worker, whose parent draws the one
    bar (a Ray task's stderr is no terminal, so a bar there hides itself)."""
    return _counter is None


def use_shared_counter(counter) -> None:
    """In a pool worker: count into ``counter`` (a ``multiprocessing.Value`` of the parent)."""
    global _counter
    _counter = counter


def add_to_shared_counter(n: int) -> None:
    """Count ``n`` more units done (in a pool worker: on the parent's shared counter)."""
    if _counter is not None:
        with _counter.get_lock():
            _counter.value += n


def batched(add: Callable[[int], None]) -> tuple[Callable[[int], None], Callable[[], None]]:
    """(per-unit hook, flush): ``add`` is called once per ``BATCH`` units and at flush."""
    pending = [0]

    def one(_unit: int) -> None:
        pending[0] += 1
        if pending[0] >= BATCH:
            add(pending[0])
            pending[0] = 0

    def flush() -> None:
        if pending[0]:
            add(pending[0])
            pending[0] = 0

    return one, flush
