"""Project Gutenberg header and footer: find the body between the START and END markers.

Gutenberg books wrap the text in a licence header and footer that would otherwise be
trained on as if they were prose. ``find_gutenberg_body`` finds the START marker (whose
title may wrap onto a second line before its closing ``***``) and the END marker, each
only at the start of a line, and returns the span between them. Trade-off: a book whose
markers are misspelt beyond the known variants keeps its header (``auto`` mode) rather
than losing text to a looser match.
"""

from __future__ import annotations

import re

# The literal "***" prefix (case-sensitive) keeps re's fast literal scan; the rest ignores case.
PG_START = re.compile(
    r"\*\*\*[ \t]*(?i:START OF (?:THE|THIS) PROJECT GUTENBERG E-?(?:BOOK|TEXT))"
    r"(?:[^*\r\n]*(?:\r\n|\r|\n)?[^*\r\n]*\*\*\*)?"  # title, may wrap once, up to the closing ***
    r"[^\r\n]*(?:\r\n|\r|\n|\Z)"
)
PG_END = re.compile(r"\*\*\*[ \t]*(?i:END OF (?:THE|THIS) PROJECT GUTENBERG E-?(?:BOOK|TEXT))")


def find_gutenberg_body(text: str) -> tuple[int, int] | None:
    """Return ``(start, end)`` of a Project Gutenberg body, or None if a marker is missing.

    The body runs from the line after the START marker (which may wrap onto a second line
    before its closing ``***``) to the start of the line holding the END marker.
    """
    start = _line_start_match(PG_START, text, 0)
    if start is None:
        return None
    end = _line_start_match(PG_END, text, start.end())
    if end is None:
        return None
    return start.end(), _line_start(text, end.start())


def _line_start(text: str, pos: int) -> int:
    return max(text.rfind("\n", 0, pos), text.rfind("\r", 0, pos)) + 1


def _line_start_match(rx: re.Pattern, text: str, pos: int) -> re.Match | None:
    """First match of ``rx`` at or after ``pos`` preceded on its line only by spaces/tabs."""
    while (m := rx.search(text, pos)) is not None:
        if not text[_line_start(text, m.start()) : m.start()].strip(" \t"):
            return m
        pos = m.start() + 1
    return None
