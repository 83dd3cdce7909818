"""Read a corpus into a deterministic stream of documents.

``open_source(PATH)`` looks at PATH and picks a reader:

- ``folder``: a tree of text/code files, one document per file, sorted by relative posix
  path. Hidden entries (``.git``) are skipped; links to folders, out of the tree, broken,
  looping or to a file read anyway, binary files (a NUL byte in the first 8 KiB) and corrupt
  ``.gz`` files are skipped, counted and named; ``.gz`` files keep their full name.
- ``file``: one text file, one document.
- ``jsonl``: ``.jsonl``/``.jsonl.gz``/``.json`` lines files (or a folder holding only
  those), one document per line, the text in ``options.text_field``.
- ``parquet``: a ``.parquet`` file or a folder holding only those, read in row batches.
- ``hf-dataset``: a folder written by ``datasets`` ``save_to_disk``, read straight from the
  Arrow files with pyarrow, so the ``datasets`` package is not needed. Of a ``DatasetDict``
  one split is read: ``options.split``, else ``train``, else the only split
  (``split_note`` names them all, with their rows, for the ingest to print).

The readers live beside this module: ``source_files`` lists and opens files, ``source_text`` reads
text files (and holds the encoding policy), ``source_rows`` reads JSONL / Parquet / Arrow rows;
``Source`` ties them together, cuts documents and counts what it left out.

With ``--doc-start REGEX`` a text file (of a folder, or alone) is cut into several documents at
the lines that open them (``doc_split``), after its Project Gutenberg header and footer are cut.

Trade-offs. Text files are read whole, except past ``long_doc_mb`` (a ``LongText``, read in
chunks), and row formats stream in batches, so memory follows the largest document, never
the corpus. Under strict UTF-8 ``check_encoding`` reads every file once more before any
work, so no ingest stops half way on one bad file. Text is kept byte-exact: no newline conversion and no
whitespace stripping (``min_chars`` looks at the stripped length but keeps the text; only a UTF-8
byte-order mark opening a file, an encoding mark, is read past), so
offsets into the source files stay valid. Nothing is dropped silently: every skipped file
or row is counted in ``Source.stats`` and named in ``Source.skipped``, and a corpus that yields nothing raises
``UserError`` at the end of the iteration, saying what was skipped. The fingerprint only
stats the input files (size, mtime), so it is cheap but misses an edit that keeps both.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal, get_args

from contextlab.config import opt
from contextlab.data.doc_split import compile_doc_start, cut_text
from contextlab.data.gutenberg import find_gutenberg_body
from contextlab.data.source_files import (
    LongText,
    Unreadable,
    arrow_rows,
    detect_kind,
    hf_arrow_files,
    hf_split,
    hf_splits,
    read_text_bytes,
    shown_name,
    walk,
)
from contextlab.data.source_globs import EXCLUDED, exclude_globs, provenance_files, unmatched_globs
from contextlab.data.source_rows import jsonl_rows, table_rows
from contextlab.data.source_text import STRICT_FIX, check_encoding, text_rows
from contextlab.errors import UserError, some

FORMAT = "contextlab.sources/1"
ONE_DOC_NOTE = 1 << 16  # bytes: a single file at least this long is told about --doc-start


@dataclass
class Document:
    """One document: its exact text and metadata (``id``, ``source``, ``path``, ``domain``, ``row``;
    ``encoding: "latin-1"`` for one that was not UTF-8 and was read as Latin-1)."""

    text: str  # a LongText for a file past --long-doc-mb (see source_files.LongText)
    meta: dict

    @property
    def id(self) -> str:
        return self.meta["id"]


Gutenberg = Literal["auto", "yes", "no"]
Encoding = Literal["strict", "replace", "skip", "latin-1"]


@dataclass
class SourceOptions:
    """How to read a source; every field maps to a command-line flag of the same name."""

    text_field: str = opt("text", "field holding the text in JSONL / Parquet / HF datasets")
    domain_field: str | None = opt(None, "field to use as the domain (default: the file name)")
    include: list[str] = opt([], "globs on the relative path to read (comma-separated); empty = all files")
    exclude: list[str] = opt([], "globs on the relative path to leave out (comma-separated); empty = none")
    strip_gutenberg: Gutenberg = opt(
        "auto",
        "cut Project Gutenberg header/footer: auto (when markers are found), yes (markers required), no",
    )
    encoding: Encoding = opt(
        "strict",
        "undecodable bytes: strict (stop before tokenizing, naming every such file), replace (U+FFFD), "
        "skip (the file), "
        "latin-1 (decode the file as Latin-1); all are counted",
    )
    min_chars: int = opt(1, "skip documents whose stripped text is shorter than this (counted)")
    domain_depth: int = opt(
        0,
        "a document's domain is the first N folders of its path; 0 = the first folder below "
        "the folder common to all files (JSONL/Parquet with --path-field: the first folder)",
    )
    path_field: str | None = opt(
        None, "JSONL / Parquet / HF datasets: field holding each row's own file path (for domains, repo)"
    )
    long_doc_mb: float = opt(
        64.0, "text files larger than this many MB are streamed through the tokenizer, never held whole"
    )
    split: str | None = opt(
        None,
        "a saved Hugging Face DatasetDict: the split to ingest (default: train, or the only split)",
    )
    doc_start: str | None = opt(
        None,
        "cut each text file into documents, one starting at every line this regular expression matches "
        "(Python re, matched from the line's start; the text before the first such line is a document "
        "too), e.g. ' = [^=].* = $' for WikiText's articles; none: a file is one document",
    )

    def __post_init__(self) -> None:  # also built in code, not only by the config loader
        if self.strip_gutenberg not in get_args(Gutenberg):
            raise UserError(
                f"unknown strip_gutenberg {self.strip_gutenberg!r}; "
                f"use one of {', '.join(get_args(Gutenberg))}"
            )
        if self.encoding not in get_args(Encoding):
            raise UserError(
                f"unknown encoding policy {self.encoding!r}; use one of {', '.join(get_args(Encoding))}"
            )
        if not isinstance(self.min_chars, int) or self.min_chars < 0:
            raise UserError(f"min_chars must be an integer >= 0, got {self.min_chars!r}")
        if not isinstance(self.domain_depth, int) or self.domain_depth < 0:
            raise UserError(f"domain_depth must be an integer >= 0, got {self.domain_depth!r}")
        if not self.long_doc_mb > 0:
            raise UserError(f"long_doc_mb must be > 0, got {self.long_doc_mb!r}")
        if self.doc_start is not None:
            compile_doc_start(self.doc_start)
        self.include = [self.include] if isinstance(self.include, str) else list(self.include)
        self.exclude = [self.exclude] if isinstance(self.exclude, str) else list(self.exclude)


TABLE_SUFFIXES = (".csv", ".tsv", ".csv.gz", ".tsv.gz")  # tables read as text (a note says so)


@dataclass
class SourceStats:
    """Counters filled while iterating; reset when a new iteration starts."""

    files_seen: int = 0  # input files opened (after include/exclude)
    documents: int = 0  # documents yielded
    skipped_empty: int = 0  # empty or whitespace-only documents (a blank JSONL line is no row)
    skipped_short: int = 0  # documents shorter than min_chars
    skipped_no_text_field: int = 0  # JSONL rows without the --text-field field
    skipped_binary: int = 0  # files with a NUL byte in their first 8 KiB
    skipped_excluded: int = 0  # files left out by include/exclude
    skipped_symlinks: int = 0  # symlinked directories, links out of the tree, broken links, loops
    skipped_duplicates: int = 0  # symlinks to a file that is read anyway
    skipped_unreadable: int = 0  # corrupt .gz files, files the OS cannot read
    undecodable_bytes: int = 0  # bytes that are not UTF-8 (policies replace and skip)
    undecodable_files: int = 0  # text files with such bytes (replace and skip)
    undecodable_rows: int = 0  # JSONL lines with such bytes (replace and skip)
    latin1_files: int = 0  # text files decoded as Latin-1
    latin1_rows: int = 0  # JSONL lines decoded as Latin-1
    gutenberg_stripped: int = 0  # documents whose Project Gutenberg header/footer was cut (kept)
    byte_order_marks: int = 0  # text files opening with a UTF-8 byte-order mark, read past (not a token)
    doc_start_cut: int = 0  # text files --doc-start cut into several documents
    doc_start_uncut: int = 0  # text files in which no line but the first matched --doc-start (one document)
    bytes_read: int = 0  # input bytes read (decompressed; Parquet/Arrow: UTF-8 bytes of the text)

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def reset(self) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, 0)


class Source:
    """A corpus on disk; iterate it for ``Document`` objects (see the module docstring).

    After an iteration, ``stats`` counts what happened and ``skipped`` names every file (or
    row) that was left out, as ``{"path", "reason"}`` (rows also have ``"row"``).
    """

    def __init__(self, path: str | Path, options: SourceOptions | None = None):
        self.given = shown_name(str(path))  # as recorded and printed (a name not UTF-8: \xNN)
        self.path = Path(path).expanduser()
        self.options = options or SourceOptions()
        if not self.path.exists():
            raise UserError(f"SOURCE not found: {self.given}")
        self.kind = detect_kind(self.path, self.options.include, self.options.exclude)
        self.stats = SourceStats()
        self.skipped: list[dict] = []
        self._listing: tuple[list, list] | None = None  # ``files``, walked once
        self._doc_start = (
            None if self.options.doc_start is None else compile_doc_start(self.options.doc_start)
        )
        self.split: str | None = None  # the split read of a saved DatasetDict
        if self.kind == "hf-dataset":
            self.split = hf_split(self.path, self.options.split)
            hf_arrow_files(self.path, self.split)  # fail early on a missing file
        elif self.options.split is not None:
            raise UserError(
                f"--split applies to a saved Hugging Face DatasetDict, and {self.given} is a {self.kind} "
                "source; leave --split out"
            )
        defaults = {f.name: f.default for f in dataclasses.fields(SourceOptions)}
        fields = [
            (f"--{name.replace('_', '-')}", getattr(self.options, name))
            for name in ("text_field", "domain_field", "path_field")
            if getattr(self.options, name) != defaults[name]
        ]
        if fields and self.kind in ("folder", "file"):
            flag, value = fields[0]
            raise UserError(
                f"{flag} {value} names a field of JSONL / Parquet rows, and {self.given} is read as text "
                f"({'a folder of text files' if self.kind == 'folder' else 'a text file'}, a file a "
                "document); leave it out, or give a JSONL / Parquet file, or a folder of those only"
            )
        if self.options.doc_start is not None and self.kind not in ("folder", "file"):
            raise UserError(
                f"--doc-start cuts text files, and {self.given} is a {self.kind} source whose rows are "
                "documents already; leave --doc-start out"
            )
        if self.kind == "file":
            try:
                binary = read_text_bytes(self.path, head_only=True)[1]
            except Unreadable as e:
                raise UserError(f"cannot read SOURCE {self.given}: {e}; fix or remove it") from None
            if binary:
                raise UserError(
                    f"SOURCE is not a text file (NUL byte in its first 8 KiB): {self.given}; "
                    "pass a text file, a folder, JSONL or Parquet"
                )

    def describe(self) -> dict:
        """Kind, resolved path and options, JSON-serialisable (for a store's meta.json)."""
        return {
            "format": FORMAT,
            "kind": self.kind,
            "path": shown_name(str(self.path.resolve())),
            "source": self.given,
            **({"split": self.split} if self.split is not None else {}),
            "options": dataclasses.asdict(self.options),
        }

    def split_note(self) -> str | None:
        """For a saved DatasetDict, one line naming every split with its rows and the one read."""
        splits = hf_splits(self.path) if self.kind == "hf-dataset" else None
        if splits is None:
            return None
        sizes = []
        for name in splits:
            try:
                n = arrow_rows(hf_arrow_files(self.path, name))
                sizes.append(f"{name} ({n:,} row{'s' * (n != 1)})")
            except UserError:
                sizes.append(f"{name} (incomplete)")
        others = "; --split NAME reads another" if len(splits) > 1 else ""
        return f"{self.given} is a DatasetDict with splits {', '.join(sizes)}: ingesting {self.split}{others}"

    def provenance_note(self) -> str | None:
        """For a folder, one line naming the files ingested as documents whose names say they describe
        the corpus rather than belong to it (README, SOURCE, LICENSE, manifest: ``PROVENANCE_NAMES``),
        with the ``--exclude`` that leaves them out. They are kept, as every file is, unless excluded:
        a code tree's READMEs may well be wanted; the line only keeps it from happening unseen."""
        if self.kind != "folder":
            return None
        found = provenance_files(rel for rel, _ in self.files()[0])
        if not found:
            return None
        n, globs = len(found), ",".join(exclude_globs(found))
        return (
            f"note: {n} file{'s' * (n != 1)} named like a corpus's own notes (where it came from, its "
            f"licence, its index) {'are' if n > 1 else 'is'} ingested as text: {some(found, 5)}; "
            f"--exclude {shlex.quote(globs)} leaves {'them' if n > 1 else 'it'} out"
        )

    def rows_as_text_note(self) -> str | None:
        """For a folder that holds JSON-lines files beside other files, one line saying they are read
        as text, one document each (a folder reads its rows only when it holds nothing else: a code
        tree's ``.json`` files are text), and how to read their rows. A user's two ``.jsonl`` files beside
        one ``.txt`` were stored as JSON syntax, in silence."""
        if self.kind != "folder":
            return None
        rels = [rel for rel, _ in self.files()[0]]
        known = set(provenance_files(rels))  # manifest.jsonl and the like: said by provenance_note
        rows = [r for r in rels if r.lower().endswith((".jsonl", ".jsonl.gz")) and r not in known]
        if not rows:
            return None
        one = len(rows) == 1
        its, them = ("its", "it") if one else ("their", "them")
        return (
            f"note: {len(rows)} JSON-lines file{'s' * (not one)} ({some(rows, 3)}) {'is' if one else 'are'} "
            "read as text, one document each, as every file of a folder that holds other files too; to "
            f"read {its} rows, ingest {them} on {its} own (the file, or a folder of JSON-lines files only), "
            f"or --exclude {them} here"
        )

    def table_as_text_note(self) -> str | None:
        """One line when CSV / TSV files are read (as text, one document a file, header and all): rows
        are read from JSONL and Parquet only. A user's 301-line CSV became one document in silence."""
        if self.kind not in ("folder", "file"):
            return None
        tables = [rel for rel, _ in self.files()[0] if rel.lower().endswith(TABLE_SUFFIXES)]
        if not tables:
            return None
        one = len(tables) == 1
        what = "is a CSV/TSV file" if one else f"are {len(tables)} CSV/TSV files"
        return (
            f"note: {some(tables, 3)} {what}, read as text: one document {'' if one else 'each '}holding "
            "every line, header included; to ingest rows, write them as JSONL or Parquet (e.g. "
            "pandas.read_csv(F).to_parquet(F2)) and ingest that"
        )

    def pattern_notes(self) -> list[str]:
        """For a folder, a line per glob that matched nothing it should have (``unmatched_globs``)."""
        if self.kind != "folder":
            return []
        return unmatched_globs(*self.files(), self.options.include, self.options.exclude)

    def one_document_note(self) -> str | None:
        """For a single text file of some size read whole, one line saying it becomes one document and
        how to cut it: WikiText's test split is one file of 62 articles, and packing, SPLICE and the
        contextwise loss see none of their boundaries unless it is cut."""
        if (
            self.kind != "file"
            or self.options.doc_start is not None
            or self.path.stat().st_size < ONE_DOC_NOTE
        ):
            return None
        return (
            f"note: {self.given} is one file, so it is one document; if it holds several (articles, "
            "chapters), --doc-start REGEX cuts it before each line that opens one (docs/data.md)"
        )

    def fingerprint(self) -> str:
        """sha256 over kind, options and (relative path, size, mtime_ns) of every input file."""
        h = hashlib.sha256(
            json.dumps([FORMAT, self.kind, fingerprint_options(self.options)], sort_keys=True).encode()
        )
        for rel, path in self.files()[0]:
            st = path.stat()
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return h.hexdigest()

    def check_encoding(self, fix: str = STRICT_FIX) -> None:
        """Under ``--encoding strict``, raise one ``UserError`` naming every undecodable text file
        before anything is read for real (``source_text.check_encoding``)."""
        check_encoding(self, fix)

    def files(self) -> tuple[list[tuple[str, Path]], list[dict]]:
        """(relative name, path) of every input file, and the entries left out; listed once per
        ``Source`` (a walk of 50,721 files takes 0.6 s), so the notes, the encoding check, the
        fingerprint and the reading all see the same files. Copies: callers may extend them."""
        if self._listing is None:
            if self.kind == "hf-dataset":
                self._listing = hf_arrow_files(self.path, self.split), []
            elif self.path.is_file():
                self._listing = [(shown_name(self.path.name), self.path)], []
            else:
                self._listing = walk(self.path, self.options.include, self.options.exclude)
        files, skipped = self._listing
        return list(files), list(skipped)

    def __iter__(self) -> Iterator[Document]:
        self.stats.reset()
        files, self.skipped = self.files()
        for entry in self.skipped:
            self._count_skip(entry["reason"])
        reader = {
            "folder": partial(text_rows, self),
            "file": partial(text_rows, self),
            "jsonl": partial(jsonl_rows, self),
            "parquet": partial(table_rows, self),
            "hf-dataset": partial(table_rows, self),
        }[self.kind]
        latin1 = 0
        for text, meta in reader(files):
            if self.stats.latin1_files + self.stats.latin1_rows > latin1:  # this one was decoded so
                latin1 = self.stats.latin1_files + self.stats.latin1_rows
                meta = {**meta, "encoding": "latin-1"}  # docs.jsonl names which documents were
            for piece, piece_meta in self._sections(self._body(text, meta), meta):
                doc = self._accept(piece, piece_meta)
                if doc is not None:
                    yield doc
        if self.stats.documents == 0:
            raise UserError(self._empty_message())

    def skip(self, rel: str, reason: str, row: int | None = None) -> None:
        """Name a file (or a row of one) that is left out, and count it."""
        entry = {"path": rel, "reason": reason}
        self.skipped.append(entry if row is None else {"path": rel, "row": row, "reason": reason})
        self._count_skip(reason)

    def _count_skip(self, reason: str) -> None:
        st = self.stats
        if reason == EXCLUDED:
            st.skipped_excluded += 1
        elif reason.startswith("duplicate"):
            st.skipped_duplicates += 1
        elif "symlink" in reason:
            st.skipped_symlinks += 1
        elif reason.startswith("unreadable"):
            st.skipped_unreadable += 1

    def _body(self, text: str | LongText, meta: dict) -> str | LongText:
        """The text without its Project Gutenberg header and footer (under ``strip_gutenberg``)."""
        if self.options.strip_gutenberg == "no" or not isinstance(text, str):
            return text
        span = find_gutenberg_body(text)
        if span is not None:
            self.stats.gutenberg_stripped += 1
            return text[span[0] : span[1]]
        if self.options.strip_gutenberg == "yes":
            raise UserError(
                f"no Project Gutenberg START/END markers in {meta['id']} of {self.given}; "
                "use --strip-gutenberg auto or no"
            )
        return text

    def _sections(self, text: str | LongText, meta: dict) -> Iterator[tuple[str | LongText, dict]]:
        """The documents of one text: itself, or with ``--doc-start`` its pieces, each with the
        file's meta, its number in the file (``section``, from 0), the id ``PATH#section`` and the
        file's path as domain (with ``--domain-depth N``: the folders' domain, as for whole files)."""
        rx = self._doc_start
        if rx is None:
            yield text, meta
            return
        # the file is its sections' domain (a book for its chapters), unless --domain-depth says otherwise
        domain = meta["domain"] if self.options.domain_depth else meta["path"]
        k = -1
        for k, piece in enumerate(cut_text(text.chunks() if isinstance(text, LongText) else [text], rx)):
            yield piece, {**meta, "id": f"{meta['id']}#{k}", "section": k, "domain": domain}
        self.stats.doc_start_cut += k > 0
        self.stats.doc_start_uncut += k == 0

    def _accept(self, text: str | LongText, meta: dict) -> Document | None:
        """Drop empty and short texts, count what happened."""
        st, opts = self.stats, self.options
        n = len(text)
        if isinstance(text, LongText):
            n = text.n_stripped
        elif n and (text[0].isspace() or text[-1].isspace()):
            n = len(text.strip())
        if n == 0:
            st.skipped_empty += 1
            self._skip_doc(meta, "empty")
        elif n < opts.min_chars:
            st.skipped_short += 1
            self._skip_doc(meta, f"shorter than --min-chars {opts.min_chars}")
        else:
            st.documents += 1
            return Document(text, meta)  # type: ignore[arg-type]  (a LongText is streamed by ingest)
        return None

    def _skip_doc(self, meta: dict, reason: str) -> None:
        entry = {"path": meta.get("file", meta["path"]), "reason": reason}
        for key in ("row", "section"):
            if key in meta:
                entry[key] = meta[key]
        self.skipped.append(entry)

    def _empty_message(self) -> str:
        st = self.stats
        parts = [
            f"{n} {what}"
            for n, what in (
                (st.skipped_binary, "files were binary" if st.skipped_binary != 1 else "file was binary"),
                (st.skipped_empty, "empty"),
                (st.skipped_short, f"shorter than --min-chars {self.options.min_chars}"),
                (st.skipped_no_text_field, f"rows without the field {self.options.text_field!r}"),
                (
                    st.undecodable_files + st.undecodable_rows if self.options.encoding == "skip" else 0,
                    "not UTF-8 (--encoding skip)",
                ),
                (st.skipped_excluded, "excluded by --include/--exclude"),
                (
                    st.skipped_symlinks,
                    "symlinks skipped (links to folders, out of the folder, or broken are never followed: "
                    "copy the files in, or give the folder they point into)",
                ),
                (st.skipped_duplicates, "duplicate symlinks"),
                (st.skipped_unreadable, "unreadable"),
            )
            if n
        ]
        seen = f"{st.files_seen} file{'s' * (st.files_seen != 1)} read" + (
            ": " + ", ".join(parts) if parts else ""
        )
        return f"no documents in {self.given}: {seen}; check --include/--exclude, --min-chars and the path"


def fingerprint_options(options: SourceOptions) -> dict:
    """The options as fingerprints see them: an option added since stores were first made is
    left out while it has its default, so an older store of the same command stays up to date."""
    d = dataclasses.asdict(options)
    for key in ("split", "doc_start"):
        if d[key] is None:
            del d[key]
    return d


def open_source(path: str | Path, options: SourceOptions | None = None) -> Source:
    """Open the corpus at ``path`` (folder, file, JSONL, Parquet or saved HF dataset)."""
    return Source(path, options)
