"""Ray, the optional engine that spreads shards and sweep runs over a cluster.

``connect`` joins a running cluster (``--ray ADDRESS``) or starts a local instance
(``--ray`` alone, or ``--ray local``), importing ``ray`` only then: contextlab works
without it, and a missing install is one line naming the extra. ``as_completed`` hands
back task results in the order they finish, so callers can record each one at once.

Trade-off: tasks exchange only small records with the driver; the shards' inputs and
outputs are files on a filesystem every node sees at the same path (a shared filesystem
is required). That keeps the driver's memory and the object store out of the data path,
at the cost of not working on clusters without shared storage.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from contextlab.errors import UserError

LOCAL = "local"  # --ray with no address, or --ray local: a Ray instance on this machine
RAY_HELP = (
    "run on Ray: ADDRESS of a running cluster (ray://host:10001, host:6379 or auto), or nothing "
    "(or 'local') for a Ray instance on this machine; every node must see the input and --out at the same "
    "path (a shared filesystem); needs `pip install contextlab[ray]` (default: no Ray, all in this "
    "process)"
)
RAY_CPUS_HELP = (
    "CPUs of the local Ray instance started by --ray without an address; 0 = all of them (default: 0)"
)


def import_ray():
    """The ``ray`` module, or one line saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs the ray package: pip install 'contextlab[ray]'") from None
    return ray


_STARTED: list[bool] = []  # set when ``connect`` initialised Ray in this process


def shutdown() -> None:
    """End the Ray connection (and a local instance) that ``connect`` started in this process, if any.
    The command line calls it when a command ends, where an interrupt is one line: left to Ray's exit
    handler, a Ctrl-C during the shutdown printed a traceback after the result and exited 0."""
    if _STARTED:
        import sys

        _STARTED.clear()
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()


def connect(address: str | None, num_cpus: int = 0):
    """Join the cluster at ``address`` (a local instance for None/'local'); returns ``ray``.

    A Ray already initialised in this process (a test's fixture, a notebook) is used as it is.
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    local = address in (None, "", LOCAL)
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
    if local and num_cpus > 0:
        kwargs["num_cpus"] = num_cpus
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if "-packages" not in src:  # a source checkout: workers import contextlab from it, as the driver
        path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
        kwargs["runtime_env"] = {"env_vars": {"PYTHONPATH": path}}
    try:
        ray.init(address=None if local else address, **kwargs)
        _STARTED.append(True)
    except Exception as exc:  # Ray raises plain Exception too ("The current node timed out during startup")
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        if local:
            raise UserError(
                f"Ray could not start a local instance ({why}); stop stale Ray processes (`ray stop`), "
                "check that /tmp has free space, and run again, or run without --ray"
            ) from None
        raise UserError(
            f"cannot reach the Ray cluster at {address}: {why}; start it with "
            "`ray start --head` or pass its address (or --ray alone for a local instance)"
        ) from None
    return ray


def as_completed(
    ray,
    refs: dict,
    poll: float = 0.5,
    on_tick: Callable[[], None] | None = None,
    errors: bool = False,
    refill: Callable[[dict], None] | None = None,
) -> Iterator:
    """Yield ``(key, result)`` of ``refs`` ({ObjectRef: key}) as the tasks finish; a failed task
    raises its error here (``errors``: its error is yielded as the result). ``on_tick()`` runs
    every ``poll`` seconds while waiting. ``refill(pending)`` adds tasks to ``pending``, first before
    any wait and then after each finished one is handed back (``submit_window``), so nothing is
    submitted after the consumer stops."""
    pending = dict(refs)
    if refill is not None:
        refill(pending)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=poll)
        if on_tick is not None:
            on_tick()
        for ref in done:
            key = pending.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as exc:  # the task raised, or its worker or node was lost
                if not errors:
                    cause = getattr(exc, "cause", None)
                    if isinstance(cause, UserError):  # bad input found in a task: its one line, no traceback
                        raise cause from None
                    raise
                result = exc
            yield key, result
            if refill is not None:
                refill(pending)


def submit_window(ray, cpus_per_task: float) -> int:
    """How many tasks to keep submitted at once: as many as the cluster's CPUs run side by side (read
    again at every refill, so nodes that join are used). Tasks Ray would hold in its own queue are
    not submitted at all: cancelling a queued task at the instant Ray hands it to a worker fails a
    check inside Ray (2.60) that ends the driver process (an interrupted ingest then exited 1, with
    no message and no cleanup). Trade-off: an autoscaler sees no queued tasks to add nodes for."""
    cpus = float(ray.cluster_resources().get("CPU", 1.0))
    return max(1, int(cpus // max(cpus_per_task, 1e-9)))


def cancel_all(ray, refs) -> None:
    """Cancel tasks that have not finished (after a failure or an interrupt), the last submitted first:
    Ray starts tasks in the order they were submitted, so those still in its queue go before a
    running one ends and frees a worker for them (see ``submit_window`` for why a queued task
    must not be handed out while it is being cancelled)."""
    refs = list(refs)
    done, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if refs else ([], [])
    finished = set(done)
    for ref in reversed(refs):
        if ref in finished:
            continue
        try:
            ray.cancel(ref, force=True)
        except Exception:  # already finished or gone: nothing to cancel
            pass
