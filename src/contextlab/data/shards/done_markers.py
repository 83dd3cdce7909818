"""Done markers: how a finished shard is recognised, so a rerun skips it and redoes a damaged one.

A shard writes its output first and its done record last, atomically::

    {"fingerprint": the job's (config and inputs), "stats": the shard's small stats record,
     which names the shard (its index, the slice of input it covers), "checksum": of its output}

Pack shards keep the record inside their ``.npz``, beside the arrays it covers; ingest parts keep
it in a JSON file beside their folder (``write_json_marker``). ``check_record`` accepts a record
only when all three agree with the shard asked for, and otherwise says what is wrong (another
run's, another shard's, an output that no longer matches its checksum). Trade-off: checking a
checksum reads the whole output again, once per resume; a caller that has just checked or written
a shard passes no checksum and reads only the record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from contextlab.io import atomic_write_json

_CHUNK = 1 << 20  # bytes hashed at a time


def arrays_checksum(arrays: dict) -> str:
    """sha256 over named arrays (name, dtype, shape and bytes of each, by name)."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.view(np.uint8).reshape(-1).data)
    return h.hexdigest()


def files_checksum(paths: Iterable[Path]) -> str:
    """sha256 over files (name and bytes of each, in the order given; a missing one is marked so)."""
    h = hashlib.sha256()
    for path in paths:
        h.update(f"{Path(path).name}:".encode())
        try:
            with open(path, "rb") as f:
                while block := f.read(_CHUNK):
                    h.update(block)
        except FileNotFoundError:
            h.update(b"<missing>")
        h.update(b"\x00")
    return h.hexdigest()


def done_record(fingerprint: str, stats: dict, checksum: str) -> dict:
    """The done record of a shard: the job's fingerprint, the shard's stats, its output's checksum."""
    return {"fingerprint": fingerprint, "stats": stats, "checksum": checksum}


def check_record(
    record,
    fingerprint: str,
    identity: dict,
    checksum: Callable[[], str] | None = None,
    output: str = "its files",
) -> tuple[dict | None, str | None]:
    """(the shard's stats, None) when ``record`` is the done record of the shard whose stats hold
    ``identity`` (e.g. ``{"shard": 3, "docs": [0, 120]}``) in the job of ``fingerprint``; else
    (None, what is wrong). ``checksum()``: the output's checksum now (None: not checked);
    ``output`` names the output in that reason ("its arrays")."""
    if not isinstance(record, dict) or record.get("fingerprint") != fingerprint:
        return None, "written by a run with another config or input"
    stats = record.get("stats")
    if not isinstance(stats, dict) or any(stats.get(k) != v for k, v in identity.items()):
        got = ", ".join(
            f"{k} {_said(k, stats.get(k) if isinstance(stats, dict) else None)}" for k in identity
        )
        return None, f"holds {got}, not this one"
    if checksum is not None and record.get("checksum") != checksum():
        return None, f"{output} do not match the checksum written with them"
    return stats, None


def _said(key: str, value):
    """A record's identity value in words: a shard's or part's index counted from 1 ("shard 2", the
    file ``shard_00001``), as the messages count them; anything else as it is."""
    return value + 1 if key in ("shard", "part") and isinstance(value, int) else value


def write_json_marker(path: Path, record: dict) -> None:
    """Write a done record as its own JSON file (atomically: it is whole or absent)."""
    atomic_write_json(path, record)


def read_json_marker(path: Path) -> tuple[dict | None, str | None]:
    """(the record in ``path``, None); (None, None) when there is none; (None, why) when unreadable."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8")), None
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as exc:
        return None, f"unreadable ({type(exc).__name__})"
