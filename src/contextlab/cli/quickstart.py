"""``contextlab quickstart``: the main job on the embedded corpus.

Runs on a fresh machine with nothing but the package: ingests the embedded books with a
byte-level BPE trained on them, and the Python standard library (a code corpus with
directory structure) with the same tokenizer, then prints what is in each store. Every
step resumes, and a finished step is skipped, so running it again is cheap.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_quickstart(argv: list[str]) -> int:
    """Run the whole pipeline on the embedded corpus (books + Python stdlib)."""
    from contextlab.corpus import STDLIB_EXCLUDE, STDLIB_INCLUDE, books_dir, books_provenance, stdlib_dir
    from contextlab.data.ingest import IngestConfig, ingest
    from contextlab.data.sources import SourceOptions
    from contextlab.data.stats import format_summary, plot_length_histogram, store_summary

    p = argparse.ArgumentParser(prog="contextlab quickstart", description=cmd_quickstart.__doc__,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="contextlab-quickstart", help="directory for every artifact of the quickstart")
    p.add_argument("--vocab", type=int, default=4096, help="size of the BPE vocabulary trained on the books")
    p.add_argument("--overwrite", action="store_true", help="redo every step from scratch")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    progress = not args.no_progress

    books = [f"{b['title']} ({b['author']})" for b in books_provenance()]
    print(f"[1/2] ingest {len(books)} public-domain books with a {args.vocab}-token BPE trained on them")
    rep = ingest(books_dir(), out / "books", IngestConfig(tokenizer=f"bpe:{args.vocab}",
                 source=SourceOptions(include=["*.txt"], strip_gutenberg="no")),
                 overwrite=args.overwrite, progress=progress)
    books_store = rep.store
    print(format_summary(store_summary(books_store)))
    plot_length_histogram(books_store, out / "books" / "doc_lengths.png")

    print(f"\n[2/2] ingest the Python standard library ({stdlib_dir()}) with the same tokenizer")
    rep = ingest(stdlib_dir(), out / "stdlib", IngestConfig(tokenizer=f"store:{books_store.path}",
                 source=SourceOptions(include=STDLIB_INCLUDE, exclude=STDLIB_EXCLUDE, encoding="replace")),
                 overwrite=args.overwrite, progress=progress)
    code_store = rep.store
    print(format_summary(store_summary(code_store)))
    plot_length_histogram(code_store, out / "stdlib" / "doc_lengths.png")

    print(f"\nquickstart done: stores in {out}/books and {out}/stdlib")
    print(f"  books : {books_store.n_docs:,} documents, {books_store.n_tokens:,} tokens")
    print(f"  stdlib: {code_store.n_docs:,} files, {code_store.n_tokens:,} tokens, "
          f"{len({m.get('domain') for m in code_store.docs_meta()}):,} top-level directories")
    return 0
