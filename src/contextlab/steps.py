"""One resumable step runner: a step that already ran with the same inputs is skipped.

A ``Step`` is a key (unique within its state file), a fingerprint (the JSON data of every
input that determines its outputs: a config, the fingerprints of the steps it reads), the
files it must leave, and the callable that makes them. ``StepRunner`` keeps ONE state file
(JSON, written atomically) and for every step decides:

* recorded with the same fingerprint and every output present: skip it;
* never run, its fingerprint changed, an output is missing, or it started and never
  finished (a crash, a kill, an exception): run it, and say why unless it is new.

A step is recorded only after ``run`` returns: its key is first moved to ``started`` (and
its old record dropped), so outputs left by a step that failed or was killed half-way are
never trusted; the next run redoes it (work that resumes by itself, such as training from
its checkpoints, picks up where it stopped). Wall time per step goes to ``seconds``.

A fingerprint may be a callable when it depends on what an earlier step wrote (the
fingerprint of a packed store is known only after packing); ``None`` marks a step that
checks itself (a token store records the fingerprint it was made from): it always runs,
and returns ``UP_TO_DATE`` when it found nothing to do. A caller may refuse a changed
fingerprint instead of rerunning (``on_change`` raises), as the quickstart does.

Callers that run their steps elsewhere (a sweep's runs are processes, N at a time) use the
parts of ``run``: ``check``, ``begin``, ``finish``, ``fail``. Every change to the state
re-reads the file under a lock and rewrites only that step's entries, so processes sharing
a state file do not lose each other's records.

Trade-off: the state records *that* a step finished with given inputs, not a hash of its
outputs: checking costs nothing and outputs may be gigabytes, but an output edited by hand
after its step finished is trusted (delete it and the step runs again).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextlab.errors import UserError
from contextlab.io import atomic_write_json

UP_TO_DATE = "up to date"  # returned by a self-checking step (fingerprint None) that had nothing to do
_SECTIONS = ("steps", "seconds", "started", "failed")


def digest(obj: Any) -> str:
    """16 hex digits of the SHA-256 of ``obj`` as sorted JSON (paths and other objects as str)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass
class Step:
    """One unit of resumable work: what it is called, what determines it, what it leaves, how it runs."""

    key: str  # unique within the state file, e.g. "train gpt"
    fingerprint: Any  # JSON data of the inputs, a callable returning it, or None (the step checks itself)
    outputs: Sequence[str | Path]  # files or directories the step must leave
    run: Callable[[], Any] | None = None  # makes the outputs (None: run elsewhere, e.g. by a process)
    skip_note: str = ""  # printed when the step is skipped

    def digest(self) -> str | None:
        """The fingerprint as 16 hex digits (computed now, when it is a callable); None if self-checking."""
        fp = self.fingerprint() if callable(self.fingerprint) else self.fingerprint
        return None if fp is None else digest(fp)


@dataclass
class Outcome:
    """What ``StepRunner.run`` did with a step."""

    ran: bool  # False: skipped (recorded, or a self-checking step that was up to date)
    value: Any = None  # what ``run`` returned
    seconds: float = 0.0
    reason: str = ""  # why it ran: "new", "its inputs changed", "its output X is missing", ...


@dataclass
class StepRunner:
    """Runs steps against one state file; see the module docstring for the rules."""

    state_path: Path
    on_change: Callable[[Step], None] | None = None  # called before rerunning a changed step; may raise
    log: Callable[[str], Any] = print
    state: dict = field(init=False)

    def __post_init__(self) -> None:
        self.state_path = Path(self.state_path)
        self.state = _read(self.state_path)

    @property
    def seconds(self) -> dict:
        """Wall time of every recorded step, by key."""
        return dict(self.state["seconds"])

    def recorded(self, key: str) -> str | None:
        """The fingerprint ``key`` finished with, None if it never finished."""
        return self.state["steps"].get(key)

    def failure(self, key: str) -> str | None:
        """The error line ``key`` failed with, None if its last attempt did not fail."""
        return self.state["failed"].get(key)

    def check(self, step: Step) -> tuple[str | None, str | None]:
        """(fingerprint, why it must run); the reason is None when the step is done and may be skipped."""
        fp = step.digest()
        if fp is None:
            return None, "it checks itself"
        old = self.state["steps"].get(step.key)
        if old is None:
            if step.key in self.state["failed"]:
                return fp, f"it failed in an earlier run ({self.state['failed'][step.key]})"
            if step.key in self.state["started"]:
                return fp, "it was interrupted in an earlier run"
            return fp, "new"
        missing = [str(p) for p in step.outputs if not Path(p).exists()]
        if missing:
            return fp, f"its output {missing[0]} is missing"
        if old != fp:
            if self.on_change is not None:
                self.on_change(step)
            return fp, "its inputs changed since it ran"
        return fp, None

    def run(self, step: Step) -> Outcome:
        """Skip ``step`` when it is done, else run it and record it; a failure is recorded and re-raised."""
        fp, reason = self.check(step)
        if reason is None:
            if step.skip_note:
                self.log(step.skip_note)
            return Outcome(ran=False)
        if reason not in ("new", "it checks itself"):
            self.log(f"  {step.key}: {reason}; running it again")
        self.begin(step, fp)
        t0 = time.perf_counter()
        try:
            value = step.run()
        except BaseException as exc:
            seconds = time.perf_counter() - t0
            self.fail(step, exc)
            kind = "was interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            print(
                f"step '{step.key}' {kind} after {seconds:.0f} s; its outputs are not trusted until it "
                f"finishes: fix the cause and run the same command again (finished steps are skipped)",
                file=sys.stderr,
            )
            raise
        seconds = time.perf_counter() - t0
        if fp is None and value is UP_TO_DATE:
            self._update(step.key, started=None)
            return Outcome(ran=False, value=value)
        self.finish(step, fp, seconds)
        return Outcome(ran=True, value=value, seconds=seconds, reason=reason)

    def begin(self, step: Step, fp: str | None) -> None:
        """Mark ``step`` started: its old record is dropped until it finishes again."""
        self._update(step.key, steps=None, failed=None, started=fp or "")

    def finish(self, step: Step, fp: str | None, seconds: float) -> None:
        """Record ``step`` as finished with fingerprint ``fp`` after ``seconds`` of wall time."""
        self._update(step.key, steps=fp, started=None, seconds=round(seconds, 1))

    def fail(self, step: Step, error: BaseException | str) -> None:
        """Record that ``step`` failed, with the last line of its error; it stays unfinished."""
        if isinstance(error, BaseException):
            error = (str(error).strip().splitlines() or [type(error).__name__])[-1]
        self._update(step.key, failed=error[-300:])

    def _update(self, key: str, **changes: Any) -> None:
        """Re-read the state, set (or with None delete) ``key`` in the given sections, write it atomically."""
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(self.state_path):
            state = _read(self.state_path)
            for section, value in changes.items():
                if value is None:
                    state[section].pop(key, None)
                else:
                    state[section][key] = value
            atomic_write_json(self.state_path, {k: v for k, v in state.items() if v or k == "steps"})
        self.state = state


def _read(path: Path) -> dict:
    """The state file's sections (all empty when there is no file yet)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        data = {}
    except (OSError, ValueError) as exc:
        raise UserError(
            f"{path} is not a readable step state ({exc}); delete it to run every step again"
        ) from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a step state (not a JSON object); delete it to run every step again")
    return {s: dict(data.get(s) or {}) for s in _SECTIONS}


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock beside ``path`` (no-op where ``fcntl`` is missing), waited for.

    The holder deletes the lock file as it leaves, so none stays beside a user's outputs. A waiter
    that then gets the lock of the deleted file sees that the file at the lock's path is another
    (or none) and locks that one instead, so two processes never hold "the" lock at once."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    lock_file = path.with_name(f".{path.name}.lock")
    while True:
        f = open(lock_file, "a")
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            same = lock_file.stat().st_ino == os.fstat(f.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        f.close()  # the holder before deleted the file locked here: lock the one there now
    try:
        yield
    finally:
        lock_file.unlink(missing_ok=True)  # before the unlock: a waiter then finds it gone
        f.close()
