"""What the commands that run a model (eval, analyze, profile, generate, peak) share.

``check_compute`` checks ``--batch-size``, ``--threads`` and ``--device`` once, before any model
is loaded or any data read, and resolves ``--device auto`` to the GPU when one is visible: a bad
value is one line naming it and what is allowed (a CUDA device on a torch without CUDA names the
devices there are), never an error from deep inside torch
minutes later. ``quiet_transformers`` and ``warnings_as_lines`` keep the console to lines: no
"Loading weights" bar from transformers under ``--no-progress``, and a ContextLengthWarning as
``contextlab CMD: warning: ...`` rather than Python's warning format with a source path.

Trade-off: the checks read the parsed options by name (``args.batch_size`` when the command has
it), so each command keeps its own parser and help texts and calls one function.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from pathlib import Path

from contextlab.errors import UserError

DEVICE_HELP = "auto (a CUDA GPU when one is visible, else the CPU), cpu, cuda or cuda:N (default: auto)"


def check_compute(args) -> None:
    """Check the ``--batch-size``, ``--threads`` and ``--device`` the command has; set torch's threads."""
    batch = getattr(args, "batch_size", None)
    if batch is not None and batch < 1:
        raise UserError(f"--batch-size must be 1 or more, got {batch}")
    threads = getattr(args, "threads", 0) or 0
    if threads < 0:
        raise UserError(f"--threads must be a number of CPU threads (0 = torch's default), got {threads}")
    if getattr(args, "device", None) is not None:
        check_device(args.device)
        if args.device == "auto":
            args.device = auto_device()
    if threads:
        import torch

        torch.set_num_threads(threads)


def kind_of_quietly(path) -> str | None:
    """``inference.kind_of(path)``, or None where the path is missing or unreadable (its loading says
    why, in its own line)."""
    from contextlab.inference.open import kind_of

    try:
        return kind_of(path)
    except (UserError, OSError):
        return None


def refuse_data_as_model(paths, flag: str = "--model") -> None:
    """One line for a ``--model`` that is a token store or a packed store (a folder whose meta.json
    makes it one): it failed later on something else (an output folder said to lie inside it). And,
    before any model loads, one for a Hugging Face folder without its tokenizer (found after the first
    of two models had loaded, and a profile's second after a minute)."""
    import json

    from contextlab import rundir

    for path in [p for p in paths if p]:
        if kind_of_quietly(path) == "hf":
            from contextlab.inference.open import require_hf_tokenizer

            require_hf_tokenizer(Path(path))
        meta = Path(path) / "meta.json"
        if not meta.is_file() or rundir.is_checkpoint(path) or rundir.is_hf_folder(path):
            continue  # (a store holds a config.toml, so is_run would take it for a run)
        try:
            kind = str(json.loads(meta.read_text(encoding="utf-8")).get("format", ""))
        except (OSError, ValueError, AttributeError):
            continue
        if "store" in kind or "packed" in kind:
            what = "a packed store" if "packed" in kind else "a token store"
            raise UserError(
                f"{flag} {path} is {what}, not a model; give a run, a checkpoint or a Hugging Face model "
                "folder (a store is what --data reads)"
            )


def devices() -> list[str]:
    """The torch devices this machine and this torch build can run on."""
    import torch

    found = ["cpu"]
    if torch.cuda.is_available():
        found += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found


def auto_device() -> str:
    """What ``--device auto`` means here: ``cuda`` when torch sees a GPU, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str) -> None:
    """One line for a ``--device`` this machine cannot run on; ``auto`` (where a command takes it) passes."""
    import torch

    if device == "auto":
        return
    here = devices()
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise UserError(
            f"--device {device!r} is not a torch device; devices here: {', '.join(here)}"
        ) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        why = "this torch was built without CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise UserError(f"--device {device} is not available: {why}; devices here: {', '.join(here)}")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UserError(f"--device {device} is not available: devices here: {', '.join(here)}")
    if dev.type not in ("cpu", "cuda") and str(dev) not in here:
        raise UserError(f"--device {device} is not available here; devices here: {', '.join(here)}")


def on_terminal() -> bool:
    """Whether stderr, where the bars go, is a terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # closed, or no stream
        return False


def quiet_transformers(models: list[str], asked: bool = True) -> None:
    """Turn off transformers' own bar ("Loading weights", which it draws even into logs) when a model is a
    Hugging Face folder and either ``asked`` (--no-progress) or stderr is no terminal (a log, a batch
    job: the bar's redraws would fill it); other models never import transformers for it."""
    from contextlab.rundir import is_hf_folder

    if not asked and on_terminal():
        return
    if any(m and is_hf_folder(Path(m)) for m in models):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


@contextlib.contextmanager
def warnings_as_lines(command: str):
    """A ContextLengthWarning shows as one line, ``contextlab COMMAND: warning: ...``, not as the source
    line that raised it (through tqdm, so an open bar stays whole); other warnings as Python shows them."""
    from contextlab import bars
    from contextlab.eval.adapter import ContextLengthWarning

    with warnings.catch_warnings():  # restores showwarning on the way out
        show = warnings.showwarning

        def one_line(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, ContextLengthWarning):
                bars.write(f"contextlab {command}: warning: {message}", file=sys.stderr)
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = one_line
        yield
