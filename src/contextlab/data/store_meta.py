"""The reader of a store's ``meta.json``, for token stores and packed stores alike.

Both kinds of store describe themselves in ``meta.json`` (a format name, a version, the keys
their reader needs). ``read_meta`` opens it and ends every way it can be wrong with one line
that names the store and the fix: the folder is missing, has no meta.json, holds invalid JSON,
is another kind of folder, was written by a newer contextlab, or lacks a key. ``has_format`` is
the quiet test (is this folder such a store?). What differs between the two kinds (their
names, the command that makes one, the keys) is a ``MetaKind`` record each store module
declares. Trade-off: only meta.json is checked here; each store checks its own data files
against it when it opens them.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from contextlab import FORMAT_VERSION
from contextlab.errors import UserError
from contextlab.io import partial_dir


@dataclass(frozen=True)
class MetaKind:
    """What a kind of store's meta.json must say, and how its messages name it."""

    format: str  # meta.json's "format"
    what: str  # the store in messages: "store", "packed store"
    title: str  # what it is not, when meta.json is not one: "contextlab token store"
    make: str  # the command that makes one: "contextlab data ingest"
    make_input: str  # that command's input, as its usage names it: "SOURCE"
    fix: str  # the fix of a corrupt one: "re-create it with ..."
    keys: tuple[str, ...]  # the keys its reader needs


def has_format(path: str | os.PathLike, fmt: str) -> bool:
    """Whether ``path`` holds a meta.json of format ``fmt`` (no message: a yes/no test)."""
    return meta_format(path) == fmt


def meta_format(path: str | os.PathLike) -> str | None:
    """The "format" of ``path``'s meta.json (None: none there, or not readable as one)."""
    meta = Path(path) / "meta.json"
    try:
        fmt = json.loads(meta.read_text()).get("format") if meta.is_file() else None
    except (OSError, ValueError, AttributeError):
        return None
    return fmt if isinstance(fmt, str) else None


WHAT_IT_IS = {  # a store of the other kind given where one kind is read: what it is and what reads it
    "contextlab-token-store": "a token store: `contextlab data info` describes it and `contextlab data pack` "
    "packs it",
    "contextlab-packed-store": "a packed store: `contextlab data pack-stats` describes it, and its token "
    "store ({store}) is what `data info` and the evaluations read",
}


def what_it_is(path: str | os.PathLike) -> str | None:
    """What the store at ``path`` is and what reads it (``WHAT_IT_IS``), naming a packed store's token
    store by the path it recorded; None when ``path`` holds no store."""
    fmt = meta_format(path)
    if fmt not in WHAT_IT_IS:
        return None
    if fmt != "contextlab-packed-store":
        return WHAT_IT_IS[fmt]
    return WHAT_IT_IS[fmt].format(store=packed_from(path) or "the store it was packed from")


def packed_from(path: str | os.PathLike) -> str | None:
    """The token store a packed store at ``path`` recorded it was packed from (its meta.json's
    store.path), or None when it recorded none."""
    try:
        rec = json.loads((Path(path) / "meta.json").read_text(encoding="utf-8")).get("store")
    except (OSError, ValueError, AttributeError):
        return None
    return str(rec["path"]) if isinstance(rec, dict) and rec.get("path") else None


CONTENT_KEYS = {  # what identifies a store's content, by its meta.json format
    "contextlab-token-store": "content_hash",
    "contextlab-packed-store": "fingerprint",  # the settings and the token store's content hash
}


def content_id(path: str | os.PathLike) -> str | None:
    """What identifies the content of the store at ``path`` (a token store's content hash, a packed
    store's fingerprint), from its meta.json alone; None when it is no store or cannot be read."""
    try:
        meta = json.loads((Path(path) / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    key = CONTENT_KEYS.get(meta.get("format")) if isinstance(meta, dict) else None
    return str(meta[key]) if key and meta.get(key) else None


def read_meta(path: Path, kind: MetaKind) -> dict:
    """``path``'s meta.json, checked to be of ``kind``; one line naming the problem otherwise."""
    partial = partial_dir(path) if path.name else None  # "." has no name, hence no OUT.partial
    if partial is not None and partial.is_dir() and not (path / "meta.json").is_file():
        raise UserError(
            f"{kind.what} {path} is unfinished: the `{kind.make}` command writing it was stopped "
            f"({partial.name} holds its work); run the same command again to finish it"
        )
    if path.name.endswith(".partial") and path.is_dir() and not (path / "meta.json").is_file():
        raise UserError(
            f"{path} holds the unfinished work of a `{kind.make}` command writing "
            f"{path.with_name(path.name[: -len('.partial')])}; run that command again to finish it, then "
            "read the finished folder"
        )
    if not path.exists():
        raise UserError(
            f"{kind.what} not found: {path} (create one with "
            f"`{kind.make} {kind.make_input} --out {shlex.quote(str(path))}`)"
        )
    meta_file = path / "meta.json"
    if not meta_file.is_file():
        if (path / "checkpoints").is_dir() or (path / "metrics.jsonl").is_file():
            raise UserError(
                f"{path} is a training run, not a {kind.title}; the store it trained on is data.store in "
                f"{path / 'config.toml'}"
            )
        raise UserError(f"{path} is not a {kind.title} (no meta.json); create one with `{kind.make}`")
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(
            f"{kind.what} {path} is corrupt: meta.json is not valid JSON ({exc}); {kind.fix}"
        ) from None
    if not isinstance(meta, dict) or meta.get("format") != kind.format:
        got = meta.get("format") if isinstance(meta, dict) else None
        hint = what_it_is(path) or ""
        raise UserError(
            f"{path} is not a {kind.title} (meta.json format is {got!r})"
            + (f"; it is {hint}" if hint else "")
        )
    if int(meta.get("version", -1)) > FORMAT_VERSION:
        raise UserError(
            f"{kind.what} {path} has format version {meta['version']}, newer than this contextlab "
            f"({FORMAT_VERSION}); upgrade contextlab"
        )
    for key in kind.keys:
        if key not in meta:
            raise UserError(f"{kind.what} {path} is corrupt: meta.json lacks '{key}'; {kind.fix}")
    return meta
