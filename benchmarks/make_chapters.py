"""Split the Gutenberg books into chapters: one folder per book, one file per chapter part.

    python benchmarks/make_chapters.py --out /tmp/chapters          # ~10K documents

The packing benchmarks need a corpus of many related documents with a known grouping
(domain = book). Each book's Project Gutenberg header/footer is cut
(``find_gutenberg_body``), the body is split at chapter headings (lines such as
"CHAPTER XII.", "Chapter 3", "BOOK II", "PART ONE", "LETTER 4"), and chapters longer than
``--part-chars`` are split further at paragraph breaks into parts of about that size, so
that roughly 10K documents result. Books without headings are split into parts only.
Deterministic: the same books give the same files. Data for measurement only.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from contextlab.data.gutenberg import find_gutenberg_body

HEADING = re.compile(
    r"^[ \t]*(chapter|book|part|letter|stave|canto|act)[ \t]+([0-9]+|[ivxlcdm]+|[a-z]+)\b[^\n]{0,60}$",
    re.I | re.M,
)


def split_parts(text: str, part_chars: int) -> list[str]:
    """Cut ``text`` at paragraph breaks into pieces of about ``part_chars`` characters."""
    paras = re.split(r"\n[ \t]*\n", text)
    out, cur, size = [], [], 0
    for p in paras:
        cur.append(p)
        size += len(p) + 2
        if size >= part_chars:
            out.append("\n\n".join(cur))
            cur, size = [], 0
    if cur:
        tail = "\n\n".join(cur)
        if out and len(tail) < part_chars // 4:
            out[-1] += "\n\n" + tail
        else:
            out.append(tail)
    return [t for t in (s.strip() for s in out) if t]


def chapters(body: str) -> list[str]:
    starts = [m.start() for m in HEADING.finditer(body)]
    if len(starts) < 3:
        return [body]
    cuts = [0] + starts + [len(body)]
    return [body[a:b] for a, b in zip(cuts, cuts[1:]) if body[a:b].strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--books", default=str(Path(__file__).resolve().parents[2] / "shared/data/gutenberg_books/texts")
    )
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--part-chars", type=int, default=6000, help="split chapters longer than this at paragraphs"
    )
    args = ap.parse_args(argv)
    out = Path(args.out)
    n_docs = n_books = 0
    for f in sorted(Path(args.books).glob("*.txt")):
        text = f.read_bytes().decode("utf-8").replace("\r\n", "\n")
        span = find_gutenberg_body(text)
        body = text[span[0] : span[1]] if span else text
        docs = [p for ch in chapters(body) for p in split_parts(ch, args.part_chars)]
        book = out / f.stem
        book.mkdir(parents=True, exist_ok=True)
        for i, d in enumerate(docs):
            (book / f"{i:04d}.txt").write_text(d + "\n", encoding="utf-8")
        n_docs += len(docs)
        n_books += 1
    print(f"wrote {n_docs:,} documents from {n_books} books under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
