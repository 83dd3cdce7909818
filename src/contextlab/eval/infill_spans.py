"""The held-out code an infilling evaluation reads, and the spans it masks out (at line boundaries).

Files: a token store's documents (by default exactly the ones the run held out for
validation, as ``contextlab.eval.heldout`` recomputes them from its checkpoint's config) or
every file of a folder. Spans, as in the FIM paper's and SantaCoder's
single-line and multi-line infilling: one random non-blank line, or a random block of
2..``max_lines`` consecutive lines (at least two of them non-blank); the middle is the
whole lines with their newlines (a last line without one is never drawn), so prefix and
suffix end and start at line boundaries.
Every span has at least one line before it (a left-to-right baseline needs a prefix) and
at most ``max_middle_tokens`` tokens. Trade-off: spans are drawn with rejection (a seeded
numpy generator, a bounded number of tries), so they are deterministic for a seed and the
same for every model with the same tokenizer, but a corpus of few long-enough lines can
yield fewer spans than asked (the result says how many).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contextlab.errors import UserError

TRIES_PER_SPAN = 50  # rejection-sampling attempts per requested span before giving up


@dataclass(frozen=True)
class Span:
    """Lines ``first .. first + n_lines - 1`` of document ``doc``: text[start:end] is the middle."""

    doc: int
    first: int
    n_lines: int
    start: int  # character offsets in the document's text
    end: int


def read_texts(
    data: str | None, adapter, split: str, glob: str, encoding: str = "strict"
) -> tuple[list[str], dict]:
    """(the text of every evaluated file, what was read) from a token store or a folder."""
    import contextlab.eval.heldout as heldout
    from contextlab.data.store import is_store
    from contextlab.eval.base import open_store

    if data and not is_store(data) and Path(data).is_dir():
        if split == "run":
            raise UserError(f"{data} is a folder, not a token store: pass --split all (all its files)")
        return read_folder(Path(data), glob, encoding)
    store = open_store(data, adapter, "infill", split=split)
    view, held = heldout.documents(store, adapter.info.path, split, whole=True)
    texts = [adapter.tokenizer.decode(view.doc(i)) for i in range(len(view))]
    return texts, {
        "store": str(store.path),
        "hash": store.hash,
        **held,
        "split": split,
        "docs": view.indices.tolist(),
    }


def read_folder(folder: Path, glob: str, encoding: str) -> tuple[list[str], dict]:
    """The files of ``folder`` that ``glob`` matches, read as ``data ingest`` reads a folder: hidden
    files and folders, binary files, empty files, duplicates and links out of the folder left out
    (named in ``left_out``), bytes that are not UTF-8 under ``encoding`` (strict: stop, naming them).
    A plain recursive glob read ``.git/`` hooks, a link to /etc/passwd, and binary and Latin-1 files
    decoded with U+FFFD, none of it said."""
    from contextlab.data.source_globs import EXCLUDED
    from contextlab.eval.base import read_text_files, text_options

    docs, src, counts = read_text_files(
        folder,
        text_options([glob], [], encoding),
        "no span was drawn: pass --encoding latin-1 (files from before UTF-8), replace (U+FFFD, counted) "
        "or skip (leave them out)",
    )
    if not docs:
        raise UserError(f"no file matches {glob!r} under {folder}; change --files")
    left = [e for e in src.skipped if e.get("reason") != EXCLUDED]
    return [str(d.text) for d in docs], {
        "folder": str(folder),
        "files": len(docs),
        "glob": glob,
        "read": [str(d.meta.get("path")) for d in docs],
        "left_out": left,
        **counts,
    }


def _line_starts(text: str) -> list[int]:
    """Offsets of every line start, and len(text) last."""
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n" and i + 1 < len(text):
            starts.append(i + 1)
    return starts + [len(text)]


def _draw(rng: np.random.Generator, lines: list[int], multi: bool, max_lines: int) -> tuple[int, int] | None:
    """(first line, number of lines) of one candidate span, or None when the file is too short."""
    n_lines = len(lines) - 1
    k = int(rng.integers(2, max_lines + 1)) if multi else 1
    if n_lines - 1 < k:
        return None
    return int(rng.integers(1, n_lines - k + 1)), k  # first >= 1: a prefix of at least one line


def choose_spans(
    texts: list[str], encode, n: int, multi: bool, max_lines: int, max_middle_tokens: int, seed: int
) -> list[Span]:
    """``n`` distinct spans (fewer if the files do not have them), deterministic for ``seed``."""
    if multi and max_lines < 2:
        raise UserError(f"max_lines must be at least 2 for multi-line spans, got {max_lines}")
    rng = np.random.default_rng([seed, int(multi)])
    starts = [_line_starts(t) for t in texts]
    spans: list[Span] = []
    seen: set[tuple[int, int, int]] = set()
    for _ in range(n * TRIES_PER_SPAN):
        if len(spans) == n:
            break
        d = int(rng.integers(len(texts)))
        drawn = _draw(rng, starts[d], multi, max_lines)
        if drawn is None or (d, *drawn) in seen:
            continue
        first, k = drawn
        a, b = starts[d][first], starts[d][first + k]
        middle = texts[d][a:b]
        blank = sum(not ln.strip() for ln in middle.splitlines())
        if k - blank < (2 if multi else 1) or not middle.endswith("\n"):
            continue
        if not 0 < len(encode(middle)) <= max_middle_tokens:
            continue
        seen.add((d, first, k))
        spans.append(Span(d, first, k, a, b))
    return spans
