"""The run directory: the one place that knows its layout.

A run directory, written by the trainer and read by everything after it, holds

    config.toml                  the fully resolved run config
    metrics.jsonl                one JSON line per logged step
    .lock                        held (flock) by the one ``train`` writing the run
    tokenizer/                   a copy of the training store's tokenizer folder
    checkpoints/step_NNNNNN/     model.safetensors, state.json, config.toml, ...
    eval/<name>.json             evaluation results (+ <name>.png, <name>.<key>.npy)

This module names those files, lists and resolves checkpoints, reads metrics, configs and
evaluation results, tells a run, a checkpoint and a Hugging Face folder apart, finds
the tokenizer of a run, and reads what a checkpoint's state records of the run's data (the
directory training ran in, the content hash of every store: ``data_record``, ``trained_in``).
It imports the standard library and ``contextlab.io`` / ``errors`` only, so the trainer, the
evaluations, the sweeps and the report all share it without importing one another.

Trade-off: a run carries its own tokenizer (a few MB at most) so that it is relocatable and
never depends on the directory a command ran in. Runs written before that fall back to the
training store named in their config, resolved against the directory training ran in
(read back from ``train.out_dir``), then against the places such runs were looked up
before; the tokenizer hash always decides, so a wrong guess is never used.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

from contextlab.errors import UserError
from contextlab.io import live_holder, staged_folder

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONFIG = "config.toml"
METRICS = "metrics.jsonl"
TOKENIZER = "tokenizer"
TOKENIZER_SPEC = "tokenizer_spec.json"  # the file a saved tokenizer folder is recognised by
CHECKPOINTS = "checkpoints"
STATE = "state.json"
WEIGHTS = "model.safetensors"
EVAL = "eval"
HF_CONFIG = "config.json"
LOCK = ".lock"  # io.exclusive_lock's file: one train command writes a run at a time
# what may be in a run directory before its first train starts: the lock, and a sweep's own files
BEFORE_TRAIN = (LOCK, "sweep_config.toml", "sweep.log", "sweep_status.json")

_STEP_DIR = re.compile(r"^step_(\d{6,})$")
PathLike = str | os.PathLike


# ---------------------------------------------------------------------------- what a folder is


def is_checkpoint(path: PathLike) -> bool:
    path = Path(path)
    return (path / STATE).is_file() and (path / WEIGHTS).is_file()


def is_hf_folder(path: PathLike) -> bool:
    """A Hugging Face model folder (a contextlab export included): config.json and no state.json."""
    path = Path(path)
    return (path / HF_CONFIG).is_file() and not (path / STATE).is_file()


def is_run(path: PathLike) -> bool:
    """A contextlab run directory: its config, its metrics or its checkpoints folder."""
    path = Path(path)
    return any((path / name).exists() for name in (CONFIG, METRICS, CHECKPOINTS))


def run_of(path: PathLike) -> Path:
    """The run directory of a checkpoint (``RUN/checkpoints/step_N`` -> ``RUN``); anything else is itself."""
    path = Path(path)
    if (path / STATE).is_file() and path.parent.name == CHECKPOINTS:
        return path.parent.parent
    return path


def check_run_dir(path: PathLike) -> None:
    """Refuse ``path`` as a run to write unless it is missing, a run, or empty but for ``BEFORE_TRAIN``.

    A token store, a packed store, a model folder, a checkpoint or any other non-empty folder
    is not a run: training would write its config.toml, metrics and checkpoints into it."""
    path = Path(path)
    if not path.exists():
        return
    if not path.is_dir():
        raise UserError(f"train.out_dir {path} is a file; choose a new folder or an existing run")
    if not [p for p in path.iterdir() if p.name not in BEFORE_TRAIN]:
        return
    kind = _other_kind(path)
    if kind is None and _looks_like_run(path):
        return
    raise UserError(
        f"train.out_dir {path} is {kind or 'a non-empty folder without a run'}, not a contextlab run; "
        f"training would write its config.toml, metrics and checkpoints there: choose another train.out_dir "
        f"(a new or empty folder, or a run to resume)"
    )


def _other_kind(path: Path) -> str | None:
    """What a folder holds when it is something a run is not (None: nothing known)."""
    if (path / "meta.json").is_file():
        return "a token store or packed store (it has meta.json)"
    if (path / STATE).is_file():
        return "a checkpoint"
    if (path / HF_CONFIG).is_file():
        return "a model folder (it has config.json)"
    return None


def _looks_like_run(path: Path) -> bool:
    """Metrics, a checkpoints folder, or a config.toml with a [train] table."""
    if (path / METRICS).is_file() or (path / CHECKPOINTS).is_dir():
        return True
    try:
        return "train" in read_config(path)
    except UserError:
        return False


# ---------------------------------------------------------------------------- checkpoints


def step_dir(run_dir: PathLike, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / f"step_{step:06d}"


def list_checkpoints(run_dir: PathLike) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run, oldest first (a checkpoint is complete once state.json exists)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = []
    for d in root.iterdir():
        m = _STEP_DIR.match(d.name)
        if m and (d / STATE).is_file():
            found.append((int(m.group(1)), d))
    return sorted(found)


def latest_checkpoint(run_dir: PathLike) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


BEST = "best"  # --step best: the checkpoint of the run's best validation loss


def parse_step(text: str) -> int | str:
    """A --step argument: a step number, or ``best`` (argparse type)."""
    import argparse

    if text.strip().lower() == BEST:
        return BEST
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is no step: give a step number (its checkpoints/step_N) or best"
        ) from None


STEP_HELP = (
    "checkpoint step of a run, or best: the step of its best validation loss (metrics.jsonl's best_step; "
    "with train.patience every new best is kept) (default: the newest)"
)


def best_step(run_dir: PathLike) -> tuple[int, float] | None:
    """(the step, the loss) of a run's best validation loss in its metrics.jsonl; None without validations."""
    summary = summarize(read_metrics(run_dir))
    return (summary["best_step"], summary["best_val_loss"]) if "best_step" in summary else None


def resolve_checkpoint(path: PathLike, step: int | str | None = None) -> Path:
    """A run directory (+ optional step, or ``best``) or a checkpoint directory -> its checkpoint folder."""
    path = Path(path)
    if step == BEST and (is_checkpoint(path) or not path.exists()):
        raise UserError(f"--step best picks a checkpoint of a run: give the run folder, not {path}")
    if is_checkpoint(path):
        own = checkpoint_step(path)
        if step is not None and own is not None and step != own:  # it was ignored in silence
            raise UserError(
                f"{path} is the checkpoint of step {own}, and --step {step} asks for another; give the run "
                f"folder {run_of(path)} with --step {step}, or leave --step out"
            )
        return path
    if not path.exists():
        raise UserError(f"run or checkpoint not found: {path}")
    found = dict(list_checkpoints(path))
    if not found:
        stateless = sorted(
            d
            for d in (path / CHECKPOINTS).glob("step_*")
            if (d / WEIGHTS).is_file() and not (d / STATE).is_file()
        )
        if stateless:  # a user's lost state.json: not "train first"
            raise UserError(
                f"{stateless[-1]} holds weights but no state.json, so it is no checkpoint that can be read; "
                "restore its state.json (or move it away and train again)"
            )
        raise UserError(f"{path} has no checkpoints (expected {path}/checkpoints/step_NNNNNN/); train first")
    if step is None:
        _note_still_training(path, found[max(found)])
        _note_best_kept(path, found)
        return found[max(found)]
    if step == BEST:
        best = best_step(path)
        if best is None:
            raise UserError(f"{path} logged no validation loss, so it has no best step; pass --step N")
        if best[0] not in found:
            raise UserError(
                f"{path}'s best validation loss ({best[1]:.4f}) was at step {best[0]}, whose checkpoint was "
                "not kept (train.patience keeps every new best); available: "
                + ", ".join(map(str, sorted(found)))
            )
        return found[best[0]]
    if step not in found:
        raise UserError(
            f"{path} has no checkpoint at step {step}; available: {', '.join(map(str, sorted(found)))}"
        )
    return found[step]


_NOTED: set[Path] = set()  # runs already said to be training, by this process
_BEST_NOTED: set[Path] = set()  # runs whose best checkpoint, before the newest, was already said


def _note_still_training(run: Path, newest: Path) -> None:
    """Say once that ``run`` is being trained now, so its newest checkpoint is not its last."""
    holder = live_holder(run / LOCK)
    if holder and run.resolve() not in _NOTED:
        _NOTED.add(run.resolve())
        print(
            f"note: {run} is still training ({holder.split(' (')[0]}); this reads its newest checkpoint "
            f"{newest.name}, and a later one will follow: pass --step to name the checkpoint read",
            file=sys.stderr,
        )


def _note_best_kept(run: Path, found: dict[int, Path]) -> None:
    """Say once that ``run`` kept the checkpoint of its best validation loss, earlier than its newest
    (an early-stopped run: its newest is where it stopped, after the loss rose)."""
    newest = max(found)
    best = best_step(run)
    if best is None or best[0] == newest or best[0] not in found or run.resolve() in _BEST_NOTED:
        return
    _BEST_NOTED.add(run.resolve())
    print(
        f"note: {run}'s best validation loss ({best[1]:.4f}) was at step {best[0]}, before its newest "
        f"checkpoint {found[newest].name}, which this reads; --step best reads the best",
        file=sys.stderr,
    )


def checkpoint_step(ckpt: PathLike) -> int | None:
    """The step of a checkpoint folder, from its name ``step_NNNNNN`` (None for another name)."""
    m = _STEP_DIR.match(Path(ckpt).name)
    return int(m.group(1)) if m else None


def read_checkpoint_state(ckpt: PathLike) -> dict:
    try:
        return json.loads((Path(ckpt) / STATE).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"checkpoint {ckpt} has no readable state.json ({exc})") from None


# ---------------------------------------------------------------------------- config and metrics


FILE_HASHES = "files_sha256"  # state.json: the sha256 of each file a checkpoint holds beside it


def file_sha256(path: PathLike) -> str:
    """The sha256 hex digest of a file, read in 8 MiB blocks."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(8 << 20):
            h.update(block)
    return h.hexdigest()


def check_checkpoint_files(ckpt: PathLike, state: dict, names=None) -> None:
    """Raise ValueError naming the first file of ``ckpt`` (of ``names``, default all recorded) whose
    bytes no longer have the sha256 its state.json recorded when it was written (a flipped bit, a
    file copied over): such weights load without an error and give other numbers. Checkpoints written
    before the hashes were recorded pass."""
    recorded = state.get(FILE_HASHES) or {}
    for name, digest in recorded.items():
        if names is not None and name not in names:
            continue
        try:
            now = file_sha256(Path(ckpt) / name)
        except PermissionError:  # whole, perhaps: only this user may not read it (not "damaged")
            from contextlab.weights import not_permitted

            raise not_permitted(Path(ckpt) / name) from None
        if now != digest:
            raise ValueError(
                f"{name} is not the file this checkpoint wrote: its sha256 differs from the one state.json "
                "recorded"
            )


def read_config(path: PathLike) -> dict:
    """The resolved config.toml of a run or checkpoint directory ({} when it has none)."""
    f = Path(path) / CONFIG
    if not f.is_file():
        return {}
    try:
        return tomllib.loads(f.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(
            f"{f} is not valid TOML ({exc}); restore it from a checkpoint's config.toml"
        ) from None


def metrics_lines(run_dir: PathLike) -> list[tuple[str, dict]]:
    """(line, row) for every row of ``RUN/metrics.jsonl`` ([] when the run has none yet).

    A last line that is not a complete JSON object is a row torn by a kill in the middle of its
    write: it is left out (a resumed run drops it from the file). Any other unreadable line is
    damage that no kill makes, and is refused in one line naming it."""
    f = Path(run_dir) / METRICS
    if not f.exists():
        return []
    lines = [line for line in f.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    out = []
    for i, line in enumerate(lines):
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if isinstance(row, dict):
            out.append((line, row))
        elif i < len(lines) - 1:
            raise UserError(
                f"{f} line {i + 1} is not a metrics row ({line[:40]!r}); delete that line or the file"
            )
    return out


def read_metrics(run_dir: PathLike) -> list[dict]:
    """The rows of ``RUN/metrics.jsonl`` ([] when the run has none yet; a torn last line is left out)."""
    return [row for _, row in metrics_lines(run_dir)]


def summarize(rows: list[dict]) -> dict:
    """steps, tokens and the last training loss of a run's rows; with validations also the last
    validation loss and the best one with its step, and the left-to-right loss (``val_lm_loss``,
    the one to compare objectives by) last and best. {} for no rows."""
    if not rows:
        return {}
    last = rows[-1]
    out = {"steps": last["step"], "tokens": last.get("tokens"), "train_loss": last["loss"]}
    vals = [(r["val_loss"], r["step"]) for r in rows if "val_loss" in r]
    if vals:
        out["val_loss"] = vals[-1][0]
        out["best_val_loss"], out["best_step"] = min(vals)
    lm = [r["val_lm_loss"] for r in rows if "val_lm_loss" in r]  # comparable across objectives
    if lm:
        out["val_lm_loss"], out["best_val_lm_loss"] = lm[-1], min(lm)
    return out


def find_runs(root: PathLike) -> list[Path]:
    """Every run directory below ``root`` (those with a metrics.jsonl), sorted."""
    return sorted(p.parent for p in Path(root).rglob(METRICS))


# ---------------------------------------------------------------------------- evaluation results


def eval_dir(path: PathLike) -> Path:
    """Where the evaluations of a run, a checkpoint (its run's) or a model folder are written by default."""
    return run_of(path) / EVAL


def read_eval(run_dir: PathLike, name: str) -> dict | None:
    """The result ``RUN/eval/<name>.json``; None when it is missing or not a JSON object."""
    f = Path(run_dir) / EVAL / f"{name}.json"
    try:
        doc = json.loads(f.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def read_evals(run_dir: PathLike) -> dict[str, dict]:
    """Every readable ``RUN/eval/*.json`` by name, in name order (unreadable files are left out)."""
    d = Path(run_dir) / EVAL
    found = {f.stem: read_eval(run_dir, f.stem) for f in sorted(d.glob("*.json"))} if d.is_dir() else {}
    return {name: doc for name, doc in found.items() if doc is not None}


# ---------------------------------------------------------------------------- the tokenizer of a run


def save_tokenizer(run_dir: PathLike, source: PathLike, spec: dict) -> Path | None:
    """Copy the tokenizer folder ``source`` (a store's ``tokenizer/``) into ``RUN/tokenizer``.

    Called when training starts, so a run carries its tokenizer. A copy already there with
    ``spec``'s hash is kept; the folder is staged beside and swapped in whole
    (``io.staged_folder``), so a kill never leaves half a tokenizer. Returns the run's folder, or
    None when ``source`` has none.
    """
    dest = Path(run_dir) / TOKENIZER
    if _spec_hash(dest) == spec.get("hash") and spec.get("hash"):
        return dest
    source = Path(source)
    if not (source / TOKENIZER_SPEC).is_file():
        return None
    with staged_folder(dest) as tmp:  # the run's own folder: a file or a link there is refused
        shutil.copytree(source, tmp, dirs_exist_ok=True)
    return dest


def tokenizer_dirs(ckpt: PathLike) -> list[Path]:
    """The folders that may hold the tokenizer of a checkpoint, most trusted first.

    The checkpoint's and the run's own ``tokenizer/``; then, for runs written before runs carried
    their tokenizer, the training stores named in the config, resolved against the directory
    training ran in, and at last against the places such runs were always looked up (the current
    directory, the run and its two parents). Callers check the tokenizer hash of what they find.
    """
    ckpt = Path(ckpt)
    run = run_of(ckpt)
    dirs = [ckpt / TOKENIZER, run / TOKENIZER]
    for config in (read_config(ckpt), read_config(run)):
        bases = [launch_dir(run, config), Path.cwd(), run, run.parent, run.parent.parent]
        for base in [b for b in bases if b is not None]:
            dirs += [store / TOKENIZER for store in training_stores(config, base)]
    return list(dict.fromkeys(dirs))


def find_tokenizer_dir(ckpt: PathLike, spec: dict) -> Path | None:
    """The first of ``tokenizer_dirs(ckpt)`` whose saved spec has ``spec``'s hash (None: none has)."""
    for d in tokenizer_dirs(ckpt):
        found = _spec_hash(d)
        if found is not None and (not spec.get("hash") or found == spec["hash"]):
            return d
    return None


def _spec_hash(folder: Path) -> str | None:
    try:
        return str(json.loads((folder / TOKENIZER_SPEC).read_text())["hash"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def launch_dir(run_dir: PathLike, config: dict) -> Path | None:
    """The directory training ran in, read back from the run's own path: a relative ``train.out_dir``
    names the run from there. None when it cannot be told (an absolute out_dir, a moved run)."""
    out = (config.get("train") or {}).get("out_dir")
    if not out or Path(out).is_absolute() or ".." in Path(out).parts:
        return None
    parts = [p for p in Path(out).parts if p != "."]
    run = Path(run_dir).resolve()
    if not parts:
        return run
    if len(parts) >= len(run.parts) or list(run.parts[-len(parts) :]) != parts:
        return None
    return run.parents[len(parts) - 1]


def data_record(path: PathLike) -> dict | None:
    """What a run recorded of its data in its checkpoints' ``state.json`` (``data``: ``cwd``, the
    directory training ran in, and ``paths``, every [data] path as ``{"path", "content"}``, the
    content hash of a token store or the fingerprint of a packed store), from a checkpoint or the
    newest checkpoint of a run. None for runs written before it and for other folders."""
    path = Path(path)
    ckpt = path if is_checkpoint(path) else latest_checkpoint(path) if path.is_dir() else None
    try:
        record = json.loads((ckpt / STATE).read_text()).get("data") if ckpt is not None else None
    except (OSError, ValueError, AttributeError):
        return None
    return record if isinstance(record, dict) else None


def trained_on(path: PathLike, content_hash: str | None) -> bool:
    """Whether the run or checkpoint at ``path`` (or the checkpoint a Hugging Face export of contextlab
    was made from, while that run is where its config.json says) trained on the token store of
    ``content_hash`` (its data.store, or the store its packed data was packed from), by what its
    checkpoints record."""
    export = None if is_run(path) or is_checkpoint(path) else exported_from(path)
    record = data_record(export if export is not None else path)
    paths = (record or {}).get("paths") or {}
    trained = (paths.get("data.store") or {}).get("content") if isinstance(paths, dict) else None
    return bool(content_hash) and trained == content_hash


def exported_from(path: PathLike) -> Path | None:
    """The checkpoint a Hugging Face folder written by ``contextlab export`` was made from, by its
    config.json (``contextlab.contextlab_run``, the run's absolute path, and
    ``contextlab_run_relative``, its path from the export, for a project folder moved whole;
    ``contextlab.contextlab_step``); None for other folders or a run gone since. Exports written
    before the absolute path record the run as the command named it, read from here."""
    try:
        made = json.loads((Path(path) / "config.json").read_text())["contextlab"]
        step = int(made["contextlab_step"])
        runs = [Path(made["contextlab_run"])]
        if made.get("contextlab_run_relative"):
            runs.append(Path(path) / made["contextlab_run_relative"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return next((step_dir(r, step) for r in runs if (step_dir(r, step) / STATE).is_file()), None)


def trained_in(run_dir: PathLike, config: dict | None = None) -> Path | None:
    """The directory a run was trained in, which its relative [data] paths are relative to: the one
    its checkpoints record (``data_record``), else the one read back from ``train.out_dir``
    (``launch_dir``); None when neither tells."""
    record = data_record(run_dir) or {}
    if record.get("cwd"):
        return Path(record["cwd"])
    return launch_dir(run_of(run_dir), read_config(run_of(run_dir)) if config is None else config)


def training_stores(run_config: dict, base: PathLike | None = None) -> list[Path]:
    """The token stores a run trained on, from its resolved config: data.store, and the stores that
    data.packed / data.mixture were packed from (read from their meta.json). Relative paths are
    taken relative to ``base`` (the current directory when None), as training took them."""
    root = Path(base) if base is not None else Path()
    d = run_config.get("data", {})
    stores = [root / d["store"]] if d.get("store") else []
    packed = ([d["packed"]] if d.get("packed") else []) + [
        m["packed"] for m in d.get("mixture", []) if m.get("packed")
    ]
    for p in packed:
        try:
            stores.append(root / json.loads((root / p / "meta.json").read_text())["store"]["path"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # moved or deleted: callers try the other places they know
    return stores
