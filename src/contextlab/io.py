"""Atomic file and folder writes: nothing a user made is overwritten half-way.

Every file contextlab writes goes to a temporary name in the same directory, is flushed
and fsynced, then renamed over the target. A crash leaves either the old file or the new
one, never a torn mix. The cost is one extra rename per file, which is nothing next to the
data written. Folders are built the same way: ``staged_folder`` hands out a fresh sibling
folder and swaps it in whole when the block ends (``outputs.staged_dir`` decides first whether
the folder there may be replaced); ``open_partial`` keeps the resumable
``OUT.partial`` folder of a long job (ingest, pack) that survives a kill.

The temporary file is created with ``os.open(..., O_CREAT | O_EXCL, 0o666)``, so the kernel
applies the process umask exactly as it does for a plain ``open()``; the umask is never read
or changed (changing it is process-wide, and another thread could create a file meanwhile).
A file a library wrote with a mode of its own (safetensors makes its weights 0o600) is given
that same mode afterwards by ``follow_umask``, found the same way.

Names made beside an output (``.OUT.lock``, ``.OUT.<hex>.tmp``, ``OUT.partial``) must fit the
255-byte limit on a file name even when ``OUT``'s own name is legal but long: ``sibling``
then shortens ``OUT`` to its first bytes plus a hash of the whole name, the same on every call,
so the next writer of ``OUT`` still finds the lock, the partial folder and a killed writer's
leftovers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from contextlab.errors import UserError

_TEMP_FLAGS = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


NAME_MAX = 255  # bytes in one file name (Linux, macOS, Windows); a fixed number, so every call agrees


def fitted_name(name: str, extra: int) -> str:
    """``name`` when ``extra`` more bytes still fit in ``NAME_MAX``; else its first characters, "~" and 16
    hex digits of the whole name's sha256, short enough that they do (the same for the same name)."""
    if len(os.fsencode(name)) + extra <= NAME_MAX:
        return name
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:16]
    head = name
    while len(os.fsencode(head)) + 1 + len(digest) + extra > NAME_MAX:
        head = head[:-1]  # whole characters, never half of a multi-byte one
    return f"{head}~{digest}"


def sibling(path: str | os.PathLike, prefix: str, suffix: str) -> Path:
    """``path``'s sibling ``PREFIX + NAME + SUFFIX``, NAME shortened by ``fitted_name`` where it must."""
    path = Path(path)
    extra = len(os.fsencode(prefix)) + len(os.fsencode(suffix))
    return path.with_name(prefix + fitted_name(path.name, extra) + suffix)


def _temp_name(target: Path) -> Path:
    return sibling(target, ".", f".{secrets.token_hex(4)}.tmp")


def _create_temp_file(target: Path) -> tuple[int, Path]:
    """A new, empty file beside ``target`` (mode 0o666 less the umask, as ``open()`` gives)."""
    for _ in range(100):
        tmp = _temp_name(target)
        try:
            return os.open(tmp, _TEMP_FLAGS, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same directory, then rename)."""
    atomic_write_chunks(path, [data])


def atomic_write_chunks(path: str | os.PathLike, chunks: Iterable[bytes]) -> None:
    """``atomic_write_bytes`` of the concatenated ``chunks``, never holding more than one of them."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp_file(path)
    try:
        with os.fdopen(fd, "wb") as f:
            for data in chunks:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def plain_file_mode(folder: str | os.PathLike) -> int:
    """The mode a plain ``open()`` gives a new file in ``folder`` (0o666 less the umask, or what the
    folder's default ACL says), found by making one: the umask is never read or changed."""
    fd, tmp = _create_temp_file(Path(folder) / "mode")
    try:
        return stat.S_IMODE(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
        os.unlink(tmp)


def follow_umask(files: Iterable[str | os.PathLike]) -> None:
    """Give ``files`` (just written by a library with a mode of its own: safetensors writes 0o600, which
    other users cannot read) the mode a plain ``open()`` would have given them."""
    modes: dict[Path, int] = {}
    for f in map(Path, files):
        if f.parent not in modes:
            modes[f.parent] = plain_file_mode(f.parent)
        os.chmod(f, modes[f.parent])


def atomic_write_npy(path: str | os.PathLike, dtype, shape: tuple[int, ...], blocks: Iterable) -> None:
    """Write atomically the bytes ``np.save`` writes for a C-order array of ``dtype`` and ``shape``
    whose data is ``blocks`` (arrays, or raw bytes) one after another: one block in memory at a
    time. Raises ValueError when the blocks do not add up to the shape."""
    import io

    import numpy as np

    dtype = np.dtype(dtype)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    )
    want, seen = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, [0]

    def chunks() -> Iterator[bytes]:
        yield header.getvalue()
        for block in blocks:
            data = (
                block
                if isinstance(block, bytes)
                else np.ascontiguousarray(block, dtype).reshape(-1).view(np.uint8)
            )
            seen[0] += len(data)  # bytes either way
            yield data
        if seen[0] != want:
            raise ValueError(f"{path}: the blocks hold {seen[0]} bytes, the shape {shape} needs {want}")

    atomic_write_chunks(path, chunks())


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename inside ``path`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def swap_in_dir(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Move the folder ``src`` to ``dst``, replacing a folder there whole. Only the mechanics: whether
    the folder at ``dst`` may be replaced is ``outputs.replace_dir``'s to judge, before it calls this;
    a ``dst`` that is a file or a link is refused here too, so no caller can delete one.

    The old folder is first moved into a fresh hidden folder beside it (made here, so its name
    cannot be anything the user made: ``.DST.<hex>.replaced``), the new one is renamed in, then
    the hidden folder is deleted; at every instant either the old or the new folder is at ``dst``.
    Nothing else is touched: a sibling such as ``DST.old`` is the user's.
    """
    src, dst = Path(src), Path(dst)
    if dst.is_symlink() or (dst.exists() and not dst.is_dir()):
        kind = "a link" if dst.is_symlink() else "a file"
        raise UserError(f"{dst} is {kind}, not a folder; move it away first (it is left as it is)")
    if not dst.exists():
        os.replace(src, dst)
        fsync_dir(dst.parent)
        return
    holder = fresh_dir(dst, "replaced")
    os.rename(dst, holder / dst.name)
    try:
        os.replace(src, dst)
    except BaseException:
        os.rename(holder / dst.name, dst)  # the old folder goes back where it was
        holder.rmdir()
        raise
    fsync_dir(dst.parent)
    shutil.rmtree(holder)


def remove_stale_staging(out: str | os.PathLike) -> list[Path]:
    """Delete the hidden folders a killed writer of ``out`` left beside it (``staged_folder``'s
    ``.OUT.<hex>.tmp``, ``swap_in_dir``'s ``.OUT.<hex>.replaced``); return them. Call it only while
    holding ``out``'s one-writer lock: then no other writer can be using them."""
    out = Path(out)
    try:
        names = os.listdir(out.parent)  # not a glob: the name may hold glob characters ([, *, ?)
    except FileNotFoundError:
        return []
    stale = [
        out.parent / name
        for tag in ("tmp", "replaced")
        for name in names
        if _is_ours(name, out, tag) and (out.parent / name).is_dir() and not (out.parent / name).is_symlink()
    ]
    for p in stale:
        shutil.rmtree(p, ignore_errors=True)
    return stale


def _is_ours(name: str, out: Path, tag: str) -> bool:
    """Whether ``name`` is exactly ``.OUT.<8 hex digits>.TAG`` (what ``fresh_dir(out, tag)`` makes, OUT
    shortened as it shortens it)."""
    head, tail = f".{_fresh_stem(out, tag)}.", f".{tag}"
    token = name[len(head) : len(name) - len(tail)]
    return (
        name.startswith(head)
        and name.endswith(tail)
        and len(token) == 8
        and all(c in "0123456789abcdef" for c in token)
    )


def _fresh_stem(beside: Path, tag: str) -> str:
    return fitted_name(beside.name, len(f"..{'0' * 8}.{tag}".encode()))


def fresh_dir(beside: Path, tag: str) -> Path:
    """A new empty hidden folder ``.NAME.<hex>.TAG`` beside ``beside``, made by this call (NAME shortened
    by ``fitted_name`` when the whole would not fit)."""
    for _ in range(100):
        path = beside.with_name(f".{_fresh_stem(beside, tag)}.{secrets.token_hex(4)}.{tag}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {beside}")


@contextlib.contextmanager
def staged_folder(out: str | os.PathLike) -> Iterator[Path]:
    """A new empty folder beside ``out`` to write into, swapped in whole for ``out`` when the block ends
    (``swap_in_dir``); if the block raises, it is deleted and ``out`` is left as it was. The folder gets
    the mode ``mkdir`` gives. Only the mechanics: ``outputs.staged_dir`` first judges whether ``out``
    may be replaced."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = fresh_dir(out, "tmp")
    try:
        yield tmp
        swap_in_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def partial_dir(out: str | os.PathLike) -> Path:
    """Where a resumable job writing ``out`` keeps its unfinished work: ``OUT.partial`` (a long
    ``OUT`` shortened by ``fitted_name``)."""
    return sibling(out, "", ".partial")


def open_partial(
    out: str | os.PathLike,
    fresh: dict,
    *,
    overwrite: bool,
    has_work: Callable[[Path, dict | None], bool],
    what: str | Callable[[dict | None], str],
) -> tuple[Path, dict]:
    """Open ``OUT.partial`` for a resumable job: (its path, its progress record).

    ``progress.json`` in the folder holds the job's record. A record with the fingerprint
    of ``fresh`` is resumed as it is. Any other folder is deleted and started afresh with
    ``fresh`` as its record, except that one where ``has_work(folder, old_record)`` is true
    is refused unless ``overwrite`` (``what`` describes it: "ingest of a different source", or a
    function of the old record that says how it differs).
    """
    partial = partial_dir(out)
    record_file = partial / "progress.json"
    if partial.exists():
        try:
            record = json.loads(record_file.read_text())
        except (OSError, ValueError):
            record = None
        if isinstance(record, dict) and record.get("fingerprint") == fresh["fingerprint"]:
            return partial, record
        old = record if isinstance(record, dict) else None
        if has_work(partial, old) and not overwrite:
            said = what(old) if callable(what) else what
            raise UserError(f"{partial} holds an unfinished {said}; delete it or pass --overwrite")
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    atomic_write_json(record_file, fresh)
    return partial, fresh


@contextlib.contextmanager
def exclusive_lock(lock_file: str | os.PathLike, what: str) -> Iterator[None]:
    """Hold ``lock_file`` exclusively for the block, or refuse at once with the holder's name.

    The lock is ``fcntl.flock`` on the file (released by the kernel when the process dies, so a
    killed writer never leaves a held lock); the file records the holder's pid, host and command
    line for the message the second writer gets. ``what`` names the thing being written ("run
    directory runs/x"). The holder deletes the file as it leaves, so no lock files pile up beside
    a user's outputs. That is safe because a writer that got the lock checks that the file it
    locked is still the one at ``lock_file`` (the holder before it may have deleted it between
    this writer's open and its lock); if not, it opens the new one and tries again. A killed
    writer's file stays until the next writer of the same output takes and removes it.
    """
    import fcntl
    import socket
    import sys

    lock_file = Path(lock_file)
    made = [d for d in (lock_file.parent, *lock_file.parent.parents) if not d.exists()]  # deepest first
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileNotFoundError:  # another writer's exit removed the empty folder it had made for its lock
            lock_file.parent.mkdir(parents=True, exist_ok=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise UserError(
                f"{what} is being written by {holder}; wait for it to finish or stop it "
                f"(lock file {lock_file})"
            ) from None
        try:
            current = os.stat(lock_file).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            break
        os.close(fd)  # the holder before deleted the file we locked: lock the one there now
    try:
        me = f"pid {os.getpid()} on {socket.gethostname()} ({' '.join(sys.argv)[:200]})"
        os.ftruncate(fd, 0)
        os.pwrite(fd, me.encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock_file)  # still holding it: a writer that opened it meanwhile sees it is gone
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        for d in made:  # the folders made for the lock alone: a refused command left an empty OUT's parent
            with contextlib.suppress(OSError):  # one holding anything (the output written) stays
                d.rmdir()


def live_holder(lock_file: str | os.PathLike) -> str | None:
    """Who holds ``lock_file`` (an ``exclusive_lock`` file), read without locking it (taking the lock even
    for a moment could refuse a writer starting then): the holder's record when the file names a process
    alive on this host, else None (no file: nobody; a dead pid: a killed writer's leftover)."""
    import socket

    try:
        text = Path(lock_file).read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    m = re.match(r"pid (\d+) on (\S+)", text)
    if not m or m.group(2) != socket.gethostname():
        return None
    try:
        os.kill(int(m.group(1)), 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, another user's
        pass
    return text


TIMINGS = ("created", "seconds", "index_seconds")  # meta.json fields that differ between equal runs


def _without(value, keys: tuple[str, ...]):
    if isinstance(value, dict):
        return {k: _without(v, keys) for k, v in value.items() if k not in keys}
    return [_without(v, keys) for v in value] if isinstance(value, list) else value


CACHE_FILES = (".verified.json",)  # what a reader leaves in a store it checked (TokenStore.check_content)


def tree_digest(folder: str | os.PathLike, volatile: tuple[str, ...] = TIMINGS) -> dict[str, str]:
    """sha256 of every file under ``folder`` by relative path; a ``meta.json`` is hashed without its
    ``volatile`` keys (timings, creation time), and readers' caches (``CACHE_FILES``) are left out,
    so two runs that made the same output compare equal."""
    import hashlib

    folder = Path(folder)
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in CACHE_FILES):
        data = path.read_bytes()
        if path.name == "meta.json":
            data = json.dumps(_without(json.loads(data), volatile), sort_keys=True).encode()
        out[str(path.relative_to(folder))] = hashlib.sha256(data).hexdigest()
    return out
