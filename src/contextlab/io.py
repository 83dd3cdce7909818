"""Atomic file writes: nothing a user made is overwritten half-way.

Every file contextlab writes goes to a temporary name in the same directory, is flushed
and fsynced, then renamed over the target. A crash leaves either the old file or the new
one, never a torn mix. The cost is one extra rename per file, which is nothing next to the
data written.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from contextlab.errors import UserError


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same directory, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600 files; give the usual permissions
        with os.fdopen(fd, "wb") as f:
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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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


def replace_dir(src: str | os.PathLike, dst: str | os.PathLike, *, overwrite: bool) -> None:
    """Move ``src`` to ``dst``; an existing ``dst`` is replaced only when ``overwrite``.

    The old directory is first renamed aside, so at every instant either the old or the new
    one is in place, then it is deleted.
    """
    src, dst = Path(src), Path(dst)
    if dst.exists():
        if not overwrite:
            raise UserError(f"{dst} already exists; choose another --out or pass --overwrite")
        aside = dst.with_name(dst.name + ".old")
        if aside.exists():
            shutil.rmtree(aside)
        os.replace(dst, aside)
        os.replace(src, dst)
        shutil.rmtree(aside)
    else:
        os.replace(src, dst)
    fsync_dir(dst.parent)
