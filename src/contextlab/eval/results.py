"""Result files: ``eval/<name>.json``, written atomically and describing themselves.

Every evaluation returns a plain dict of results; ``write_result`` wraps it with what is
needed to trust and reproduce it later: the resolved options, the model (path, kind,
shape, tokenizer hash, step), the data (path and content hash), the code version (package
version and git commit when available) and the wall-clock time. Reports read these files
and nothing else. Large arrays (per-token losses) go to ``.npy`` files beside the JSON and
are referenced by name, so the JSON stays small enough to read.

NaN and infinity are never written (they are not JSON, and strict parsers refuse the file):
such a value is written as null and its place is listed under ``non_finite`` with the reason.
Trade-off: a result with a null is still written, so the rest of it (and its plot) is kept;
a reader that needs the number sees at once why it is missing.

``check_rerun`` is what ``contextlab eval`` asks before it runs: a result file is replaced by a
run of the same settings (a reproduction) but not, unless told, by one of other options, another
model (path, step), precision or data, nor is a file that is not a result replaced at all.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import os
import shutil
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

import contextlab
from contextlab.errors import UserError
from contextlab.io import atomic_write_bytes, atomic_write_text, fresh_dir, fsync_dir
from contextlab.outputs import file_digest, is_png
from contextlab.rundir import trained_on

RESULT_FORMAT = "contextlab-eval-result"
NON_FINITE_NOTE = (
    "these fields were NaN or infinite and are written as null (JSON has no NaN): the model gave "
    "non-finite numbers there, e.g. from non-finite weights or an overflow in low precision"
)


def code_version() -> dict:
    """Package version, the git commit of the source tree and whether its tracked files differ from
    that commit (``git_dirty``; both None outside a checkout): a result of uncommitted code says so."""
    commit = dirty = None
    root = Path(contextlab.__file__).resolve().parents[2]
    try:
        commit = _git(root, "rev-parse", "HEAD") or None
        if commit:
            dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "contextlab_version": contextlab.__version__,
        "format_version": contextlab.FORMAT_VERSION,
        "git_commit": commit,
        "git_dirty": dirty,
        "code_digest": code_digest(),
    }


@functools.cache
def code_digest() -> str:
    """The first 16 hex digits of a sha256 over the package's Python sources (relative path and bytes,
    in path order): results of one commit with uncommitted changes differ here when their code did
    (a resumed profile kept a result of code edited since, and both read "commit X, dirty")."""
    root = Path(contextlab.__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise subprocess.SubprocessError(done.stderr.strip())
    return done.stdout.strip()


def file_hash(*paths: str | Path) -> str:
    """sha256 over the bytes of the given files (for data that is not a token store)."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
    return h.hexdigest()


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def jsonable(obj: Any, where: str = "", bad: list[str] | None = None) -> Any:
    """``obj`` as plain JSON values; a NaN or infinity becomes null and its place is added to ``bad``."""
    bad = [] if bad is None else bad
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): jsonable(v, f"{where}.{k}" if where else str(k), bad) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v, f"{where}[{i}]", bad) for i, v in enumerate(obj)]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist(), where, bad)
    if isinstance(obj, np.generic):
        return jsonable(obj.item(), where, bad)
    if isinstance(obj, float) and not np.isfinite(obj):
        bad.append(where)
        return None  # JSON has no NaN/inf
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _arrays_named(path: Path) -> set[str]:
    """The array files the result at ``path`` names (empty when there is none or it cannot be read):
    only those are removed when a new result replaces it, never a file of the user's."""
    try:
        arrays = json.loads(path.read_text(encoding="utf-8")).get("arrays") or {}
    except (OSError, ValueError, AttributeError):
        return set()
    name = path.stem
    return {f for f in arrays.values() if isinstance(f, str) and f.startswith(f"{name}.") and "/" not in f}


def _record(out: Path, name: str) -> Path:
    """OUT/.NAME.written: each file a result NAME's writes put in OUT (its arrays, its plot) with the
    first digits of its sha256. A file listed there whose bytes are still those is contextlab's even
    when NAME.json is gone (deleted by a user, or a write killed while it moved its files in), so
    a rerun may replace it; a file of the same name that is not listed, or changed since, is not."""
    return out / f".{name}.written"


def _written(out: Path, name: str) -> dict[str, str]:
    try:
        files = json.loads(_record(out, name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(files, dict):
        return {}
    return {f: d for f, d in files.items() if isinstance(f, str) and isinstance(d, str) and "/" not in f}


def _owned(out: Path, name: str) -> set[str]:
    """The files of OUT a result NAME there names, or a write of one recorded and that are unchanged."""
    kept = {f for f, d in _written(out, name).items() if file_digest(out / f) == d}
    return _arrays_named(out / f"{name}.json") | kept


def note_written(out_dir: str | Path, name: str, *paths: Path) -> None:
    """Add files a result NAME's command wrote in OUT (its plot) to OUT/.NAME.written."""
    out = Path(out_dir)
    files = {
        **_written(out, name),
        **{Path(p).name: file_digest(Path(p)) for p in paths if Path(p).is_file()},
    }
    atomic_write_text(_record(out, name), json.dumps(files, sort_keys=True) + "\n")


def foreign_files(out_dir: str | Path, name: str, writing: set[str] | None = None) -> list[str]:
    """The files in OUT a result NAME would write (NAME.png, NAME.KEY.npy) that are no result's: no
    OUT/NAME.json result names them and no write of one recorded them unchanged (``_owned``). A user's
    ``contextwise.png`` or ``contextwise.pieces.npy`` was replaced by an evaluation into its folder.
    ``writing``: the array files a write is about to put there (only those are looked at, and the plot);
    without it (before an evaluation runs, when its arrays are not known yet) every NAME.*.npy when no
    result is there, and the plot."""
    out = Path(out_dir)
    if not out.is_dir():
        return []
    result = out / f"{name}.json"
    owned = _owned(out, name)
    is_result = _is_result(result)
    found = []
    for p in sorted(out.glob(f"{name}.*")):
        if p.name == result.name or p.name in owned:
            continue
        if p.name == f"{name}.png":
            if not (is_result and is_png(p)):
                found.append(p.name)
        elif p.name.endswith(".npy") and (p.name in writing if writing is not None else not is_result):
            found.append(p.name)
    return found


def refuse_foreign_files(out_dir: str | Path, name: str, writing: set[str] | None = None) -> None:
    """One line when ``foreign_files`` finds any: they are left as they are."""
    found = foreign_files(out_dir, name, writing)
    if found:
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise UserError(
            f"{out_dir} holds {shown}, which a {name} result would write and no result there names (a file "
            "of yours?); move them or give another --out (they are left as they are; nothing was written)"
        )


def _is_result(path: Path) -> bool:
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("format") == RESULT_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def write_result(
    out_dir: str | Path,
    name: str,
    *,
    results: dict,
    options: Any,
    model: Any,
    data: dict,
    seconds: float,
    arrays: dict[str, np.ndarray] | None = None,
) -> Path:
    """Write OUT/<name>.json (+ OUT/<name>.<key>.npy for each array); return the JSON path.

    The files are written whole into a hidden staging folder first; only then is the old
    ``<name>.json`` removed (with the arrays it named that the new result has not), the arrays moved
    in, and the JSON moved in last. A failure while
    writing (a full disk) leaves the old result as it was; a kill while moving leaves the new
    arrays without a JSON (no result, never a JSON beside another run's arrays)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    refuse_foreign_files(out, name, {f"{name}.{key}.npy" for key in arrays or {}})  # what it writes
    stage = fresh_dir(out / name, "staging")
    try:
        files = {}
        for key, arr in (arrays or {}).items():
            buf = io.BytesIO()
            np.save(buf, np.asarray(arr))
            fname = f"{name}.{key}.npy"
            atomic_write_bytes(stage / fname, buf.getvalue())
            files[key] = fname
        bad: list[str] = []
        doc = {
            "format": RESULT_FORMAT,
            "eval": name,
            **code_version(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "seconds": round(seconds, 3),
            "cwd": os.getcwd(),  # what relative paths below are relative to (a reproduce line resolves them)
            "model": jsonable(model, "model", bad),
            "data": jsonable(data, "data", bad),
            "options": jsonable(options, "options", bad),
            "results": jsonable(results, "results", bad),
            "arrays": files,
        }
        if bad:
            doc["non_finite"] = {"fields": bad, "note": NON_FINITE_NOTE}
        path = out / f"{name}.json"
        atomic_write_text(stage / path.name, json.dumps(doc, indent=2, allow_nan=False) + "\n")
        old_arrays = _owned(out, name) - {f"{name}.png"}  # and an interrupted write's files
        plot = {f: d for f, d in _written(out, name).items() if f == f"{name}.png"}
        moving = {f: file_digest(out / f) for f in old_arrays} | {
            f: file_digest(stage / f) for f in files.values()
        }
        moving |= plot
        atomic_write_text(_record(out, name), json.dumps(moving, sort_keys=True) + "\n")  # before any moves
        path.unlink(missing_ok=True)  # the old result stops being one before any of its files changes
        for fname in old_arrays - set(files.values()):  # its arrays the new result has not: gone with it
            (out / fname).unlink(missing_ok=True)
        for fname in files.values():
            os.replace(stage / fname, out / fname)
        os.replace(stage / path.name, path)  # last: its presence says every array it names is in place
        kept = {
            f: file_digest(out / f) for f in files.values()
        } | plot  # the plot is redrawn, or stays the old
        atomic_write_text(_record(out, name), json.dumps(kept, sort_keys=True) + "\n")
        fsync_dir(out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return path


def model_record(adapter) -> dict:
    """What a result records about the model an adapter runs: its info, compute dtype and batch size, and
    the attention window of a model whose layers see only the last W tokens (``attention_window``)."""
    record = {k: v for k, v in vars(adapter.info).items() if k != "assumed_context" or v}  # said when so
    record.update(dtype=adapter.dtype, batch_size=adapter.batch_size)
    saved = getattr(adapter, "saved_dtype", None)
    if saved is not None and str(saved) != "torch.float32":  # a half-precision checkpoint, upcast or not
        record["weights_saved_as"] = str(saved).removeprefix("torch.")
    record.update(attention_window(adapter) or {})
    return record


def attention_window(adapter) -> dict | None:
    """``{"sliding_window": W, "sliding_layers": n}`` for a Hugging Face model whose n layers attend at
    most W tokens back (Mistral's sliding window, Gemma 2's alternate layers), else None (Qwen2
    declares a window it does not use: None)."""
    config = getattr(getattr(adapter, "model", None), "config", None)
    window = getattr(config, "sliding_window", None)
    if adapter.info.kind != "hf" or not isinstance(window, int) or isinstance(window, bool) or window < 1:
        return None
    if getattr(config, "use_sliding_window", None) is False:
        return None
    kinds = list(getattr(config, "layer_types", None) or [])
    sliding = sum(k == "sliding_attention" for k in kinds) if kinds else int(config.num_hidden_layers)
    return {"sliding_window": window, "sliding_layers": sliding} if sliding else None


def run_and_record(out_dir: str | Path, name: str, run, *, options: Any, model: Any):
    """``run()`` (an evaluation or analysis returning an ``EvalOutput``), timed, and its result written
    to OUT/<name>.json by ``write_result``; returns (json path, output, seconds)."""
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:  # passed on as they came; the context ones kept
        warnings.simplefilter("always")
        out = run()
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    past = [str(w.message) for w in caught if w.category.__name__ == "ContextLengthWarning"]
    if past and isinstance(out.results, dict):  # the result says it too (the report showed no word of it)
        said = out.results.setdefault("text", [])
        said += [f"warning: {m}" for m in dict.fromkeys(past) if f"warning: {m}" not in said]
    seconds = time.perf_counter() - t0
    read = out.data if isinstance(out.data, dict) else {}
    store = read.get("store")
    if isinstance(store, str) and store and not Path(store).is_absolute() and Path(store).exists():
        read["store"] = str(Path(store).resolve())  # one form in every result: a relative one read from cwd
    if read.get("split") != "run" and trained_on(str(model.get("path") or ""), read.get("hash")):
        out.data["training_store"] = True  # read on documents the model trained on (see open_store)
    path = write_result(
        out_dir,
        name,
        results=out.results,
        options=options,
        model=model,
        data=out.data,
        seconds=seconds,
        arrays=out.arrays,
    )
    return path, out, seconds


DATA_KEYS = ("store", "folder", "haystack", "file", "path")  # where evaluations record the data they read


def check_rerun(
    path: str | Path, *, options: Any, model: dict, data: str | None, overwrite: bool, name: str = ""
) -> None:
    """Refuse to replace the result file ``path`` with one of other settings, unless ``overwrite``.

    Compared: the model's path and step (when ``model`` has a path: once it is opened), its ``dtype``,
    the data (its path, and a token store's content hash, where the old result recorded them and
    ``data`` is given) and every option. A file there that is not a result is refused either way."""
    from contextlab.outputs import earlier_result

    doc = earlier_result(path, RESULT_FORMAT, "a contextlab evaluation result")
    refuse_foreign_files(Path(path).parent, Path(path).stem)  # with --overwrite too: they are no result's
    if doc is None or overwrite:
        return
    change = differences(doc, options=options, model=model, data=data)
    if change is not None:
        kind = str(name or doc.get("eval", "evaluation"))
        what = f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind} result"
        raise UserError(
            f"{path} holds {what} of other settings ({change}); pass --overwrite to replace it, or give "
            "another --out to keep both (nothing was run)"
        )


def differences(doc: dict, *, options: Any, model: dict, data: str | None) -> str | None:
    """``"--samples 4 -> 1; --depths [50.0] -> [25.0]"``: every setting a run with these would change
    in the result ``doc`` (None: none)."""
    old_model = doc.get("model") if isinstance(doc.get("model"), dict) else {}
    pairs: list[tuple[str, Any, Any]] = []
    if "path" in model:
        pairs += [
            ("--model", old_model.get("path"), model["path"]),
            ("--step", old_model.get("step"), model.get("step")),
        ]
    if "dtype" in model:
        pairs.append(("--dtype", old_model.get("dtype"), model["dtype"]))
    old_data = doc.get("data") if isinstance(doc.get("data"), dict) else {}
    where = next((k for k in DATA_KEYS if k in old_data), None)
    if where is None and "synthetic" in old_data:  # data an evaluation made itself (kv without --data)
        pairs.append(("--data", None, data))
    elif where == "file" and data is None:  # a key-value file before, pairs kv makes itself now
        pairs.append(("--data", old_data[where], None))
    if where is not None and data is not None:
        pairs.append(("--data", old_data[where], data))
        if where == "store" and "hash" in old_data and str(old_data[where]) == str(data):
            pairs.append(("--data content (hash)", old_data["hash"], _store_hash(data, old_data["hash"])))
        elif (
            where == "file"
            and "hash" in old_data
            and str(old_data[where]) == str(data)
            and Path(data).is_file()
        ):
            pairs.append(
                ("--data content (hash)", old_data["hash"], file_hash(data))
            )  # a file replaced in place
        elif "hashed_files" in old_data and "hash" in old_data and str(old_data[where]) == str(data):
            pairs.append(("--data content (hash)", old_data["hash"], _files_hash(old_data["hashed_files"])))
    new_options = jsonable(options)
    old_options = doc.get("options") if isinstance(doc.get("options"), dict) else {}
    for key in list(new_options) + [k for k in old_options if k not in new_options]:
        pairs.append(("--" + key.replace("_", "-"), old_options.get(key), new_options.get(key)))
    changed = [f"{label} {_shown(old)} -> {_shown(new)}" for label, old, new in pairs if old != new]
    return "; ".join(changed) or None


def _files_hash(files: list[str]) -> str:
    """The hash of the files a folder's result read (``hashed_files``: icl's train.txt and test.txt),
    as they are now; "(a file missing)" when one is gone."""
    try:
        return file_hash(*files)
    except OSError:
        return "(a file missing)"


def _store_hash(store: str, old: str) -> str:
    """The content hash a token store records (``old`` when it cannot be read: the evaluation says why)."""
    from contextlab.data.store import TokenStore

    try:
        return TokenStore(store).hash
    except (UserError, OSError, ValueError, KeyError):
        return old


def _shown(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)
