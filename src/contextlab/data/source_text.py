"""Text files (a folder's, or one file alone) as (text, meta) pairs for ``Source``, decoded under
its ``--encoding`` policy; ``decode`` is that policy for JSONL lines too.

A file is read whole, except past ``--long-doc-mb``: then it is scanned once, chunk by chunk,
into a ``LongText`` that the ingest streams through the tokenizer, so memory follows the chunk,
never the file. Under ``strict`` the trade-off is an extra pass: ``check_encoding`` reads every
file's bytes once before any work, so an ingest never stops half way on one bad file; the other
policies (replace, skip, latin-1) count every byte and file they touched in ``Source.stats``, and
skip names each file it left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from contextlab.data.source_files import (
    LongText,
    Unreadable,
    folder_domains,
    read_text_bytes,
    scan_long_text,
    shown_name,
    utf8_error_offset,
)
from contextlab.errors import UserError

Source = Any  # contextlab.data.sources.Source (not imported: it imports this module)

SHOW_BAD = 20  # undecodable files named in the strict-encoding error (skipped.jsonl has all)
STRICT_FIX = (  # the end of that error for an ingest
    "nothing was tokenized: run again with --encoding replace, skip or latin-1 (skip leaves them out "
    "and lists them in skipped.jsonl)"
)


def check_encoding(src: Source, fix: str = STRICT_FIX) -> None:
    """Under ``--encoding strict``, find every undecodable text file before anything is read
    for real, and raise one ``UserError`` listing them and ending in ``fix`` (a cheap extra pass
    over the bytes)."""
    if src.options.encoding != "strict" or src.kind not in ("folder", "file", "jsonl"):
        return
    bad = [(rel, at) for rel, path in src.files()[0] if (at := utf8_error_offset(path)) is not None]
    if bad:
        shown = ", ".join(f"{rel} (byte {at})" for rel, at in bad[:SHOW_BAD])
        more = f" and {len(bad) - SHOW_BAD} more" if len(bad) > SHOW_BAD else ""
        raise UserError(
            f"{len(bad)} file{'s' * (len(bad) != 1)} in {src.given} {'are' if len(bad) > 1 else 'is'} "
            f"not valid UTF-8: {shown}{more}; {fix}"
        )


def text_rows(src: Source, files: list[tuple[str, Path]]) -> Iterator[tuple[str | LongText, dict]]:
    """(text, meta) of every readable text file of ``files``: one document per file, its relative name
    its id and path, its folders its domain; a file it cannot read or decode is skipped and named."""
    domain = folder_domains([rel for rel, _ in files], src.options.domain_depth)
    for rel, path in files:
        src.stats.files_seen += 1
        try:
            text = read_text(src, rel, path)
        except Unreadable as e:
            src.skip(rel, f"unreadable: {e}")
            continue
        if text is not None:
            yield text, {"id": rel, "source": src.given, "path": rel, "domain": domain(rel)}


def read_text(src: Source, rel: str, path: Path) -> str | LongText | None:
    """The text of one file (a ``LongText`` past ``long_doc_mb``); None when it is skipped."""
    opts = src.options
    if path.stat().st_size > opts.long_doc_mb * 1e6 and opts.strip_gutenberg != "yes":
        if read_text_bytes(path, head_only=True)[1]:
            src.stats.skipped_binary += 1
            src.skip(rel, "binary (a NUL byte in its first 8 KiB)")
            return None
        return long_text(src, rel, path)
    data, binary = read_text_bytes(path)
    src.stats.bytes_read += len(data)
    if binary:
        src.stats.skipped_binary += 1
        src.skip(rel, "binary (a NUL byte in its first 8 KiB)")
        return None
    text = decode(src, data, shown_name(str(path)), rel)
    if text is not None and text.startswith("\ufeff"):  # an editor's UTF-8 mark, not text: 3 tokens
        src.stats.byte_order_marks += 1
        return text[1:]
    return text


def long_text(src: Source, rel: str, path: Path) -> LongText | None:
    """Scan a long file once, chunk by chunk, under the encoding policy (see ``decode``)."""
    st, policy = src.stats, src.options.encoding
    try:
        text, bad = scan_long_text(path, "strict")
    except UnicodeDecodeError:
        at = utf8_error_offset(path)
        if policy == "strict":
            raise UserError(
                f"{shown_name(str(path))} is not valid UTF-8 (byte offset {at}); use --encoding replace "
                "(or skip, latin-1)"
            ) from None
        st.undecodable_files += policy != "latin-1"
        text, bad = scan_long_text(path, "replace" if policy == "skip" else policy)
        if policy == "skip":
            st.undecodable_bytes += bad
            st.bytes_read += text.n_bytes
            src.skip(rel, f"not UTF-8 (byte {at}), --encoding skip")
            return None
        st.latin1_files += policy == "latin-1"
    st.bytes_read += text.n_bytes
    st.undecodable_bytes += bad
    return text


_BINARY_MAGIC = (
    (b"PAR1", "a Parquet file"),
    (b"\x1f\x8b", "gzip-compressed"),
    (b"PK\x03\x04", "a zip archive"),
)


def decode(src: Source, data: bytes, label: str, rel: str, row: int | None = None) -> str | None:
    """UTF-8 decode under ``options.encoding``; None means skip the unit (named in ``skipped``)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if src.options.encoding == "strict":
            kind = next((k for magic, k in _BINARY_MAGIC if data.startswith(magic)), None)
            if kind is not None:  # another format under a text name: no --encoding reads it
                raise UserError(
                    f"{label} is {kind} (by its first bytes), not text; give it the extension of its "
                    "format (.parquet, .gz) or leave it out"
                ) from None
            raise UserError(
                f"{label} is not valid UTF-8 (byte offset {e.start}); "
                "use --encoding replace (or skip, latin-1)"
            ) from None
        start = e.start
    st = src.stats
    if src.options.encoding == "latin-1":
        if row is None:
            st.latin1_files += 1
        else:
            st.latin1_rows += 1
        return data.decode("latin-1")
    # surrogateescape keeps one char per bad byte, ignore keeps none: the difference counts them
    st.undecodable_bytes += len(data.decode("utf-8", "surrogateescape")) - len(data.decode("utf-8", "ignore"))
    if row is None:
        st.undecodable_files += 1
    else:
        st.undecodable_rows += 1
    if src.options.encoding == "replace":
        return data.decode("utf-8", "replace")
    src.skip(rel, f"not UTF-8 (byte {start}), --encoding skip", row)
    return None
