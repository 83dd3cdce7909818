"""Checkpoints: atomic, self-describing, loaded without unpickling arbitrary objects.

A checkpoint is a directory ``checkpoints/step_NNNNNN/`` holding

    model.safetensors   weights of the model and of the objective's extra modules
    optimizer.pt        the optimizer state (tensors, numbers, lists: read with weights_only=True)
    rng.pt              torch RNG states (CPU, and CUDA when present)
    state.json          step, tokens and FLOPs seen, elapsed time, data-loader cursor,
                        schedule length, config hash, tokenizer hash, code version, and the
                        sha256 of the three files above (``files_sha256``)
    config.toml         the resolved run config

It is written into a hidden temporary directory and renamed into place, so a kill or a
full disk in the middle leaves the previous checkpoint intact and no half checkpoint
visible. Ctrl-C (SIGINT) and SIGTERM arriving during the write are held until it is finished
(``signals_deferred``) and then take effect, so stopping a run never throws away the checkpoint
being written. A write that fails (``torch.save`` reports a full disk as a ``RuntimeError``,
safetensors as a ``SafetensorError``) removes the temporary folder and ends in one line naming
the last good checkpoint; so does a checkpoint whose files cannot be read back (truncated
weights, a garbage optimizer file), naming the newest earlier one that can, and one whose files
no longer have the hashes state.json recorded (a flipped bit reads back without an error, as other
numbers: a resumed run trained on from them, an evaluation scored them). Checkpoint names
and listing belong to ``contextlab.rundir``; this module writes what is inside and reads it all
back to resume; ``contextlab.inference.checkpoint`` reads the weights (here too) and builds the model.
Only the newest ``keep_last`` are kept, and with early stopping the best one too. A checkpoint
folder holding anything training did not write there (a user's results put inside by hand) is never
deleted: pruning keeps it and says so in one line, and a step written again carries such files over
into its new folder.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pickle
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from contextlab.errors import UserError, some
from contextlab.inference.checkpoint import read_weights
from contextlab.io import atomic_write_json, follow_umask, fsync_dir
from contextlab.rundir import (
    CHECKPOINTS,
    CONFIG,
    FILE_HASHES,
    STATE,
    WEIGHTS,
    check_checkpoint_files,
    file_sha256,
    latest_checkpoint,
    list_checkpoints,
    step_dir,
)
from contextlab.weights import not_permitted


def _contiguous(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Untie shared storage (safetensors refuses aliases) and make every tensor contiguous."""
    out, seen = {}, {}
    for k, v in sd.items():
        v = v.detach().cpu()
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape))
        out[k] = v.clone().contiguous() if key in seen or not v.is_contiguous() else v
        seen[key] = k
    return out


def save_checkpoint(
    run_dir: Path,
    step: int,
    *,
    model_state: dict[str, torch.Tensor],
    optim_state: dict,
    state: dict[str, Any],
    config_toml: str,
    rng_ranks: list[dict] | None = None,
    keep_last: int = 2,
    pinned: tuple[int, ...] = (),
) -> Path:
    """Write checkpoint ``step`` atomically; then prune to the newest ``keep_last`` (steps in ``pinned``,
    e.g. the best validation step of an early-stopped run, are never pruned). ``rng_ranks``: every
    process's RNG states of a run of several (``distributed.gather_rng_states``)."""
    final = step_dir(run_dir, step)
    tmp = final.with_name(f".{final.name}.tmp")
    with signals_deferred(f"finishing checkpoint {final.name} first"):
        try:
            _write_files(tmp, model_state, optim_state, state, config_toml, rng_ranks)
            if final.exists() and _foreign(final):
                _write_beside(final, tmp)
            else:
                if final.exists():
                    shutil.rmtree(final)
                os.replace(tmp, final)
            fsync_dir(final.parent)
        except (OSError, RuntimeError, SafetensorError) as exc:  # torch.save: RuntimeError on a full disk
            shutil.rmtree(tmp, ignore_errors=True)
            prev = latest_checkpoint(run_dir)
            kept = (
                f"the previous checkpoint {prev.name} is intact; fix it and run the same command again to "
                "resume from it"
                if prev
                else "no earlier checkpoint exists; fix it and run the same command again: it starts over "
                "from step 0"
            )
            raise UserError(f"could not write checkpoint {final} ({_why(exc)}); {kept}") from None
        for old_step, old in list_checkpoints(run_dir)[:-keep_last] if keep_last > 0 else []:
            if old_step not in pinned and not _kept_for_user(old, keep_last):
                shutil.rmtree(old, ignore_errors=True)
    return final


WRITTEN = (WEIGHTS, "optimizer.pt", "rng.pt", CONFIG, STATE)  # what _write_files puts in a checkpoint
_ANNOUNCED: set[Path] = set()  # kept checkpoints already named by this process (one line each)


def _foreign(folder: Path) -> list[str]:
    """The names in a checkpoint folder that training did not write there."""
    try:
        return sorted(p.name for p in folder.iterdir() if p.name not in WRITTEN)
    except OSError:
        return []


def _kept_for_user(old: Path, keep_last: int) -> bool:
    """Whether pruning keeps checkpoint ``old`` because it holds files training did not write (a user's
    results): it is then named once per process, with how to let it go."""
    names = _foreign(old)
    if names and old not in _ANNOUNCED:
        _ANNOUNCED.add(old)
        print(
            f"note: kept {old} past train.keep_last={keep_last}: it holds {some(names)}, which training "
            "did not write; move that out and the next checkpoint prunes it"
        )
    return bool(names)


def _write_beside(final: Path, tmp: Path) -> None:
    """Move the new files of a step written again into its folder ``final``, which holds files training
    did not write (they stay). state.json goes first and comes back last, so a kill in between leaves
    no checkpoint there (the previous one is the newest) and never touches the user's files."""
    (final / STATE).unlink(missing_ok=True)
    for f in sorted(tmp.iterdir(), key=lambda p: p.name == STATE):
        os.replace(f, final / f.name)
    tmp.rmdir()
    print(f"note: {final} is written again; {some(_foreign(final))}, not written by training, stay in it")


@contextlib.contextmanager
def signals_deferred(why: str, signums: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Hold ``signums`` during the block and deliver them, in order, once it is done: the handler they
    had is called (SIGINT: KeyboardInterrupt; contextlab's SIGTERM: its exit), or the default action
    taken. The first one held prints ``why`` on stderr. Only the main thread receives signals, so
    elsewhere (and for a handler Python did not install, or a signal ignored) this holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum, frame) -> None:
        if not held:
            print(f"\n{signal.Signals(signum).name} received: {why}, then stopping", file=sys.stderr)
        held.append(signum)

    previous = {s: signal.getsignal(s) for s in signums}
    # None: not ours to replace; SIG_IGN: the signal stops nothing (a background job's SIGINT), so it
    # is left ignored and never announced as a stop
    previous = {s: h for s, h in previous.items() if h is not None and h != signal.SIG_IGN}
    for s in previous:
        signal.signal(s, hold)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(held):
            handler = previous[s]
            if callable(handler):
                handler(s, None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), s)


def _write_files(
    tmp: Path, model_state: dict, optim_state: dict, state: dict, config_toml: str, rng_ranks=None
) -> None:
    """The files of a checkpoint, in a fresh ``tmp`` folder, fsynced."""
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_file(_contiguous(model_state), str(tmp / WEIGHTS))
    follow_umask([tmp / WEIGHTS])  # safetensors writes 0o600: other users could not read the weights
    torch.save(optim_state, tmp / "optimizer.pt")
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    if rng_ranks:
        rng["ranks"] = rng_ranks
    torch.save(rng, tmp / "rng.pt")
    (tmp / CONFIG).write_text(config_toml, encoding="utf-8")
    hashes = {name: file_sha256(tmp / name) for name in (WEIGHTS, "optimizer.pt", "rng.pt")}
    atomic_write_json(tmp / STATE, {**state, FILE_HASHES: hashes})  # read back: check_checkpoint_files
    for f in tmp.iterdir():
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())


def _why(exc: BaseException) -> str:
    """The first line of what went wrong; "the disk is full" when it was that."""
    text = str(exc)
    if getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "No space left" in text:
        return "the disk is full"
    if getattr(exc, "errno", None) == errno.EFBIG or "File too large" in text:
        return "a file grew past the size limit of this filesystem or of `ulimit -f`"
    if "file write failed" in text:  # torch's stream writer: almost always a full disk
        return "the write failed: is the disk full?"
    if "unexpected pos" in text or "inline_container" in text:  # torch's zip writer, cut off mid-file
        return "the write stopped partway (torch's zip writer: unexpected pos), almost always a full disk"
    line = (text.strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {line[:160]}" if line else type(exc).__name__


UNREADABLE = (OSError, ValueError, RuntimeError, EOFError, KeyError, pickle.UnpicklingError, SafetensorError)


def load_checkpoint(ckpt: Path) -> tuple[dict[str, torch.Tensor], dict, dict, dict]:
    """(model state, optimizer state, rng states, state.json) of a checkpoint; no arbitrary unpickling.
    A damaged checkpoint is one line naming the newest earlier checkpoint that reads back."""
    try:
        return _read(Path(ckpt))
    except UNREADABLE as exc:
        ckpt = Path(ckpt)
        if isinstance(exc, PermissionError):  # whole, perhaps: only this user may not read it
            raise not_permitted(exc.filename or ckpt) from None
        good = _earlier_good(ckpt)
        then = (
            f"move it away to resume from {good}"
            if good
            else "no earlier checkpoint reads back: move it away to start the run again"
        )
        raise UserError(f"checkpoint {ckpt} cannot be read ({_why(exc)}); {then}") from None


def _read(ckpt: Path) -> tuple[dict[str, torch.Tensor], dict, dict, dict]:
    state = json.loads((ckpt / STATE).read_text())
    model_state = read_weights(ckpt)  # a truncated or garbage file: its reader's own error, first
    optim_state = torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=True)
    rng = torch.load(ckpt / "rng.pt", map_location="cpu", weights_only=True)
    check_checkpoint_files(ckpt, state)  # a damaged file that reads back gives other numbers, no error
    return model_state, optim_state, rng, state


def _earlier_good(ckpt: Path) -> Path | None:
    """The newest checkpoint of ``ckpt``'s run older than it whose files all read back."""
    if ckpt.parent.name != CHECKPOINTS:
        return None
    listed = list_checkpoints(ckpt.parent.parent)
    step = next((s for s, d in listed if d == ckpt), None)
    for _, d in reversed([(s, d) for s, d in listed if d != ckpt and (step is None or s < step)]):
        try:
            _read(d)
            return d
        except (*UNREADABLE, UserError):  # UserError: a file this user may not read
            continue
    return None


def remove_temporary(run_dir: Path) -> None:
    """Delete checkpoint folders a kill left half written (call it holding the run's lock)."""
    root = Path(run_dir) / CHECKPOINTS
    for tmp in root.glob(".step_*.tmp") if root.is_dir() else []:
        shutil.rmtree(tmp, ignore_errors=True)


def restore_rng(rng: dict, rank: int = 0, world_size: int = 1) -> bool:
    """Put back the RNG states a checkpoint saved for process ``rank`` of ``world_size``: its own when the
    run saved every process's with as many processes (then True), else the main process's (False)."""
    ranks = rng.get("ranks") or []
    if world_size > 1 and len(ranks) == world_size:
        own = ranks[rank]
        torch.set_rng_state(own["torch"])
        if "cuda" in own and torch.cuda.is_available():
            torch.cuda.set_rng_state(own["cuda"])
        return True
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    return world_size == 1


def write_untrained_run(run_dir: Path, model, tokenizer, *, note: str, overwrite: bool = False) -> Path:
    """A run directory holding ``model`` as its one checkpoint (step 0) and ``tokenizer``: for models
    whose weights were written rather than trained (controls), so that every command that takes a
    run (eval, generate, export, analyze) takes them too. ``note`` says what the model is; it goes
    into the checkpoint's record and the run's config.toml."""
    import dataclasses
    import tempfile

    from contextlab import __version__
    from contextlab.config import dumps_toml
    from contextlab.rundir import check_run_dir, save_tokenizer

    run_dir = Path(run_dir)
    if run_dir.exists() and any(run_dir.iterdir()) and not overwrite:
        raise UserError(f"{run_dir} exists and is not empty; choose a new folder or pass overwrite=True")
    check_run_dir(run_dir)
    config_toml = f"# {note}\n" + dumps_toml({"model": dataclasses.asdict(model.config)})
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG).write_text(config_toml, encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save(Path(tmp) / "tokenizer")
        save_tokenizer(run_dir, Path(tmp) / "tokenizer", tokenizer.spec())
    state = {
        "step": 0,
        "tokens": 0,
        "arch": "gpt",
        "model_config": dataclasses.asdict(model.config),
        "tokenizer": tokenizer.spec(),
        "tokenizer_hash": tokenizer.hash,
        "objective": "clm",
        "left_to_right": {"prefix_ids": [], "why": ""},
        "written": note,
        "code_version": __version__,
    }
    weights = {f"model.{k}": v for k, v in model.state_dict().items()}
    return save_checkpoint(
        run_dir, 0, model_state=weights, optim_state={}, state=state, config_toml=config_toml
    )
