"""Progress for evaluations: bars over their long loops, and the one line of resolved settings.

Every evaluation that runs for more than a moment shows where it is: ``bar`` wraps a loop in a
tqdm bar on stderr. Bars show on a terminal only (tqdm's ``disable=None``: nothing when stderr
is a file or a pipe, so logs and tests stay clean) and never when a command was given
``--no-progress`` (``set_enabled(False)``). Bars close when their loop ends (``leave=False``),
so a battery of evaluations under one outer bar (``contextlab profile``) leaves one line per
evaluation, not one per loop. ``settings_line`` is the line an evaluation prints before it
starts: what it is about to do, with every default already resolved against the model.

Trade-off: one module-level switch instead of a ``progress`` argument threaded through every
evaluation function and the loops inside them; evaluations stay plain functions of
(adapter, options, data) and the command line decides once whether bars may show.
"""

from __future__ import annotations

from collections.abc import Iterable

_ENABLED = True


def set_enabled(enabled: bool) -> None:
    """Allow (on a terminal) or forbid progress bars for every evaluation from here on."""
    global _ENABLED
    _ENABLED = bool(enabled)


def enabled() -> bool:
    return _ENABLED


def bar(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", unit: str = "it"):
    """A tqdm bar over ``iterable`` (or one to ``update`` by hand) that shows on a terminal only."""
    from contextlab import bars

    return bars.bar(
        iterable,
        total=total,
        desc=desc,
        unit=unit,
        leave=False,
        dynamic_ncols=True,
        disable=None if _ENABLED else True,  # None: tqdm shows the bar only when stderr is a terminal
    )


def _short(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        items = [_short(x) for x in v]
        return ",".join(items) if len(items) <= 8 else ",".join(items[:3] + ["…"] + items[-2:])
    return str(v)


def settings_line(name: str, settings: dict) -> str:
    """``name: key value · key value · ...``: one line of what an evaluation will do (None values skipped)."""
    parts = [f"{k} {_short(v)}" for k, v in settings.items() if v is not None and v != "" and v != []]
    return f"{name}: " + " · ".join(parts)


def announce(name: str, settings: dict) -> None:
    """Print ``settings_line`` on stdout before an evaluation starts (through tqdm: open bars stay whole)."""
    import sys

    from contextlab import bars

    bars.write(settings_line(name, settings), file=sys.stdout)
