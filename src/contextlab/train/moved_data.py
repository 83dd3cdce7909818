"""A run's data may move: what a run records of it, and how a resume finds it and accepts it.

Every checkpoint records, as ``data`` in its state, the directory training ran in (``cwd``) and
every path of the [data] section with what identifies its content: a token store's content hash,
a packed store's fingerprint (``record``; ``data.store`` always holds the training token store's
hash, also when a packed store names it). A resume then

* looks for a relative path that does not resolve from the current directory in the directory the
  run was trained in, and takes it from there when it holds the recorded content (``find_paths``);
  a path found nowhere is one line naming that directory and the ``--set`` that passes the store;
* accepts a [data] path that changed while its content did not (a store renamed or moved: the
  same content hash), or that names the same place from another directory, with a note
  (``accept_moved``). A path to other content is refused as any other change of the config is,
  the refusal naming both hashes.

Trade-off: content is told by what each store's meta.json records, not by reading the stores; a
store changed in place is caught by ``data.verify``, as always. Runs written before the record
have no hashes: only the same place is accepted for them.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
from pathlib import Path

from contextlab.data.store import TokenStore
from contextlab.data.store_meta import content_id
from contextlab.errors import UserError
from contextlab.rundir import data_record, is_run, read_config, trained_in
from contextlab.train.config import RunConfig


def data_paths(data) -> dict[str, str]:
    """Every path of a [data] section (a dataclass or the dict of a config.toml) by its key, empty
    ones included: ``data.store``, ``data.val_store``, ``data.packed``, ``data.mixture.N.packed``."""
    get = data.get if isinstance(data, dict) else lambda k, d=None: getattr(data, k, d)
    paths = {f"data.{k}": str(get(k, "") or "") for k in ("store", "val_store", "packed")}
    for i, m in enumerate(get("mixture", []) or []):
        paths[f"data.mixture.{i}.packed"] = str((m.get("packed") if isinstance(m, dict) else m.packed) or "")
    return paths


def record(data, store: TokenStore) -> dict:
    """What a checkpoint records of the data of ``data`` (a DataSection) trained on ``store``."""
    paths = {}
    for key, path in data_paths(data).items():
        if key == "data.store":
            paths[key] = {"path": path, "content": store.hash}
        elif path:
            paths[key] = {"path": path, "content": content_id(path)}
    return {"cwd": os.getcwd(), "paths": paths}


def find_paths(cfg: RunConfig, run_dir: Path) -> RunConfig:
    """``cfg`` with each relative [data] path of the run at ``run_dir`` that does not resolve from
    here replaced by the same path in the directory the run was trained in, when that holds the
    content the run recorded; such a path found nowhere is one ``UserError`` (see the module
    docstring). A ``run_dir`` that is no run yet changes nothing."""
    if not is_run(run_dir):
        return cfg
    recorded = (data_record(run_dir) or {}).get("paths") or {}
    named = data_paths(read_config(run_dir).get("data") or {})  # as the run's config.toml names them
    folder = trained_in(run_dir)
    found: dict[str, str] = {}
    for key, path in data_paths(cfg.data).items():
        if not path or Path(path).is_absolute() or Path(path).exists():
            continue
        want = (recorded.get(key) or {}).get("content")
        there = folder / path if folder is not None else None
        if there is not None and want and content_id(there) == want:
            found[key] = str(there)
        elif named.get(key) == path:  # another path given now: the store's own message says it is missing
            raise UserError(_not_found(key, path, run_dir, folder, there, bool(want)))
    return with_paths(cfg, found) if found else cfg


def _not_found(
    key: str, path: str, run_dir: Path, folder: Path | None, there: Path | None, known: bool
) -> str:
    """One line: a relative [data] path of a run that does not resolve here, where the run was
    trained, and how to pass the store."""
    where = (
        f"{folder}, where the run was trained" if folder else "the directory it was trained in (not recorded)"
    )
    held, given = "", "PATH"
    if there is not None and there.exists() and known:
        held = f"; {there} holds other content than the run trained on"
    elif there is not None and there.exists():  # a run without content hashes: the same place resumes
        held, given = f"; it is {there}", str(there)
    elif there is not None:
        held = f"; it is not at {there} either"
    fix = f"pass the store with --set {shlex.quote(f'{key}={given}')}"
    if key.startswith("data.mixture."):
        fix = "give its place in the config's data.mixture"
    here = f"{key} {path!r} is not found from {Path.cwd()}"
    return f"{here}: the run {run_dir} names it relative to {where}{held}; {fix}"


def with_paths(cfg: RunConfig, paths: dict[str, str]) -> RunConfig:
    """``cfg`` with the [data] paths of ``paths`` (keys as ``data_paths`` names them) replaced."""
    data = cfg.data
    mixture = list(data.mixture)
    changes = {}
    for key, value in paths.items():
        parts = key.split(".")
        if parts[1] == "mixture":
            mixture[int(parts[2])] = dataclasses.replace(mixture[int(parts[2])], packed=value)
        else:
            changes[parts[1]] = value
    return dataclasses.replace(cfg, data=dataclasses.replace(data, **changes, mixture=mixture))


def changed_in_place(was: dict | None, now: dict) -> list[str]:
    """A clause per [data] path the run names as before whose content is not what the checkpoint
    recorded (a packed store packed again with ``--overwrite``, a store ingested again at its path):
    resuming would go on with other data than the run's first steps."""
    old_ids, new_ids = (was or {}).get("paths") or {}, now.get("paths") or {}
    out = []
    for key, old in old_ids.items():
        new = new_ids.get(key) or {}
        same_place = old.get("path") == new.get("path") and old.get("content") and new.get("content")
        if same_place and old["content"] != new["content"]:
            out.append(
                f"{key} {new['path']!r} holds other content than when the run was trained "
                f"({old['content'][:12]} then, {new['content'][:12]} now: packed or ingested again, or the "
                "path names another store from this folder)"
            )
    return out


def accept_moved(
    recorded: dict, cfg: RunConfig, run_dir: Path, was: dict | None, now: dict
) -> tuple[dict, list[str], list[str]]:
    """(``recorded``, the config.toml of a run, with each [data] path that moved taken as it is in
    ``cfg``; a note for each; a clause for each changed path that holds other content, naming both
    hashes, for the refusal). A path moved when its content is the one the checkpoint's record
    ``was`` holds for it (``now``: ``record`` of this start), or, for runs without a record, when it
    names the same place as the recorded path taken from the directory the run was trained in."""
    before = data_paths(recorded.get("data") or {})
    old_ids = (was or {}).get("paths") or {}
    new_ids = now.get("paths") or {}
    folder = Path(was["cwd"]) if was and was.get("cwd") else trained_in(run_dir, recorded)
    moved: dict[str, str] = {}
    notes, other = [], []
    for key, path in data_paths(cfg.data).items():
        old = before.get(key)
        if old is None or old == path:
            continue
        old_id, new_id = (old_ids.get(key) or {}).get("content"), (new_ids.get(key) or {}).get("content")
        place = folder is not None and old and path and (folder / old).resolve() == Path(path).resolve()
        if old_id and new_id and old_id != new_id:
            other.append(f"{key} holds other content: {old_id[:12]} there, {new_id[:12]} now")
        elif (old_id and old_id == new_id) or place:
            moved[key] = path
            same = f"the same content, {new_id[:12]}" if old_id and old_id == new_id else "the same place"
            then = repr(old) if old else "not set"
            notes.append(
                f"note: {key} is {path!r} now and was {then} when {run_dir} was trained ({same}); resuming"
            )
    data = dict(recorded.get("data") or {})
    mixture = [dict(m) for m in data.get("mixture", [])]
    for key, path in moved.items():
        parts = key.split(".")
        if parts[1] == "mixture":
            mixture[int(parts[2])]["packed"] = path
        else:
            data[parts[1]] = path
    if mixture:
        data["mixture"] = mixture
    return ({**recorded, "data": data} if moved else recorded), notes, other
