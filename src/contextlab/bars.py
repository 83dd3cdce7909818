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

Off a terminal (a log file, a batch job's output, a pipe), tqdm's automatic mode draws nothing, so a
command of many minutes said nothing until it ended. There a bar left to that mode instead writes
one plain line (no carriage returns) every ``CONTEXTLAB_PROGRESS_SECONDS`` seconds (default 60; 0:
none), and nothing at all for work that ends sooner: logs show how far a long command is, and short
commands (every test) stay as quiet as before.
"""

from __future__ import annotations

import os
import re
import sys
import time

FALLBACK_COLUMNS = 100  # the width of a bar on a terminal that reports none
FALLBACK_LINES = 20  # and its height (tqdm's own default), below which tqdm hides nested bars


def bar(*args, **kwargs):
    """``tqdm.auto.tqdm(*args, **kwargs)``, given a size when its stream is a terminal of 0 columns, and
    written as a plain line a minute when it is no terminal (module docstring)."""
    from tqdm.auto import tqdm

    stream = kwargs.get("file") or sys.stderr
    if _zero_width(stream):  # also 0 lines: tqdm hides a bar below the last
        kwargs.setdefault("ncols", FALLBACK_COLUMNS)
        kwargs.setdefault("nrows", FALLBACK_LINES)
        kwargs["dynamic_ncols"] = False  # a dynamic width is read at each draw: 0 columns again
    elif kwargs.get("disable", False) is None and not _terminal(stream) and (every := log_seconds()) > 0:
        kwargs.update(
            disable=False, file=_Lines(stream, every), delay=every, mininterval=every, maxinterval=every
        )
        kwargs.update(ncols=FALLBACK_COLUMNS, dynamic_ncols=False)
    return tqdm(*args, **kwargs)


def log_seconds() -> float:
    """Seconds between the lines a bar writes off a terminal (``CONTEXTLAB_PROGRESS_SECONDS``)."""
    try:
        return float(os.environ.get("CONTEXTLAB_PROGRESS_SECONDS", "60"))
    except ValueError:
        return 60.0


_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # terminal escape sequences (tqdm's cursor-up on close)


class _Lines:
    """A stream that writes tqdm's redraws as lines of their own (a log has no carriage return), at
    most one every ``every`` seconds and none in the first ``every`` (a bar's ``refresh``, its
    description changing, or its close draw at once whatever tqdm's delay: a user's log showed a
    short BM25 build's bar, a sweep's every 2 s), but a long bar's final 100% line always, and no blank
    clears or cursor moves."""

    def __init__(self, stream, every: float = 0.0):
        self.stream, self.every = stream, every
        self.start = self.last = time.monotonic()  # the first line waits as long as later ones

    def write(self, text: str) -> None:
        text = _ESCAPES.sub("", text.replace("\r", "")).strip()
        now = time.monotonic()
        done = "100%|" in text and now - self.start >= self.every  # a long bar's last state is kept
        if text and (now - self.last >= self.every or done):
            self.last = now
            self.stream.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()


def _terminal(stream) -> bool:
    try:
        return os.isatty(stream.fileno())
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture), closed
        return False


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
