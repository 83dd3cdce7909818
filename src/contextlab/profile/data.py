"""The data a profile reads: its token store (given, or ingested here from text with each model's
tokenizer), the lengths of the documents its steps may read, and the key-value file written for
its context.

Trade-off: text ``--data`` is ingested once per tokenizer into ``OUT/data`` and kept, so a resumed
profile, or the second model of a pair with the same tokenizer, reuses it; a store given as
``--data`` is read in place and checked against the model (its tokenizer, whether it trained on it).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

from contextlab.data.source_files import walk
from contextlab.data.source_globs import EXCLUDED, prose_excludes
from contextlab.data.sources import SourceOptions
from contextlab.errors import UserError, some
from contextlab.io import atomic_write_text
from contextlab.profile.plan import KV_ANSWER_ROOM, Budget


def tokenizer_spec(adapter) -> str:
    """The ``--tokenizer`` spec that tokenizes text as the model does (for ingesting text ``--data``)."""
    from contextlab.data.tokenizers import load_saved_tokenizer, same_tokenizer
    from contextlab.inference.tokenizer import hf_tokenizer_file
    from contextlab.rundir import TOKENIZER_SPEC, tokenizer_dirs

    info = adapter.info
    if info.kind == "hf":
        f = hf_tokenizer_file(Path(info.path))
        if f is None:
            raise UserError(f"{info.path} has no tokenizer.json; give --data a token store made for it")
        return f"hf:{f}"
    if info.tokenizer.get("kind") == "byte":
        return "byte"
    for d in tokenizer_dirs(info.path):
        if (d / TOKENIZER_SPEC).is_file() and same_tokenizer(load_saved_tokenizer(d).spec(), info.tokenizer):
            return f"dir:{d}"
    raise UserError(f"cannot find the tokenizer of {info.id}; give --data a token store made with it")


def is_store(path: str | Path) -> bool:
    return (Path(path) / "meta.json").is_file()


def prepare_store(
    data: str,
    adapter,
    out: Path,
    progress_on: bool,
    doc_start: str | None = None,
    split: str = "all",
    measured: bool = False,
    encoding: str = "strict",
) -> str:
    """A token store for ``adapter``: ``data`` itself when it is one (checked: the model's tokenizer, its
    content), else ``data`` (text) ingested with the model's tokenizer into OUT/data/store-<tokenizer
    hash>, kept and reused on resume while the text is unchanged. Text changed since it was ingested
    is ingested again when no step has measured the old one, and refused when one has (``measured``):
    a profile's steps all read one text. ``encoding``: how text files that are not UTF-8 are read
    (ingest's --encoding)."""
    from contextlab.data.ingest import IngestConfig, ingest, source_fingerprint
    from contextlab.data.store import TokenStore
    from contextlab.eval.base import open_store

    if is_store(data):  # one line up front for a store of another tokenizer, not failed steps and exit 0
        if doc_start is not None:
            raise UserError(
                f"--doc-start cuts text, and --data {data} is a token store, already cut; leave --doc-start "
                "out, or give the text it was made from"
            )
        open_store(str(data), adapter, "profile", split=split)  # "all": a note if the model trained on it
        return str(data)
    if not Path(data).exists():
        raise UserError(f"--data {data} does not exist; give a token store or a text file or folder")
    target = out / "data" / f"store-{str(adapter.info.tokenizer.get('hash', 'x'))[:12]}"
    made = is_store(target)
    source = dataclasses.replace(
        prose_source(Path(data), say=not made), doc_start=doc_start, encoding=encoding
    )
    config = IngestConfig(tokenizer=tokenizer_spec(adapter), source=source)
    # the store is named by the tokenizer's hash, so two models of one tokenizer in two folders share it;
    # its fingerprint holds the spec (the tokenizer file's path) it was ingested with, kept beside it
    spec_file = target.with_name(target.name + ".tokenizer")
    made_with = spec_file.read_text().strip() if made and spec_file.is_file() else config.tokenizer
    kept = dataclasses.replace(config, tokenizer=made_with)
    stale = made and TokenStore(target).meta.get("ingest_fingerprint") != source_fingerprint(data, kept)
    if made and not stale:
        return str(target)
    if stale and measured:
        raise UserError(
            f"--data {data} has changed since this profile in {out} measured it (a file added, removed "
            "or edited); give another --out to profile the text as it is now"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(spec_file, config.tokenizer + "\n")  # first: a killed ingest leaves no store
    ingest(data, target, config, overwrite=stale, progress=progress_on, notes=False)
    return str(target)


def prose_source(data: Path, say: bool = True) -> SourceOptions:
    """How a text ``--data`` is read: a folder without the files that describe the corpus (README,
    SOURCE, manifest) or hold records (JSONL, CSV), as the needle reads its haystack, so every step
    measures the same text; the files left out are named in one line. (They were ingested whole:
    WikiText's SOURCE.txt became a document of the profile's store.) ``say``: the line is printed (once,
    when the text is ingested; not again for a second model of the same tokenizer, or on resume)."""
    if not data.is_dir():
        return SourceOptions()
    options = SourceOptions(exclude=prose_excludes())
    files, skipped = walk(data, [], options.exclude)
    left = [e["path"] for e in skipped if e["reason"] == EXCLUDED]
    if left and not files:  # it said "check --include/--exclude", options profile has not
        raise UserError(
            f"--data {data} holds no text to profile: its files are a corpus's notes or files of records "
            f"({some(left)}); give a folder of text files, or a token store ingested from the records "
            "(contextlab data ingest reads JSONL and Parquet)"
        )
    if left and say:
        print(
            f"  data: {some(left)} left out of {data} (a corpus's own notes or files of records, not "
            "its text); give an ingested store as --data to measure them",
            file=sys.stdout,
        )
    return options


def document_lengths(store: str, adapter, split: str = "all", of: str = "") -> np.ndarray:
    """Tokens of every document the store's steps may read: all of them, or with ``split`` "run" those
    the run ``of`` (default: the model's own) held out (one line when it is not that run's store)."""
    from contextlab.data.store import TokenStore
    from contextlab.eval.heldout import documents

    return np.asarray(documents(TokenStore(store), adapter.info.path, split, of=of)[0].lengths())


def prepare_kv(out: Path, adapter, budget: Budget, context: int) -> tuple[str, int]:
    """Write OUT/data/kv-Npairs.jsonl.gz (random UUID pairs, the lost-in-the-middle format) with N the
    most pairs for which every prompt of the file (each of its first keys asked) fits ``context`` in
    this model's tokenizer, less room for the answer and a margin for a pair moved to another place
    (UUIDs tokenize to slightly different lengths in different company)."""
    from contextlab.data.kv_synthetic import kv_examples, pairs_that_fit, write_kv_file
    from contextlab.eval.kv import kv_prompt

    def tokens(n: int) -> int:
        if not n:
            return 0
        return max(
            len(adapter.encode(kv_prompt([tuple(r) for r in e["ordered_kv_records"]], k)))
            for e in kv_examples(budget.kv_examples, n, seed=0)
            for k, _ in e["ordered_kv_records"][:3]
        )

    n = pairs_that_fit(tokens, context - KV_ANSWER_ROOM - context // 32)
    path = out / "data" / f"kv-{n}pairs.jsonl.gz"
    if n >= 2 and not path.is_file():
        write_kv_file(path, budget.kv_examples, n, seed=0)
    return str(path), n
