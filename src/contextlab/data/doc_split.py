"""Cut one text into several documents at the lines that open them (``--doc-start REGEX``).

Corpora often come as one file holding many documents: WikiText's articles under ``" = Title = "``
lines, a book's chapters, a mailing list's messages. Packing, SPLICE and the contextwise loss all
work per document, so such a file read as one document has no boundaries to find. ``--doc-start``
names the line that opens a document, and a text file is cut just before every such line: the
heading stays with the document it opens, and the pieces, joined, are the file again character
for character (nothing is dropped, stripped or changed). The text before the first such line is
a document of its own (a preface, a licence header) unless it is blank, when it goes with the
first document; the line at the very start of a file never cuts, so no empty piece is made.

Trade-off: the pattern is matched against each line on its own (``re.match`` from the line's
first character, on the line without its ``\\n`` or ``\\r\\n``), which costs a Python call per
line where one search over the text would not, but ``$`` then means the end of the line in CRLF
files too (Project Gutenberg's) and no match can run over a line end. Measured: the 127 Gutenberg
books (67.5 MB, 1.3M lines) cut in 0.5 s. A file streamed past ``--long-doc-mb`` is cut
chunk by chunk as it is read; each of its documents is then held whole. The pattern is compiled
with ``re.MULTILINE``: matched from a line's first character, ``^`` must hold there, and without
the flag it holds only at the text's very start (``'^CHAPTER '``, the form this module's own error
line suggests, cut nothing after the first line, with only a warning).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from contextlab.errors import UserError


def compile_doc_start(pattern: str) -> re.Pattern:
    """The compiled pattern, or one line naming what is wrong with it."""
    if not pattern:
        raise UserError("--doc-start is empty: give the regular expression of a document's first line")
    try:
        rx = re.compile(pattern, re.MULTILINE)  # ^ at a line's start, not only the text's
    except re.error as e:
        raise UserError(
            f"--doc-start {pattern!r} is not a regular expression ({e}); write it in Python's re syntax, "
            "e.g. ' = [^=].* = $' for WikiText's article titles"
        ) from None
    if rx.match(""):
        raise UserError(
            f"--doc-start {pattern!r} matches an empty line, so every blank line would open a document; "
            "make it need some text, e.g. '^CHAPTER ' rather than '^(CHAPTER)?'"
        )
    return rx


def _opens(rx: re.Pattern, text: str, start: int, end: int) -> bool:
    """Whether the line ``text[start:end]`` (its line end excluded) opens a document."""
    if end > start and text[end - 1] == "\r":
        end -= 1
    return rx.match(text, start, end) is not None


def cut_text(chunks: Iterable[str], rx: re.Pattern) -> Iterator[str]:
    """The documents of one text given in ``chunks`` (one string, or a long file chunk by chunk):
    a new one starts at every line but the text's first that ``rx`` matches. Text before the
    first such line that is only whitespace (a blank line) goes with the first document."""
    pieces = _cut(chunks, rx)
    head = next(pieces)
    if not head.strip() and (first := next(pieces, None)) is not None:
        head += first
    yield head
    yield from pieces


def _cut(chunks: Iterable[str], rx: re.Pattern) -> Iterator[str]:
    """``cut_text`` without the blank-head rule. Linear in the text: a document is kept as a list
    of pieces and joined once, when the next one opens."""
    doc: list[str] = []  # the current document, up to the line being read
    part: list[str] = []  # a line not yet ended when its chunk ran out
    first = True  # the text's first line never opens a document (no empty one before it)
    for chunk in chunks:
        if "\n" not in chunk:
            part.append(chunk)
            continue
        buf = "".join(part) + chunk if part else chunk
        part = []
        start = pos = 0  # buf[start:pos] belongs to ``doc``; buf[pos:] is not read yet
        while (nl := buf.find("\n", pos)) >= 0:
            if not first and _opens(rx, buf, pos, nl):
                doc.append(buf[start:pos])
                yield "".join(doc)
                doc, start = [], pos
            first, pos = False, nl + 1
        doc.append(buf[start:pos])
        if pos < len(buf):
            part.append(buf[pos:])
    last = "".join(part)
    if last and not first and _opens(rx, last, 0, len(last)):  # a last line with no line end
        yield "".join(doc)
        doc = []
    yield "".join(doc) + last
