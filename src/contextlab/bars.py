"""Progress bars that show on every terminal: ``bar(...)`` is ``tqdm.auto.tqdm(...)`` that never
draws an empty line.

tqdm sizes a bar to the terminal it writes to. A terminal that reports a size of 0 columns (a
pseudo-terminal opened without one: some container ``exec`` sessions, CI runners, editor consoles)
gets a bar -1 columns wide on the screen's line -1, which tqdm prints as nothing at all, so a
command minutes long looks hung. On such a terminal the bar is drawn 100 columns wide on a
screen of 20 lines (a line too wide wraps, far better than silence), also when the caller asks for
a dynamic width (which would read the 0 again at every draw); everywhere else tqdm sizes it as it
always does. Every bar of contextlab is made here, so the rule holds for all of them
(a test keeps it so).
"""

from __future__ import annotations

import os
import sys

FALLBACK_COLUMNS = 100  # the width of a bar on a terminal that reports none
FALLBACK_LINES = 20  # and its height (tqdm's own default), below which tqdm hides nested bars


def bar(*args, **kwargs):
    """``tqdm.auto.tqdm(*args, **kwargs)``, given a size when its stream is a terminal of 0 columns."""
    from tqdm.auto import tqdm

    if _zero_width(kwargs.get("file") or sys.stderr):  # also 0 lines: tqdm hides a bar below the last
        kwargs.setdefault("ncols", FALLBACK_COLUMNS)
        kwargs.setdefault("nrows", FALLBACK_LINES)
        kwargs["dynamic_ncols"] = False  # a dynamic width is read at each draw: 0 columns again
    return tqdm(*args, **kwargs)


def write(text: str, file=None) -> None:
    """Print a line without breaking a bar that is on screen (``tqdm.write``)."""
    from tqdm.auto import tqdm

    tqdm.write(text, file=file)


def _zero_width(stream) -> bool:
    """Whether ``stream`` is a terminal that reports 0 columns."""
    try:
        return os.isatty(stream.fileno()) and os.get_terminal_size(stream.fileno()).columns == 0
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture), closed
        return False
