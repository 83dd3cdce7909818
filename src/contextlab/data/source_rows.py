"""Rows of JSONL, Parquet and saved Hugging Face datasets as (text, meta) pairs for ``Source``.

JSONL is read line by line (gzip transparently) and Parquet / Arrow in record batches, so
memory follows the largest row, never the file. A row's ``path`` is the file it came from,
unless ``--path-field`` names a field holding the row's own path (a code dataset's file
name): then ``path`` is that value, ``file`` the container, and the domain comes from the
path's folders. A JSONL row may lack the domain or path field (it gets none) or the text
field (it is skipped and named); only a field that no row of a file has is refused, as a
typo. Trade-offs: that is known only once the file is read (the reader streams), so a typo
in the domain or path field is refused after the file's rows were read (and tokenized: the
ingest then deletes its partial store); a corrupt gzip
stream is found only when reading reaches it, so the rows before it are kept and the rest of
that file is skipped and named, rather than the whole corpus being checked first.
"""

from __future__ import annotations

import gzip
import json
import zlib
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from contextlab.data.source_files import open_bytes, record_batches, stem
from contextlab.data.source_text import decode
from contextlab.errors import UserError

Source = Any  # contextlab.data.sources.Source (not imported: it imports this module)


class NoRowHasField(UserError):
    """No row of a file has a field the options name: a typo, found once the file is read. The
    rows already stored are of no use (the same command fails again, the fixed one is another)."""


def row_meta(src: Source, rel: str, row: int, domain: Any, path: Any = None, id_: str | None = None) -> dict:
    """The meta of one row; with ``--path-field`` the row's own ``path`` and a domain from it."""
    meta = {"id": id_ or f"{rel}#{row}", "source": src.given, "path": rel, "row": row}
    if src.options.path_field is not None:
        own = "" if path is None else str(path)
        meta.update(path=own, file=rel)
        if src.options.domain_field is None:
            depth = src.options.domain_depth or 1
            domain = "/".join(own.split("/")[:-1][:depth])
    meta["domain"] = "" if domain is None else str(domain)
    return meta


def jsonl_rows(src: Source, files: list[tuple[str, Path]]) -> Iterator[tuple[str, dict]]:
    """Rows of JSONL files. A row without the text field is skipped and named; one without the
    domain or path field gets none (``""``, as a null). A field that no row of a file has is a
    typo: a UserError once the file is read, naming the fields of its first row without it
    (rows without the text field are held as row numbers until one has it, so a typo costs
    8 bytes a row, not a skipped entry)."""
    tf, df, pf = src.options.text_field, src.options.domain_field, src.options.path_field
    named = named_fields(src.options)
    for rel, path in files:
        src.stats.files_seen += 1
        found: set[str] = set()  # the named fields some row of this file has
        lacking: dict[str, str] = {}  # named field -> the fields of the first row without it
        textless = array("q")  # rows without the text field, before any row of the file had it
        row = -1
        try:
            with open_bytes(path) as f:
                for row, line in enumerate(f):
                    src.stats.bytes_read += len(line)
                    if not line.strip():  # JSONL's whitespace, not a row: neither counted nor listed
                        continue
                    label = f"{path} line {row + 1}"
                    line_text = decode(src, line, label, rel, row)
                    if line_text is None:
                        continue
                    record = json_object(json_line(line_text, label, row, tf), label)
                    for name, _ in named:
                        if name in record:
                            found.add(name)
                        else:
                            lacking.setdefault(name, f"line {row + 1} has: {', '.join(record) or 'no field'}")
                    has_text = tf in record
                    if not has_text:
                        textless.append(row)
                    if textless and tf in found:  # the file has the field: those rows are skipped
                        _skip_textless(src, rel, textless)
                    if not has_text:
                        continue
                    text = field(record, tf, label, "--text-field")
                    domain = field(record, df, label, "--domain-field") if df else stem(path.name)
                    own = field(record, pf, label, "--path-field") if pf else None
                    yield text, row_meta(src, rel, row, domain, own)
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:
            src.skip(
                rel,
                f"unreadable: not a valid gzip file ({e}) after line {row + 1}; the lines before are kept",
            )
        for name, flag in named:
            if name in lacking and name not in found:
                raise NoRowHasField(
                    f"no row of {path} has a field {name!r} ({lacking[name]}); pass {flag} NAME"
                )


def _skip_textless(src: Source, rel: str, rows: array) -> None:
    """Name (and count) the rows of ``rel`` held in ``rows`` as skipped for lacking the text field."""
    for row in rows:
        src.stats.skipped_no_text_field += 1
        src.skip(rel, f"no field {src.options.text_field!r}", row)
    del rows[:]


def named_fields(options: Any) -> list[tuple[str, str]]:
    """The fields a source reads from each row (text, domain, path), each with the flag naming it."""
    fields = [
        (options.text_field, "--text-field"),
        (options.domain_field, "--domain-field"),
        (options.path_field, "--path-field"),
    ]
    return [(name, flag) for name, flag in fields if name]


def table_rows(src: Source, files: list[tuple[str, Path]]) -> Iterator[tuple[str, dict]]:
    """Rows of Parquet files, or of a saved HF dataset (rows numbered across its shards)."""
    import pyarrow.compute as pc

    tf, df, pf = src.options.text_field, src.options.domain_field, src.options.path_field
    hf = src.kind == "hf-dataset"
    name = src.path.resolve().name
    columns = list(dict.fromkeys(c for c in (tf, df, pf) if c))
    row = 0
    for rel, path in files:
        src.stats.files_seen += 1
        row = row if hf else 0  # a saved HF dataset numbers rows across its shards
        default_domain = name if hf else stem(path.name)
        for batch in record_batches(path, hf, columns, _check_schema(src)):
            column = batch.column(tf)
            src.stats.bytes_read += pc.sum(pc.binary_length(column)).as_py() or 0
            texts = column.to_pylist()
            domains = batch.column(df).to_pylist() if df else [default_domain] * len(texts)
            paths = batch.column(pf).to_pylist() if pf else [None] * len(texts)
            for text, domain, own in zip(texts, domains, paths):
                yield text or "", row_meta(src, rel, row, domain, own, f"{name if hf else rel}#{row}")
                row += 1


def _check_schema(src: Source):
    """The check of a Parquet / Arrow file's schema: every named column is there, the text column
    holds strings, the domain and path columns strings or integers (one label per row: a struct
    or list would become its printed form, one domain per distinct value)."""
    import pyarrow as pa

    def is_text(kind: Any) -> bool:  # string_view only exists in pyarrow >= 16
        return pa.types.is_string(kind) or pa.types.is_large_string(kind) or str(kind) == "string_view"

    def is_label(kind: Any, integers: bool = True) -> bool:
        if pa.types.is_dictionary(kind):  # a categorical column
            kind = kind.value_type
        return is_text(kind) or (integers and pa.types.is_integer(kind))

    def check(path: Path, schema: Any) -> None:
        for col, flag in named_fields(src.options):
            if col not in schema.names:
                strings = [f.name for f in schema if is_text(f.type)]
                named = flag == "--text-field" and strings and strings != list(schema.names)
                holds = f"{', '.join(strings)} {'hold' if len(strings) > 1 else 'holds'} text"
                hint = f"; {holds}" if named else ""  # which of them could be the text
                columns = ", ".join(schema.names)
                raise UserError(f"{path} has no column {col!r} (columns: {columns}{hint}); pass {flag} NAME")
            kind = schema.field(col).type
            if flag == "--text-field" and not is_text(kind):
                raise UserError(f"column {col!r} of {path} holds {kind}, not text; pass --text-field NAME")
            if flag != "--text-field" and not is_label(kind):
                strings = [f.name for f in schema if is_label(f.type, integers=False)]
                raise UserError(
                    f"column {col!r} of {path} holds {kind}, not strings; {flag} needs a column of strings "
                    f"({'string columns: ' + ', '.join(strings) if strings else 'this file has none'})"
                )

    return check


def json_line(line: str, label: str, row: int, text_field: str) -> Any:
    """The JSON value of one JSONL line; invalid JSON is a UserError naming the line. A UTF-8 byte-order
    mark opening the file (which some editors write) is an encoding mark, not JSON: it is read past."""
    if row == 0:
        line = line.removeprefix("\ufeff")
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


def json_object(record: Any, label: str) -> dict:
    """A JSONL row as a JSON object; any other JSON value is a UserError naming the line."""
    if not isinstance(record, dict):
        raise UserError(
            f"{label} holds a JSON {type(record).__name__}, not an object; write one object per line"
        )
    return record


def field(record: dict, name: str, label: str, flag: str) -> str:
    """A string field of a JSON object; a missing or null field is ``""`` (the caller decides
    whether a row may lack it), a value that is not text is a UserError."""
    value = record.get(name)
    if value is None:
        return ""
    if not isinstance(value, (str, int, float)) or (flag == "--text-field" and not isinstance(value, str)):
        raise UserError(f"{label}: field {name!r} holds {type(value).__name__}, not text; pass {flag} NAME")
    return str(value)
