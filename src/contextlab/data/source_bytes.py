"""How many bytes an ingest reads from a source: the total (and so the ETA) of its progress bar.

The ingest bar counts ``Source.stats.bytes_read``, the bytes read from the input files. For
plain text files and uncompressed JSONL that is the sum of the file sizes, known from one
``stat`` per file before anything is read. Compressed files (counted decompressed) and
Parquet / Arrow (counted as the UTF-8 bytes of the text column) have no such total without
reading them, so their bar shows bytes and a rate but no percentage. Trade-off: the tree is
listed once more (as the fingerprint does) to give a long ingest its ETA.
"""

from __future__ import annotations

from contextlab.data.source_files import walk


def source_bytes(src) -> int | None:
    """Bytes ``src`` (a ``Source``) will read, or None where that is not known up front."""
    if src.kind not in ("folder", "file", "jsonl"):
        return None
    if src.path.is_file():
        files = [src.path]
    else:
        files = [path for _, path in walk(src.path, src.options.include, src.options.exclude)[0]]
    if any(path.name.lower().endswith(".gz") for path in files):
        return None
    return sum(path.stat().st_size for path in files)
