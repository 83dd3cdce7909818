"""Progress bars show on a terminal that reports no width, and every bar is made by contextlab.bars."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import termios
from pathlib import Path

import pytest
from tqdm.auto import tqdm

from contextlab import bars
from tests.conftest import REPO


def _terminal(columns: int):
    """A pseudo-terminal of ``columns`` columns: (its master fd, a text file on its slave end)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24 if columns else 0, columns, 0, 0))
    return master, os.fdopen(slave, "w")


def _drawn(make, columns: int, monkeypatch) -> str:
    """What a bar of 3 steps draws on stderr when stderr is a terminal of ``columns`` columns (tqdm
    sizes a bar only when it writes to sys.stderr or sys.stdout)."""
    master, out = _terminal(columns)
    try:
        with monkeypatch.context() as m:
            m.setattr("sys.stderr", out)
            b = make(total=3, desc="work", mininterval=0)
            for _ in range(3):
                b.update(1)
            b.close()
        out.close()  # all drawn: the master end reads what is left, then the end of the terminal
        return _read_all(master).decode()
    finally:
        out.close()
        os.close(master)


def _read_all(master: int) -> bytes:
    """Everything written to the terminal whose other end is closed. One read returns what the
    terminal has delivered so far, which may be a part of it (a loaded machine showed 0%..67%)."""
    got = b""
    while select.select([master], [], [], 5)[0]:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # EIO: the other end is closed and nothing is left
            break
        if not chunk:
            break
        got += chunk
    return got


@pytest.mark.parametrize("columns", [0, 80])
@pytest.mark.parametrize("dynamic", [False, True])
def test_a_bar_shows_on_a_terminal_of_any_width(columns, dynamic, monkeypatch):
    """Also a bar of dynamic width (the sweep's, training's, ingest's and the evaluations'), which drew
    nothing on a terminal of no width: tqdm read the 0 columns again at every draw."""
    drawn = _drawn(lambda **kw: bars.bar(dynamic_ncols=dynamic, **kw), columns, monkeypatch)
    assert "work: 100%" in drawn and "3/3" in drawn


def test_plain_tqdm_draws_nothing_on_a_terminal_of_no_width(monkeypatch):
    """What bars.bar is for: the control shows the fault is real (and the test above can see it)."""
    assert "3/3" not in _drawn(tqdm, 0, monkeypatch) and "3/3" in _drawn(tqdm, 80, monkeypatch)


def test_the_width_is_tqdms_own_on_a_sized_terminal_and_given_one_wins(monkeypatch):
    for columns, want in ((80, 79), (0, bars.FALLBACK_COLUMNS)):  # tqdm keeps one column free
        master, out = _terminal(columns)
        try:
            monkeypatch.setattr("sys.stderr", out)
            assert bars.bar(total=1).ncols == want
            assert bars.bar(total=1, ncols=40).ncols == 40
        finally:
            monkeypatch.undo()
            out.close()
            os.close(master)


def test_every_bar_is_made_by_contextlab_bars():
    root = Path(REPO) / "src" / "contextlab"
    direct = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.name != "bars.py" and ("from tqdm" in p.read_text() or "import tqdm" in p.read_text())
    ]
    assert direct == [], f"use contextlab.bars.bar / bars.write instead of tqdm in {direct}"


def test_off_a_terminal_a_long_bar_writes_a_plain_line_now_and_then_and_a_short_one_nothing(monkeypatch):
    """A log file got nothing from a command of many minutes until it ended (tqdm draws nothing off a
    terminal): a bar left to the automatic mode now writes a line every CONTEXTLAB_PROGRESS_SECONDS,
    without carriage returns; work shorter than that writes nothing, as before."""
    import io
    import time

    monkeypatch.setenv("CONTEXTLAB_PROGRESS_SECONDS", "0.2")
    log = io.StringIO()
    b = bars.bar(total=8, desc="cells", file=log, disable=None)
    for _ in range(8):
        time.sleep(0.1)
        b.update(1)
    b.close()
    lines = log.getvalue().splitlines()
    assert 2 <= len(lines) <= 8 and all(line.startswith("cells:") for line in lines), lines
    assert "\r" not in log.getvalue() and lines[-1].startswith("cells: 100%")  # its last state, kept
    quick = io.StringIO()
    b = bars.bar(total=3, desc="quick", file=quick, disable=None)
    b.update(3)
    b.close()
    assert quick.getvalue() == ""
    off = io.StringIO()
    monkeypatch.setenv("CONTEXTLAB_PROGRESS_SECONDS", "0")
    b = bars.bar(total=2, desc="off", file=off, disable=None)
    time.sleep(0.3)
    b.update(2)
    b.close()
    assert off.getvalue() == ""


def test_off_a_terminal_refreshes_and_closes_of_short_work_write_nothing_and_no_escapes(monkeypatch):
    """A user's log showed a short BM25 build's `bm25: indexing: 100%|###|` and a stray cursor-up line
    (a refresh and a close draw at once, whatever tqdm's delay), and a sweep's bar every 2 s."""
    import io
    import time

    monkeypatch.setenv("CONTEXTLAB_PROGRESS_SECONDS", "0.3")
    log = io.StringIO()
    b = bars.bar(total=4, desc="bm25: reading", file=log, disable=None, leave=False)
    b.update(2)
    b.set_description("bm25: indexing")
    b.refresh()
    b.update(2)
    b.close()
    assert log.getvalue() == ""
    busy = io.StringIO()
    b = bars.bar(total=40, desc="sweep", file=busy, disable=None)
    for _ in range(40):
        time.sleep(0.025)
        b.update(1)
        b.refresh()  # as a sweep's poll does
    b.close()
    lines = busy.getvalue().splitlines()
    assert 1 <= len(lines) <= 5 and "\x1b" not in busy.getvalue(), lines
