"""The small HTML pieces every report section is made of: numbers, tables, images, code.

Numbers are shown rounded for reading (4 significant digits, short lists of numbers with 3:
``[0.248, 1.11]``; a value with its interval to the decimals the interval's width needs:
``10.838 [10.827, 10.850]``), never changed in the files: the exact values stay in the
result files the report names. Trade-off: a table cell with a word longer than 24 characters (a path,
a hash) may break it anywhere rather than grow the table past the page, so a 64-character hash
wraps instead of hiding behind a scroll bar; shorter words stay whole, so narrow columns of
short names are not broken mid-word.
"""

from __future__ import annotations

import base64
import html
import math
import re
from pathlib import Path

INTERVAL_SUFFIXES = ("_interval95", "_ci95")  # summary keys holding the 95% interval of another key
_NUM = r"[-+]?[\d,]*\.?\d+(?:e[-+]?\d+)?"
WIDE = 8  # columns: a table with more scrolls sideways in its own box (the page never does)
LONG_WORD = 24  # characters: a longer word in a table cell may break anywhere, a shorter one never
NUMERIC = re.compile(rf"—|{_NUM}(?: \[.*\])?|\[{_NUM}(?:, {_NUM})*\]")  # how plain() writes numbers


def img(path: Path, alt: str) -> str:
    """The PNG at ``path`` embedded as a data URI (the page stays one file)."""
    return png_img(path.read_bytes(), alt)


def png_img(png: bytes, alt: str) -> str:
    """A PNG rendered in memory (``figures.png_bytes``) embedded as a data URI: no file is written."""
    data = base64.b64encode(png).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def number(v: float | int, digits: int = 4) -> str:
    """A number for reading: ints as they are (thousands separated from 10,000, as whole floats are),
    floats to ``digits`` significant digits (one that only rounds to a whole number keeps its zeros:
    a loss of 5.99996 is 6.000, not "6" beside 6.034), whole from 10,000, as 1.5e11 from a billion."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    if not math.isfinite(v):
        return str(v)
    if abs(v) >= 1e9:  # a FLOP budget: 1.5e11, as configs write it, not 150,000,000,000
        mantissa, exponent = f"{v:.{digits - 1}e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    if abs(v) >= 1e4:
        return f"{v:,.0f}"
    text = f"{v:.{digits}g}"
    if v != int(v) and not any(c in text for c in ".e"):  # 5.99996 is 6.000, not "6" beside 6.034
        text = f"{v:#.{digits}g}".rstrip(".")
    return text


def plain(v) -> str:
    """Any value of a result file as text (not escaped): rounded numbers, ``[a, b]`` lists, yes/no."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, str):
        return _numeric_text(v)
    if isinstance(v, (int, float)):
        return number(v)
    if isinstance(v, (list, tuple)) and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) for x in v
    ):
        return "[" + ", ".join(number(x, 3) for x in v) + "]"
    if isinstance(v, (list, tuple)):
        return ", ".join(plain(x) for x in v) if v else "[]"
    if isinstance(v, dict):
        return ", ".join(f"{k} {plain(x)}" for k, x in v.items()) if v else "{}"
    return str(v)


def fmt(v) -> str:
    """``plain(v)`` escaped for HTML."""
    return html.escape(plain(v))


def _numeric_text(v: str) -> str:
    """A number read from a CSV cell, rounded like any other; other text as it is."""
    try:
        x = float(v)
    except ValueError:
        return v
    if not math.isfinite(x) or not v.strip():
        return v
    is_int = v.strip().lstrip("+-").isdigit()
    return number(int(v)) if is_int else number(x)


def table(rows: list[dict], columns: list[str] | None = None, limit: int = 200) -> str:
    """Rows of dicts as a table, one column per key (the union, in order of appearance)."""
    if not rows:
        return '<p class="muted">(none)</p>'
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(cell(c, "th") for c in columns)
    body = "".join("<tr>" + "".join(cell(r.get(c, "")) for c in columns) + "</tr>" for r in rows[:limit])
    more = f'<p class="muted">{len(rows) - limit} more rows in the file</p>' if len(rows) > limit else ""
    out = f"<table><tr>{head}</tr>{body}</table>"
    # a genuinely wide table (a sweep's every result column) scrolls in its own box, not the page
    return (f'<div class="scroll">{out}</div>' if len(columns) > WIDE else out) + more


def cell(v, tag: str = "td") -> str:
    """A table cell: numbers right-aligned (class n); text with a word too long to keep whole (a path,
    a hash) may break anywhere (class w), other text breaks between words only."""
    text = plain(v) if tag == "td" else str(v)
    classes = ["n"] if tag == "td" and NUMERIC.fullmatch(text) else []
    classes += ["w"] if any(len(word) > LONG_WORD for word in text.split()) else []
    attr = f' class="{" ".join(classes)}"' if classes else ""
    return f"<{tag}{attr}>{html.escape(text)}</{tag}>"


def kv_table(d: dict, caption: str = "") -> str:
    """A dict as a two-column table (key, value): tall and narrow, however many keys it has."""
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    rows = "".join(f"<tr>{cell(k, 'th')}{cell(v)}</tr>" for k, v in d.items())
    return f'<table class="kv">{cap}{rows or "<tr><td>(none)</td></tr>"}</table>'


def with_intervals(summary: dict) -> dict:
    """A summary with each ``KEY_interval95`` / ``KEY_ci95`` folded into KEY's value, as in
    ``0.2 [0.0567, 0.51]``."""
    out: dict = {}
    for k, v in summary.items():
        base = next((k[: -len(s)] for s in INTERVAL_SUFFIXES if k.endswith(s)), None)
        if base is not None and base in summary:
            continue
        ci = next((summary[k + s] for s in INTERVAL_SUFFIXES if k + s in summary), None)
        out[k] = with_interval(v, ci) if ci is not None else v
    return out


def with_interval(v, ci, decimals: int | None = None) -> str:
    """``10.838 [10.827, 10.850]``: a value and its interval to as many decimals as the interval's width
    needs (three significant digits of it, at least two decimals), so that its ends never round to one
    number ([10.8, 10.8] hid an interval 0.023 wide); other values as ``plain`` shows them. Values set
    side by side (one measure of several models) pass their ``shared_decimals``."""
    d = interval_decimals(v, ci)
    if d is None:
        nums = [v, *ci] if isinstance(ci, (list, tuple)) and len(ci) == 2 else []
        if nums and all(_finite(x) for x in nums):  # |x| >= 1e4: as plain shows it
            return f"{plain(v)} {plain(ci)}"
        return plain(v) + (f" {plain(ci)}" if isinstance(ci, list) else "")
    d = max(d, decimals or 0)
    return f"{v:.{d}f} [{ci[0]:.{d}f}, {ci[1]:.{d}f}]"


def interval_decimals(v, ci) -> int | None:
    """The decimals ``with_interval`` gives ``v`` and its interval ``ci``; None where it shows them as
    ``plain`` does (no interval, a non-finite end, or |x| >= 1e4)."""
    nums = [v, *ci] if isinstance(ci, (list, tuple)) and len(ci) == 2 else []
    if not nums or not all(_finite(x) for x in nums) or max(abs(x) for x in nums) >= 1e4:
        return None
    width = abs(ci[1] - ci[0])
    return 2 if width == 0 else min(6, max(2, 2 - math.floor(math.log10(width))))


def shared_decimals(pairs) -> int | None:
    """The decimals every (value, interval) of ``pairs`` is shown to, so values set side by side align
    (``1.0000 [0.9630, 1.0000]`` beside ``0.200 [0.133, 0.289]`` read as different precisions): the
    most any of them needs."""
    ds = [d for v, ci in pairs if (d := interval_decimals(v, ci)) is not None]
    return max(ds) if ds else None


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def pre(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


def keys(d: dict) -> str:
    """Headline numbers as one paragraph of key/value spans."""
    return (
        "<p>"
        + "".join(f'<span class="key">{html.escape(k)} <b>{fmt(v)}</b></span>' for k, v in d.items())
        + "</p>"
    )


def muted(text: str) -> str:
    return f'<p class="muted">{html.escape(text)}</p>'
