"""The one exception type a user can cause, and the one resource every command can run out of.

Anything a user can get wrong (a bad path, an unknown config key, a corrupt store, a model
and data with different tokenizers) raises ``UserError`` with one line that names the
problem and the fix. The command line prints that line and exits with code 2; every other
exception is a bug and keeps its traceback, except running out of memory (``memory_error_line``),
which no code can rule out for the user's model and sizes: one line with what was asked for and
how to ask for less.
"""

import re


class UserError(Exception):
    """An error the user can fix; its message is one line naming the problem and the fix."""


class ContextLengthWarning(UserWarning):
    """A model is run beyond the context it was trained (or extended) for, or at one its files do not
    name (``contextlab.eval.adapter`` gives it its usual home)."""


def some(names: list, show: int = 3) -> str:
    """The first ``show`` of ``names`` for a message line, and how many more: ``a, b, c and 4 more``."""
    more = f" and {len(names) - show} more" if len(names) > show else ""
    return ", ".join(map(str, names[:show])) + more


# what fits in memory is set by these, per command (its first word)
MEMORY_FIX = {
    "train": "set train.micro_batch_rows to fewer rows per forward pass (the step accumulates the same rows)",
    "profile": "give --batch-size 1, or measure at a shorter --context",
    "eval": "give a smaller --batch-size, or shorter sequences (--length, --lengths)",
    "analyze": "give a smaller --batch-size, or shorter contexts",
    "generate": "give a smaller --batch-size",
}


def memory_error_line(exc: BaseException, command: str = "") -> str | None:
    """One line for running out of memory (host or GPU), naming the allocation that failed and the
    command's way to ask for less; None for any other error."""
    text = str(exc)
    oom = (
        isinstance(exc, MemoryError)
        or type(exc).__name__ == "OutOfMemoryError"  # torch's (CUDA and others)
        or "can't allocate memory" in text  # torch's CPU allocator
        or "out of memory" in text.lower()
    )
    if not oom:
        return None
    asked = ""
    if m := re.search(r"allocate (\d+) bytes", text):
        asked = f" (one allocation of {int(m.group(1)) / 1e9:.1f} GB)"
    elif m := re.search(r"[Tt]ried to allocate ([\d.]+ [KMGT]i?B)", text):
        asked = f" (one allocation of {m.group(1)})"
    fix = MEMORY_FIX.get(command.split(" ")[0], "use smaller batches or shorter sequences")
    return f"out of memory{asked}; {fix}, or run it on a machine with more memory"
