"""Finding and opening a source's files: folder walk, text bytes, Arrow and Parquet batches.

``walk`` lists a folder tree in sorted relative-path order with include/exclude globs,
and names every entry it leaves out with a reason (links that leave the tree, loop, break,
or duplicate a file read anyway; hidden entries are not listed). A name that is not valid
UTF-8 is recorded with its undecodable bytes as ``\\xNN`` (``shown_name``); the file itself is
read as any other. ``read_text_bytes`` reads a text file (gzip transparently) and tells binary
files by a NUL byte in the first ``BINARY_PROBE`` bytes; a corrupt file raises ``Unreadable`` for
the caller to skip. ``LongText`` / ``scan_long_text`` give a file too long to hold whole as
chunks, decoded incrementally. ``hf_arrow_files`` finds the Arrow files of a ``save_to_disk`` dataset (of
one split of a ``DatasetDict``: ``hf_split`` picks it) and ``record_batches`` streams Arrow or
Parquet record batches, memory-mapped. Trade-off: a text file is read whole below
``long_doc_mb`` (a document is one file) and in 16 MB chunks above it, read twice (a scan,
then the tokenizing pass), so memory follows a chunk.
"""

from __future__ import annotations

import codecs
import errno
import gzip
import json
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from contextlab.data.source_globs import EXCLUDED, JSONL_SUFFIXES, globs_regex
from contextlab.errors import UserError

BINARY_PROBE = 8192  # bytes inspected for a NUL byte
CHUNK_BYTES = 1 << 24  # bytes read and decoded at a time from a long file


def detect_kind(path: Path, include: list[str], exclude: list[str]) -> str:
    """The kind of source at ``path``, from its name or the files it holds."""
    if path.is_file():
        name = path.name.lower()
        if name.endswith(".parquet"):
            return "parquet"
        return "jsonl" if name.endswith(JSONL_SUFFIXES) else "file"
    saved = (path / "state.json").is_file() or (path / "dataset_info.json").is_file()
    if (path / "dataset_dict.json").is_file() or (saved and any(path.glob("*.arrow"))):
        return "hf-dataset"
    if _save_to_disk_state(path / "state.json"):  # its Arrow files gone: said so when they are read
        return "hf-dataset"
    names = [rel.lower() for rel, _ in walk(path, include, exclude)[0]]
    if names and all(n.endswith(".parquet") for n in names):
        return "parquet"
    if names and all(n.endswith(JSONL_SUFFIXES) for n in names):
        return "jsonl"
    return "folder"


def walk(root: Path, include: list[str], exclude: list[str]) -> tuple[list[tuple[str, Path]], list[dict]]:
    """Files under ``root`` as sorted ``(relative posix path, path)``, and the entries left out.

    ``include`` / ``exclude`` are globs on the relative path (see ``glob_regex``); an empty
    ``include`` takes every file. Each entry left out is ``{"path", "reason"}`` with a reason
    from ``SKIP_REASONS`` (hidden entries are not listed). A symlink to a file inside the tree
    is read like a file unless that file is read anyway: then it is a duplicate (see
    ``_drop_duplicates``).
    """
    include_rx = globs_regex(include) if include else None
    exclude_rx = globs_regex(exclude) if exclude else None
    real_root = root.resolve()
    files: list[tuple[str, str]] = []
    links: dict[str, str] = {}  # relative path of a symlink -> its resolved target
    skipped: list[dict] = []
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
                target, why = _link_target(entry.path, real_root)
                if why:
                    skipped.append({"path": rel, "reason": why})
                    continue
                links[rel] = target
            elif entry.is_dir():
                stack.append((entry.path, rel + "/"))
                continue
            elif not entry.is_file():
                continue
            if (include_rx and not include_rx.match(rel)) or (exclude_rx and exclude_rx.match(rel)):
                skipped.append({"path": rel, "reason": EXCLUDED})
            else:
                files.append((rel, entry.path))
    files.sort()
    kept = _drop_duplicates(files, links, real_root, skipped)
    skipped = [{"path": shown_name(e["path"]), "reason": shown_name(e["reason"])} for e in skipped]
    skipped.sort(key=lambda e: e["path"])
    return [(shown_name(rel), Path(path)) for rel, path in kept], skipped


def shown_name(name: str) -> str:
    """A file name as contextlab records and prints it: a name that is not valid UTF-8 (held by Python
    as surrogate escapes, which no UTF-8 file or terminal takes) gets its undecodable bytes written
    as ``\\xNN`` (``caf\\xe9.txt``); every other name is itself."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _link_target(path: str, real_root: Path) -> tuple[str, str]:
    """The resolved target of a symlink to a file in the tree, or ``("", why it is skipped)``."""
    try:
        st = os.stat(path)  # follows the link
    except OSError as e:
        return "", "symlink loop" if e.errno == errno.ELOOP else f"broken symlink ({e.strerror})"
    if stat.S_ISDIR(st.st_mode):
        return "", "symlink to a directory (not followed)"
    target = os.path.realpath(path)
    if not stat.S_ISREG(st.st_mode):
        return "", "symlink to something that is not a file"
    if not Path(target).is_relative_to(real_root):
        return "", "symlink out of the tree"
    return target, ""


def _drop_duplicates(
    files: list[tuple[str, str]], links: dict[str, str], real_root: Path, skipped: list[dict]
) -> list[tuple[str, str]]:
    """Keep one copy of each file: a symlink whose target is read (as a file, or through an
    earlier link in path order) is skipped as a duplicate naming that copy."""
    if not links:
        return files
    owner = {str(real_root / rel): rel for rel, _ in files if rel not in links}
    kept = []
    for rel, path in files:
        if rel in links:
            first = owner.setdefault(links[rel], rel)
            if first != rel:
                skipped.append({"path": rel, "reason": f"duplicate of {first} (a symlink to it)"})
                continue
        kept.append((rel, path))
    return kept


def folder_domains(rels: list[str], depth: int) -> Callable[[str], str]:
    """The domain of a relative path: its first ``depth`` folders; with ``depth`` 0, the folders
    common to all ``rels`` and one more (a tarball's ``project-1.0/`` is not one domain)."""
    depth = domain_depth(rels, depth)
    return lambda rel: "/".join(rel.split("/")[:-1][:depth])


def domain_depth(rels: list[str], depth: int) -> int:
    """The folders a domain keeps: ``depth``, or for 0 the depth ``folder_domains`` infers from ``rels``."""
    if depth == 0:
        dirs = [rel.split("/")[:-1] for rel in rels]
        common = 0
        if dirs:
            first = dirs[0]
            common = min(len(d) for d in dirs)
            common = next((i for i in range(common) if any(d[i] != first[i] for d in dirs)), common)
        depth = common + 1
    return depth


def open_bytes(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


class Unreadable(Exception):
    """A file that cannot be read (a corrupt gzip stream, an I/O error): skipped and named."""


def read_text_bytes(path: Path, head_only: bool = False) -> tuple[bytes, bool]:
    """The (decompressed) bytes of ``path`` and whether it is binary (then only the head).

    Raises ``Unreadable`` for a corrupt ``.gz`` or an OS error, with the reason.
    """
    try:
        with open_bytes(path) as f:
            head = f.read(BINARY_PROBE)
            if b"\0" in head or head_only:
                return head, b"\0" in head
            return head + f.read(), False
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise Unreadable(f"not a valid gzip file ({e})") from None
    except OSError as e:
        raise Unreadable(e.strerror or str(e)) from None


def text_decoder(errors: str) -> codecs.IncrementalDecoder:
    """An incremental decoder for an encoding policy: ``latin-1``, or UTF-8 with ``errors``."""
    if errors == "latin-1":
        return codecs.getincrementaldecoder("latin-1")()
    return codecs.getincrementaldecoder("utf-8")(errors)


def byte_chunks(path: Path) -> Iterator[bytes]:
    """The (decompressed) bytes of ``path`` in ``CHUNK_BYTES`` pieces; ``Unreadable`` on a bad file."""
    try:
        with open_bytes(path) as f:
            while data := f.read(CHUNK_BYTES):
                yield data
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise Unreadable(f"not a valid gzip file ({e})") from None
    except OSError as e:
        raise Unreadable(e.strerror or str(e)) from None


def utf8_error_offset(path: Path) -> int | None:
    """Byte offset of the first byte of ``path`` that is not UTF-8; None when the file is valid,
    binary (a NUL byte in its head) or unreadable (the reader skips those anyway)."""
    decoder = text_decoder("strict")
    pos = 0
    try:
        for data in byte_chunks(path):
            if pos == 0 and b"\0" in data[:BINARY_PROBE]:
                return None
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(data)
            except UnicodeDecodeError as e:
                return pos - pending + e.start
            pos += len(data)
        pending = len(decoder.getstate()[0])
        return pos - pending if pending else None
    except Unreadable:
        return None


class LongText:
    """The text of a file too long to hold next to its bytes and its pieces' ids.

    ``len()`` is its length in characters; ``chunks()`` decodes the file again, chunk by
    chunk, so a long document is streamed through the tokenizer instead of held whole.
    """

    def __init__(self, path: Path, errors: str, n_chars: int, n_stripped: int, n_bytes: int):
        self.path, self.errors, self.n_bytes = path, errors, n_bytes  # n_bytes: decompressed
        self.n_chars, self.n_stripped = n_chars, n_stripped

    def __len__(self) -> int:
        return self.n_chars

    def chunks(self) -> Iterator[str]:
        """The text again, chunk by chunk; a file that changed since the scan is a UserError."""
        decoder = text_decoder(self.errors)
        try:
            for data in byte_chunks(self.path):
                yield decoder.decode(data)
            if tail := decoder.decode(b"", final=True):
                yield tail
        except (Unreadable, UnicodeDecodeError) as e:
            raise UserError(
                f"{self.path} changed while it was ingested ({e}); run the command again"
            ) from None


def scan_long_text(path: Path, errors: str) -> tuple[LongText, int]:
    """A ``LongText`` for ``path`` decoded under ``errors``, and its undecodable byte count,
    found in one pass that holds one chunk at a time (UnicodeDecodeError under ``strict``)."""
    decoder = text_decoder(errors)
    escape = text_decoder("surrogateescape") if errors == "replace" else None

    def decoded() -> Iterator[tuple[bytes, str]]:
        for data in byte_chunks(path):
            yield data, decoder.decode(data)
        yield b"", decoder.decode(b"", final=True)  # a truncated sequence at the very end

    n = lead = trail = bad = size = 0
    seen = False  # a non-space character was found
    for data, text in decoded():
        if escape is not None:
            bad += len(_SURROGATES.findall(escape.decode(data, final=not data)))
        n += len(text)
        size += len(data)
        if not seen:
            rest = text.lstrip()
            lead += len(text) - len(rest)
            seen, text = bool(rest), rest
        if seen and (kept := text.rstrip()):
            trail = len(text) - len(kept)
        elif seen:
            trail += len(text)
    return LongText(path, errors, n, n - lead - trail, size), bad


_SURROGATES = re.compile("[\udc80-\udcff]")


def hf_splits(path: Path) -> list[str] | None:
    """The splits of a folder saved from a ``DatasetDict``, in saved order; None for a saved ``Dataset``."""
    if not (path / "dataset_dict.json").is_file():
        return None
    return list(json.loads((path / "dataset_dict.json").read_text()).get("splits", []))


def hf_split(path: Path, wanted: str | None) -> str | None:
    """The split to read from the dataset at ``path``: ``wanted``, else ``train``, else the only one
    (None for a saved ``Dataset``); a choice that cannot be made is a UserError naming the splits."""
    splits = hf_splits(path)
    if splits is None:
        if wanted is not None:
            raise UserError(
                f"--split {wanted} given, but {path} is a single saved Dataset, not a DatasetDict; "
                "leave --split out"
            )
        return None
    names = ", ".join(splits)
    if wanted is not None and wanted not in splits:
        raise UserError(f"{path} has no split {wanted!r} (splits: {names}); pass --split with one of them")
    if wanted is None and "train" not in splits and len(splits) != 1:
        raise UserError(f"{path} has no 'train' split (splits: {names}); pass --split NAME to choose one")
    return wanted or ("train" if "train" in splits else splits[0])


def _save_to_disk_state(state: Path) -> bool:
    """Whether ``state`` is the state.json ``save_to_disk`` writes (it lists the dataset's Arrow files)."""
    try:
        return state.is_file() and "_data_files" in json.loads(state.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False


def hf_arrow_files(path: Path, split: str | None = None) -> list[tuple[str, Path]]:
    """The Arrow files of a saved ``Dataset``, or of ``split`` of a saved ``DatasetDict``."""
    if split is not None:
        return [(f"{split}/{rel}", p) for rel, p in hf_arrow_files(path / split)]
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


def arrow_rows(files: list[tuple[str, Path]]) -> int:
    """The rows of some Arrow files, from their batch headers (memory-mapped: no column is read)."""
    return sum(b.num_rows for _, p in files for b in record_batches(p, True, [], lambda *_: None))


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
