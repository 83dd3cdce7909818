"""Read a corpus into a deterministic stream of documents.

``open_source(PATH)`` looks at PATH and picks a reader:

- ``folder``: a tree of text/code files, one document per file, sorted by relative posix
  path. Hidden files and directories (``.git``) are skipped; symlinked directories and
  symlinks that point out of the tree are skipped and counted; ``.gz`` files are
  decompressed and keep their full name (``a/b.txt.gz``), so a path always names a real
  file. A file with a NUL byte in its first 8 KiB is binary: skipped and counted.
- ``file``: one text file, one document.
- ``jsonl``: ``.jsonl``/``.jsonl.gz``/``.json`` lines files (or a folder holding only
  those), one document per line, the text in ``options.text_field``.
- ``parquet``: a ``.parquet`` file or a folder holding only those, read in row batches.
- ``hf-dataset``: a folder written by ``datasets`` ``save_to_disk`` (a ``DatasetDict``
  gives its ``train`` split), read straight from the Arrow files with pyarrow, so the
  ``datasets`` package is not needed.

Trade-offs. Text files are read whole (a document is one file, and documents are what the
tokenizer takes), while row formats stream in batches, so memory follows the largest
document, never the corpus. Text is kept byte-exact: no newline conversion and no
whitespace stripping (``min_chars`` looks at the stripped length but keeps the text), so
offsets into the source files stay valid. Nothing is dropped silently: every skipped file
or row is counted in ``Source.stats``, and a corpus that yields nothing raises
``UserError`` at the end of the iteration, saying what was skipped. The fingerprint only
stats the input files (size, mtime), so it is cheap but misses an edit that keeps both.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from contextlab.config import opt
from contextlab.data.gutenberg import find_gutenberg_body
from contextlab.data.source_files import (
    JSONL_SUFFIXES,
    hf_arrow_files,
    open_bytes,
    read_text_bytes,
    record_batches,
    stem,
    walk,
)
from contextlab.errors import UserError

FORMAT = "contextlab.sources/1"


@dataclass
class Document:
    """One document: its exact text and metadata (``id``, ``source``, ``path``, ``domain``, ``row``)."""

    text: str
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
    exclude: list[str] = opt([], "globs on the relative path to leave out (comma-separated)")
    strip_gutenberg: Gutenberg = opt(
        "auto",
        "cut Project Gutenberg header/footer: auto (when markers are found), yes (markers required), no",
    )
    encoding: Encoding = opt(
        "strict",
        "undecodable bytes: strict (stop), replace (U+FFFD), skip (the file), "
        "latin-1 (decode the file as Latin-1); all are counted",
    )
    min_chars: int = opt(1, "skip documents whose stripped text is shorter than this (counted)")

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
        self.include = [self.include] if isinstance(self.include, str) else list(self.include)
        self.exclude = [self.exclude] if isinstance(self.exclude, str) else list(self.exclude)


@dataclass
class SourceStats:
    """Counters filled while iterating; reset when a new iteration starts."""

    files_seen: int = 0  # input files opened (after include/exclude)
    documents: int = 0  # documents yielded
    skipped_empty: int = 0  # empty or whitespace-only documents (and blank JSONL lines)
    skipped_short: int = 0  # documents shorter than min_chars
    skipped_binary: int = 0  # files with a NUL byte in their first 8 KiB
    skipped_excluded: int = 0  # files left out by include/exclude
    skipped_symlinks: int = 0  # symlinked directories, links out of the tree, broken links
    undecodable_bytes: int = 0  # bytes that are not UTF-8 (policies replace and skip)
    undecodable_files: int = 0  # files (JSONL: lines) with such bytes (replace and skip)
    latin1_files: int = 0  # files (JSONL: lines) decoded as Latin-1
    gutenberg_stripped: int = 0  # documents whose Project Gutenberg header/footer was cut
    bytes_read: int = 0  # input bytes read (decompressed; Parquet/Arrow: UTF-8 bytes of the text)

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def reset(self) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, 0)


def _detect(path: Path, options: SourceOptions) -> str:
    """The kind of source at ``path``, from its name or the files it holds."""
    if path.is_file():
        name = path.name.lower()
        if name.endswith(".parquet"):
            return "parquet"
        return "jsonl" if name.endswith(JSONL_SUFFIXES) else "file"
    saved = (path / "state.json").is_file() or (path / "dataset_info.json").is_file()
    if (path / "dataset_dict.json").is_file() or (saved and any(path.glob("*.arrow"))):
        return "hf-dataset"
    names = [rel.lower() for rel, _ in walk(path, options.include, options.exclude)[0]]
    if names and all(n.endswith(".parquet") for n in names):
        return "parquet"
    if names and all(n.endswith(JSONL_SUFFIXES) for n in names):
        return "jsonl"
    return "folder"


class Source:
    """A corpus on disk; iterate it for ``Document`` objects (see the module docstring)."""

    def __init__(self, path: str | Path, options: SourceOptions | None = None):
        self.given = str(path)
        self.path = Path(path).expanduser()
        self.options = options or SourceOptions()
        if not self.path.exists():
            raise UserError(f"SOURCE not found: {self.given}")
        self.kind = _detect(self.path, self.options)
        self.stats = SourceStats()
        if self.kind == "hf-dataset":
            hf_arrow_files(self.path)  # fail early on a missing split
        if self.kind == "file" and read_text_bytes(self.path, head_only=True)[1]:
            raise UserError(
                f"SOURCE is not a text file (NUL byte in its first 8 KiB): {self.given}; "
                "pass a text file, a folder, JSONL or Parquet"
            )

    def describe(self) -> dict:
        """Kind, resolved path and options, JSON-serialisable (for a store's meta.json)."""
        return {
            "format": FORMAT,
            "kind": self.kind,
            "path": str(self.path.resolve()),
            "source": self.given,
            "options": dataclasses.asdict(self.options),
        }

    def fingerprint(self) -> str:
        """sha256 over kind, options and (relative path, size, mtime_ns) of every input file."""
        h = hashlib.sha256(
            json.dumps([FORMAT, self.kind, dataclasses.asdict(self.options)], sort_keys=True).encode()
        )
        for rel, path in self._files()[0]:
            st = path.stat()
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return h.hexdigest()

    def _files(self) -> tuple[list[tuple[str, Path]], int, int]:
        if self.kind == "hf-dataset":
            return hf_arrow_files(self.path), 0, 0
        if self.path.is_file():
            return [(self.path.name, self.path)], 0, 0
        return walk(self.path, self.options.include, self.options.exclude)

    def __iter__(self) -> Iterator[Document]:
        self.stats.reset()
        files, self.stats.skipped_excluded, self.stats.skipped_symlinks = self._files()
        reader = {
            "folder": self._text_rows,
            "file": self._text_rows,
            "jsonl": self._jsonl_rows,
            "parquet": self._table_rows,
            "hf-dataset": self._table_rows,
        }[self.kind]
        for text, meta in reader(files):
            doc = self._accept(text, meta)
            if doc is not None:
                yield doc
        if self.stats.documents == 0:
            raise UserError(self._empty_message())

    def _accept(self, text: str, meta: dict) -> Document | None:
        """Strip Gutenberg header/footer, drop empty and short texts, count what happened."""
        st, opts = self.stats, self.options
        if opts.strip_gutenberg != "no":
            span = find_gutenberg_body(text)
            if span is not None:
                text = text[span[0] : span[1]]
                st.gutenberg_stripped += 1
            elif opts.strip_gutenberg == "yes":
                raise UserError(
                    f"no Project Gutenberg START/END markers in {meta['id']} of {self.given}; "
                    "use --strip-gutenberg auto or no"
                )
        n = len(text)
        if n and (text[0].isspace() or text[-1].isspace()):
            n = len(text.strip())
        if n == 0:
            st.skipped_empty += 1
        elif n < opts.min_chars:
            st.skipped_short += 1
        else:
            st.documents += 1
            return Document(text, meta)
        return None

    def _decode(self, data: bytes, label: str) -> str | None:
        """UTF-8 decode under ``options.encoding``; None means skip the unit."""
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            if self.options.encoding == "strict":
                raise UserError(
                    f"{label} is not valid UTF-8 (byte offset {e.start}); "
                    "use --encoding replace (or skip, latin-1)"
                ) from None
        st = self.stats
        if self.options.encoding == "latin-1":
            st.latin1_files += 1
            return data.decode("latin-1")
        # surrogateescape keeps one char per bad byte, ignore keeps none: the difference counts them
        st.undecodable_bytes += len(data.decode("utf-8", "surrogateescape")) - len(
            data.decode("utf-8", "ignore")
        )
        st.undecodable_files += 1
        return data.decode("utf-8", "replace") if self.options.encoding == "replace" else None

    def _text_rows(self, files: list[tuple[str, Path]]) -> Iterator[tuple[str, dict]]:
        for rel, path in files:
            self.stats.files_seen += 1
            data, binary = read_text_bytes(path)
            self.stats.bytes_read += len(data)
            if binary:
                self.stats.skipped_binary += 1
                continue
            text = self._decode(data, str(path))
            if text is not None:
                domain = rel.split("/", 1)[0] if "/" in rel else ""
                yield text, {"id": rel, "source": self.given, "path": rel, "domain": domain}

    def _jsonl_rows(self, files: list[tuple[str, Path]]) -> Iterator[tuple[str, dict]]:
        tf, df = self.options.text_field, self.options.domain_field
        for rel, path in files:
            self.stats.files_seen += 1
            try:
                with open_bytes(path) as f:
                    for row, line in enumerate(f):
                        self.stats.bytes_read += len(line)
                        if not line.strip():
                            self.stats.skipped_empty += 1
                            continue
                        label = f"{path} line {row + 1}"
                        line_text = self._decode(line, label)
                        if line_text is None:
                            continue
                        record = _json_line(line_text, label, row, tf)
                        text = _field(record, tf, label, "--text-field")
                        domain = _field(record, df, label, "--domain-field") if df else stem(path.name)
                        yield (
                            text,
                            {
                                "id": f"{rel}#{row}",
                                "source": self.given,
                                "path": rel,
                                "row": row,
                                "domain": domain,
                            },
                        )
            except (gzip.BadGzipFile, EOFError) as e:
                raise UserError(f"{path} is not a valid gzip file ({e}); fix or remove it") from None

    def _table_rows(self, files: list[tuple[str, Path]]) -> Iterator[tuple[str, dict]]:
        """Rows of Parquet files, or of a saved HF dataset (rows numbered across its shards)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        tf, df = self.options.text_field, self.options.domain_field
        hf = self.kind == "hf-dataset"
        name = self.path.resolve().name
        row = 0

        def check(path: Path, schema: Any) -> None:
            for col, flag in ((tf, "--text-field"), (df, "--domain-field")):
                if col is not None and col not in schema.names:
                    raise UserError(
                        f"{path} has no column {col!r} (columns: {', '.join(schema.names)}); pass {flag} NAME"
                    )
            kind = schema.field(tf).type
            if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
                raise UserError(f"column {tf!r} of {path} holds {kind}, not text; pass --text-field NAME")

        for rel, path in files:
            self.stats.files_seen += 1
            row = row if hf else 0  # a saved HF dataset numbers rows across its shards
            default_domain = name if hf else stem(path.name)
            for batch in record_batches(path, hf, [tf] + ([df] if df and df != tf else []), check):
                column = batch.column(tf)
                self.stats.bytes_read += pc.sum(pc.binary_length(column)).as_py() or 0
                texts = column.to_pylist()
                domains = batch.column(df).to_pylist() if df else [default_domain] * len(texts)
                for text, domain in zip(texts, domains):
                    meta = {
                        "id": f"{name if hf else rel}#{row}",
                        "source": self.given,
                        "path": rel,
                        "row": row,
                        "domain": "" if domain is None else str(domain),
                    }
                    yield text or "", meta
                    row += 1

    def _empty_message(self) -> str:
        st = self.stats
        parts = [
            f"{n} {what}"
            for n, what in (
                (st.skipped_binary, "files were binary"),
                (st.skipped_empty, "empty"),
                (st.skipped_short, f"shorter than --min-chars {self.options.min_chars}"),
                (
                    st.undecodable_files if self.options.encoding == "skip" else 0,
                    "not UTF-8 (--encoding skip)",
                ),
                (st.skipped_excluded, "excluded by --include/--exclude"),
                (st.skipped_symlinks, "symlinks skipped"),
            )
            if n
        ]
        seen = f"{st.files_seen} file{'s' * (st.files_seen != 1)} read" + (
            ": " + ", ".join(parts) if parts else ""
        )
        return f"no documents in {self.given}: {seen}; check --include/--exclude, --min-chars and the path"


def _json_line(line: str, label: str, row: int, text_field: str) -> Any:
    """The JSON value of one JSONL line; invalid JSON is a UserError naming the line."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        hint = (
            " (a JSON array? write one object per line)" if row == 0 and line.lstrip().startswith("[") else ""
        )
        raise UserError(
            f"{label} is not valid JSON ({e.msg}){hint}; "
            f"each line must be an object with a {text_field!r} field"
        ) from None


def _field(record: Any, name: str, label: str, flag: str) -> str:
    """A string field of a JSON record; a missing field or a non-text value is a UserError."""
    if not isinstance(record, dict):
        raise UserError(
            f"{label} holds a JSON {type(record).__name__}, not an object; write one object per line"
        )
    if name not in record:
        raise UserError(f"{label} has no field {name!r} (found: {', '.join(record)}); pass {flag} NAME")
    value = record[name]
    if value is None:
        return ""
    if not isinstance(value, (str, int, float)) or (flag == "--text-field" and not isinstance(value, str)):
        raise UserError(f"{label}: field {name!r} holds {type(value).__name__}, not text; pass {flag} NAME")
    return str(value)


def open_source(path: str | Path, options: SourceOptions | None = None) -> Source:
    """Open the corpus at ``path`` (folder, file, JSONL, Parquet or saved HF dataset)."""
    return Source(path, options)
