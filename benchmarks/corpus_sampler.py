"""Large corpora of real documents for the scaling benchmarks, sampled with a seed.

The units are real text: paragraphs of Project Gutenberg books (header and footer cut off,
split at blank lines) and the top-level functions and methods of Python files (``ast``;
a file that does not parse is skipped). A document is a run of consecutive units of one
source (a book or a file) from a random line of a unit drawn with the seed, until it holds
a word count drawn uniformly from [min_words, max_words] (the last unit is cut at the first
line end past it). Half the documents come from books and half from code, in a seeded order.

Trade-off: the 127 books (210K paragraphs) and the standard library (51K functions) are
far fewer units than a million documents, so large corpora are overlapping windows over
the same text: different start lines and lengths make most documents distinct, but a
document often shares paragraphs with a few others. That keeps the retrieval problem real (related documents
exist, as in a corpus with near-duplicates) rather than inventing text; exact duplicates
are counted and reported (``duplicates``) so a reader can judge it.

    python benchmarks/corpus_sampler.py --docs 100000 --out /tmp/scale/docs_100000.jsonl
    python benchmarks/corpus_sampler.py --mb 1000 --out /tmp/scale/text_1000mb.jsonl
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BOOKS = ROOT.parent / "shared" / "data" / "gutenberg_books" / "texts"


@dataclass
class Source:
    """One book or file: its units (paragraphs, functions) and their word counts."""

    name: str
    units: list[str]
    words: np.ndarray  # int64 (n_units,)


def book_sources(folder: Path) -> list[Source]:
    """Every ``*.txt`` book of ``folder`` as paragraphs (the Gutenberg body when its markers are found)."""
    from contextlab.data.gutenberg import find_gutenberg_body

    out = []
    for f in sorted(folder.glob("*.txt")):
        text = f.read_bytes().decode("utf-8", errors="replace")
        span = find_gutenberg_body(text)
        body = (text[span[0] : span[1]] if span else text).replace("\r\n", "\n")
        paras = [p.strip() for p in body.split("\n\n")]
        out.append(_source(f.name, [p for p in paras if len(p.split()) >= 3]))
    return [s for s in out if s.units]


def code_sources(root: Path) -> list[Source]:
    """The top-level functions and classes of every ``*.py`` under ``root`` (no site-packages)."""
    out = []
    for f in sorted(root.rglob("*.py")):
        if "site-packages" in f.parts:
            continue
        try:
            text = f.read_text(encoding="utf-8")
            tree = ast.parse(text)
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue
        lines = text.splitlines()
        units = ["\n".join(lines[node.lineno - 1 : node.end_lineno]) for node in _code_units(tree)]
        out.append(_source(str(f.relative_to(root)), units))
    return [s for s in out if s.units]


def _code_units(tree: ast.Module) -> list[ast.AST]:
    """Top-level functions, and the methods of top-level classes (a class without methods: whole)."""
    funcs = (ast.FunctionDef, ast.AsyncFunctionDef)
    out: list[ast.AST] = []
    for node in tree.body:
        if isinstance(node, funcs):
            out.append(node)
        elif isinstance(node, ast.ClassDef):
            methods = [m for m in node.body if isinstance(m, funcs)]
            out.extend(methods or [node])
    return [n for n in out if n.end_lineno]


def _source(name: str, units: list[str]) -> Source:
    return Source(name, units, np.array([len(u.split()) for u in units], dtype=np.int64))


def _cut(unit: str, words: int) -> str:
    """The first lines of ``unit`` holding about ``words`` words (at least one line)."""
    kept, count = [], 0
    for line in unit.split("\n"):
        kept.append(line)
        count += len(line.split())
        if count >= words:
            break
    return "\n".join(kept)


def iter_docs(
    pools: list[list[Source]], seed: int, min_words: int = 60, max_words: int = 200
) -> Iterator[dict]:
    """Documents for ever (``{"text", "source"}``); pool, source, start unit, length drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    flat = [[(s, u) for s in pool for u in range(len(s.units))] for pool in pools]
    while True:
        items = flat[int(rng.integers(len(flat)))]
        src, u = items[int(rng.integers(len(items)))]
        target = int(rng.integers(min_words, max_words + 1))
        first = src.units[u].split("\n")
        skip = int(rng.integers(len(first)))  # start at a random line of the first unit
        parts = [_cut("\n".join(first[skip:]), target)]
        words = len(parts[0].split())
        u += 1
        while u < len(src.units) and words < target:
            parts.append(_cut(src.units[u], target - words))
            words += int(src.words[u])
            u += 1
        yield {"text": "\n\n".join(parts), "source": src.name}


def write_corpus(
    path: Path, docs: Iterator[dict], n_docs: int = 0, n_bytes: int = 0, progress: bool = True
) -> dict:
    """Write ``n_docs`` documents (or until ``n_bytes`` of text) as JSONL, atomically; a summary."""
    from tqdm.auto import tqdm

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    seen, n, size, dups = set(), 0, 0, 0
    bar = tqdm(total=n_docs or n_bytes, unit="doc" if n_docs else "B", disable=not progress, desc="sample")
    with open(tmp, "w", encoding="utf-8") as fh:
        while (n_docs and n < n_docs) or (n_bytes and size < n_bytes):
            doc = next(docs)
            key = hashlib.blake2b(doc["text"].encode(), digest_size=8).digest()
            dups += key in seen
            seen.add(key)
            fh.write(json.dumps(doc) + "\n")
            n, grown = n + 1, len(doc["text"].encode())
            size += grown
            bar.update(1 if n_docs else grown)
        fh.flush()
        os.fsync(fh.fileno())
    bar.close()
    os.replace(tmp, path)
    return {"docs": n, "text_bytes": size, "duplicates": dups}


def stdlib() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def default_pools(books: Path | str = BOOKS, code: Path | str | None = None) -> list[list[Source]]:
    """[book paragraphs, functions of the Python files under ``code`` (default: the standard library)]."""
    return [book_sources(Path(books)), code_sources(Path(code) if code else stdlib())]


def add_source_args(ap: argparse.ArgumentParser) -> None:
    """--books / --code: where the sampled documents come from."""
    ap.add_argument("--books", default=str(BOOKS), help="folder of Gutenberg .txt books (paragraphs)")
    ap.add_argument(
        "--code", default="", help="folder of .py files (functions); default: the standard library"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the JSONL file to write")
    ap.add_argument("--docs", type=int, default=0, help="number of documents (or use --mb)")
    ap.add_argument("--mb", type=float, default=0.0, help="MB of text to write instead of a document count")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed")
    add_source_args(ap)
    args = ap.parse_args()
    pools = default_pools(args.books, args.code)
    summary = write_corpus(Path(args.out), iter_docs(pools, args.seed), args.docs, int(args.mb * 1e6))
    print(json.dumps({"bench": "corpus_sampler", **summary}))


if __name__ == "__main__":
    main()
