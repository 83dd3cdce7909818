"""Finding and opening a source's files: folder walk, text bytes, Arrow and Parquet batches.

``walk`` lists a folder tree in sorted relative-path order with include/exclude globs,
skipping hidden entries and symlinks that leave the tree (counted). ``read_text_bytes``
reads a text file (gzip transparently) and tells binary files by a NUL byte in the first
``BINARY_PROBE`` bytes. ``hf_arrow_files`` finds the Arrow files of a ``save_to_disk``
dataset and ``record_batches`` streams Arrow or Parquet record batches, memory-mapped.
Trade-off: a text file is read whole (a document is one file), while row formats stream in
batches, so memory follows the largest document, never the corpus.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from contextlab.errors import UserError

BINARY_PROBE = 8192  # bytes inspected for a NUL byte
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz")


def globs_regex(patterns: list[str]) -> re.Pattern:
    """One regex matching a relative posix path against any of ``patterns``."""
    return re.compile("|".join(f"(?:{glob_regex(p)})" for p in patterns), re.S)


def glob_regex(pattern: str) -> str:
    """Translate a glob into a regex string: ``**/`` = any directories, ``*`` and ``?`` stay in one part.

    A pattern without ``/`` matches the file name at any depth (``*.py``); a trailing ``/``
    means everything below (``docs/`` = ``docs/**``).
    """
    pat = pattern.strip()
    if pat.endswith("/"):
        pat += "**"
    pat = pat.lstrip("/") if "/" in pat.rstrip("/") else "**/" + pat
    out, i = [], 0
    while i < len(pat):
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("**", i):
            out.append(".*")
            i += 2
        elif pat[i] in "*?":
            out.append("[^/]*" if pat[i] == "*" else "[^/]")
            i += 1
        elif pat[i] == "[" and (j := pat.find("]", i + 2)) != -1:
            body = pat[i + 1 : j]
            out.append("[" + ("^" + body[1:] if body[0] == "!" else body).replace("\\", "\\\\") + "]")
            i = j + 1
        else:
            out.append(re.escape(pat[i]))
            i += 1
    return "".join(out) + r"\Z"


def walk(root: Path, include: list[str], exclude: list[str]) -> tuple[list[tuple[str, Path]], int, int]:
    """Files under ``root`` as sorted ``(relative posix path, path)``; also n excluded, n symlinks.

    ``include`` / ``exclude`` are globs on the relative path (see ``glob_regex``); an empty
    ``include`` takes every file.
    """
    include_rx = globs_regex(include) if include else None
    exclude_rx = globs_regex(exclude) if exclude else None
    real_root = root.resolve()
    files: list[tuple[str, str]] = []
    excluded = links = 0
    stack = [(str(root), "")]
    while stack:
        folder, prefix = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as e:
            raise UserError(f"cannot list {folder}: {e.strerror}; check the permissions") from None
        for entry in entries:
            if entry.name.startswith("."):
                continue
            rel = prefix + entry.name
            if entry.is_symlink():
                target = Path(entry.path).resolve()
                if not target.is_file() or not target.is_relative_to(real_root):
                    links += 1
                    continue
            elif entry.is_dir():
                stack.append((entry.path, rel + "/"))
                continue
            elif not entry.is_file():
                continue
            if (include_rx and not include_rx.match(rel)) or (exclude_rx and exclude_rx.match(rel)):
                excluded += 1
            else:
                files.append((rel, entry.path))
    files.sort()
    return [(rel, Path(path)) for rel, path in files], excluded, links


def open_bytes(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def read_text_bytes(path: Path, head_only: bool = False) -> tuple[bytes, bool]:
    """The (decompressed) bytes of ``path`` and whether it is binary (then only the head)."""
    try:
        with open_bytes(path) as f:
            head = f.read(BINARY_PROBE)
            if b"\0" in head or head_only:
                return head, b"\0" in head
            return head + f.read(), False
    except (gzip.BadGzipFile, EOFError) as e:
        raise UserError(f"{path} is not a valid gzip file ({e}); fix or remove it") from None


def hf_arrow_files(path: Path) -> list[tuple[str, Path]]:
    """The Arrow files of a saved ``Dataset`` (a ``DatasetDict`` gives its train split)."""
    if (path / "dataset_dict.json").is_file():
        splits = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
        if "train" not in splits:
            raise UserError(
                f"{path} has no 'train' split (splits: {', '.join(splits)}); pass {path}/SPLIT as SOURCE"
            )
        return [("train/" + rel, p) for rel, p in hf_arrow_files(path / "train")]
    state = path / "state.json"
    if state.is_file():
        names = [f["filename"] for f in json.loads(state.read_text()).get("_data_files", [])]
    else:
        names = sorted(p.name for p in path.glob("*.arrow"))
    missing = [n for n in names if not (path / n).is_file()]
    if missing or not names:
        raise UserError(
            f"{path} is an incomplete Hugging Face dataset (missing {missing or '*.arrow'}); "
            "save it again with save_to_disk"
        )
    return [(n, path / n) for n in names]


def record_batches(
    path: Path, arrow: bool, columns: list[str], check: Callable[[Path, Any], None]
) -> Iterator[Any]:
    """Record batches of an Arrow IPC file (stream format, else file format) or of a Parquet
    file (only ``columns``, 256 rows at a time), memory-mapped; ``check`` sees the schema first."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    what = "Arrow" if arrow else "Parquet"
    try:
        if not arrow:
            with pq.ParquetFile(path, memory_map=True) as pf:
                check(path, pf.schema_arrow)
                yield from pf.iter_batches(batch_size=256, columns=columns)
            return
        with pa.memory_map(str(path)) as source:
            try:
                reader = ipc.open_stream(source)
                batches: Iterable[Any] = reader
            except pa.ArrowInvalid:
                source.seek(0)
                reader = ipc.open_file(source)
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
            check(path, reader.schema)
            yield from batches
    except (pa.ArrowInvalid, OSError) as e:
        raise UserError(
            f"{path} is not a readable {what} file ({str(e).splitlines()[0]}); fix or remove it"
        ) from None


def stem(name: str) -> str:
    """A file name without its format suffixes: ``wiki.jsonl.gz`` -> ``wiki``."""
    return re.sub(r"(\.jsonl|\.json|\.parquet|\.arrow)?(\.gz)?\Z", "", name, flags=re.I)
