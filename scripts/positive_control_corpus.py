"""Write the positive control's training and held-out text: books with copied spans (JSONL).

Reads Project Gutenberg books (a folder with ``manifest.jsonl``: ``../shared/data/gutenberg_books``)
except the six the package ships as the needle haystack, takes each book's body, and writes
documents with copies inserted (``contextlab.data.repeats``): ``train.jsonl`` from all but the last
``--heldout-books`` books, ``heldout.jsonl`` from those, each line ``{"text", "repeats": [[first,
copy, length, random_words], ...]}`` (character offsets). Last line: one JSON object with counts.

    python scripts/positive_control_corpus.py --books ../shared/data/gutenberg_books --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from contextlab.config import add_dataclass_args, dataclass_from_args
from contextlab.corpus import books_dir
from contextlab.data.repeats import RepeatOptions, repetition_documents, word_pool


def book_bodies(folder: Path, skip: set[str]) -> list[str]:
    out = []
    for line in (folder / "manifest.jsonl").read_text().splitlines():
        m = json.loads(line)
        if Path(m["file"]).name in skip:
            continue
        text = (folder / m["file"]).read_bytes().decode("utf-8")
        out.append(text[m["body_start_char"] : m["body_end_char"]])
    return out


def write(path: Path, texts: list[str], o: RepeatOptions, pool: list[str] | None) -> tuple[int, int]:
    n = chars = 0
    with open(path, "w", encoding="utf-8") as f:
        for text, repeats in repetition_documents(texts, o, pool):
            rows = [[r.first, r.copy, r.length, int(r.random_words)] for r in repeats]
            f.write(json.dumps({"text": text, "repeats": rows}) + "\n")
            n, chars = n + 1, chars + len(text)
    return n, chars


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--books", required=True, help="a Gutenberg folder with manifest.jsonl")
    ap.add_argument("--out", required=True, help="folder for train.jsonl and heldout.jsonl")
    ap.add_argument("--books-used", type=int, default=40, help="books read (in manifest order)")
    ap.add_argument("--heldout-books", type=int, default=3, help="of them, the last ones held out")
    add_dataclass_args(ap.add_argument_group("repeat options"), RepeatOptions)
    args = ap.parse_args()
    o = dataclass_from_args(RepeatOptions, args)
    skip = {p.name for p in books_dir().glob("*.txt")}  # the haystack of the needle test
    bodies = book_bodies(Path(args.books), skip)[: args.books_used]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pool = word_pool(bodies[: -args.heldout_books], o.word_pool) if o.word_pool else None
    train = write(out / "train.jsonl", bodies[: -args.heldout_books], o, pool)
    held = write(
        out / "heldout.jsonl", bodies[-args.heldout_books :], dataclasses.replace(o, seed=o.seed + 1), pool
    )
    print(f"train: {train[0]:,} documents, {train[1] / 1e6:.1f}M characters; held out: {held[0]:,}")
    print(json.dumps({"train_docs": train[0], "train_chars": train[1], "heldout_docs": held[0]}))


if __name__ == "__main__":
    main()
