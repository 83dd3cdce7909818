"""The ``contextlab`` command: one program, subcommands are plain functions in a dict.

Each command is ``fn(argv: list[str]) -> int`` with its own argparse parser (so
``contextlab data ingest --help`` documents every option) and calls the Python API; the
API does the work. ``main`` picks the longest command name that prefixes the arguments.
A ``UserError`` becomes one line on stderr and exit code 2; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable

from contextlab.errors import UserError

Command = Callable[[list[str]], int]


# command name -> "module:function"; a module is imported only when its command runs
COMMANDS: dict[str, str] = {
    "quickstart": "contextlab.cli.quickstart:cmd_quickstart",
    "data ingest": "contextlab.cli.data:cmd_ingest",
    "data info": "contextlab.cli.data:cmd_info",
    "data verify": "contextlab.cli.data:cmd_verify",
    "data pack": "contextlab.cli.pack:cmd_pack",
    "data pack-stats": "contextlab.cli.pack:cmd_pack_stats",
    "data export": "contextlab.cli.export_data:cmd_data_export",
    "data synthetic": "contextlab.cli.synthetic:cmd_synthetic",
    "train": "contextlab.cli.train:cmd_train",
    "export": "contextlab.cli.train:cmd_export",
    "peak": "contextlab.cli.train:cmd_peak",
    "eval": "contextlab.cli.eval:cmd_eval",
    "sweep": "contextlab.cli.sweep:cmd_sweep",
    "optimal-context": "contextlab.cli.optimal_context:cmd_optimal_context",
    "compare": "contextlab.cli.compare:cmd_compare",
    "profile": "contextlab.cli.profile:cmd_profile",
    "report": "contextlab.cli.report:cmd_report",
    "analyze entropy": "contextlab.cli.analyze:cmd_entropy",
    "analyze attention": "contextlab.cli.analyze:cmd_attention",
    "generate": "contextlab.cli.generate:cmd_generate",
}


def _resolve(target: str) -> Command:
    import importlib

    module, fn = target.split(":")
    return getattr(importlib.import_module(module), fn)


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [
        "usage: contextlab COMMAND [options]   (contextlab COMMAND --help for its options)",
        "",
        "Measure and improve how language models use their context.",
        "",
        "commands:",
    ]
    for name, target in COMMANDS.items():
        try:
            doc = _resolve(target).__doc__ or ""
        except (ImportError, AttributeError):
            continue  # a command whose optional parts are not installed
        summary = doc.strip().splitlines()[0] if doc.strip() else ""
        lines.append(f"  {name:<{width}}  {summary}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = COMMANDS
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("--version", "version"):
        from contextlab import __version__

        print(f"contextlab {__version__}")
        return 0
    for n_words in (3, 2, 1):
        name = " ".join(argv[:n_words])
        if len(argv) >= n_words and name in commands:
            return _run(_resolve(commands[name]), name, argv[n_words:])
    group = [c for c in commands if c.split()[0] == argv[0]]
    if group:
        print(
            f"contextlab {argv[0]}: choose one of: " + ", ".join(c.split(" ", 1)[1] for c in group),
            file=sys.stderr,
        )
        return 2
    print(
        f"contextlab: unknown command {argv[0]!r}; run `contextlab --help` to list commands", file=sys.stderr
    )
    return 2


def _run(fn: Command, name: str, argv: list[str]) -> int:
    try:
        return int(fn(argv) or 0)
    except UserError as exc:
        print(f"contextlab {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ncontextlab {name}: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    except Exception as exc:  # a file-system error from any layer (OSError, or a library's own type)
        line = disk_error_line(exc)
        if line is None:
            raise
        print(f"contextlab {name}: error: {line}", file=sys.stderr)
        return 2


# how libraries that are not Python's io report these errors (safetensors, torch.save: the OS's text)
_TEXT_ERRNO = {
    "No space left on device": errno.ENOSPC,
    "os error 28": errno.ENOSPC,
    "Disk quota exceeded": errno.EDQUOT,
    "Read-only file system": errno.EROFS,
    "os error 30": errno.EROFS,
}


def disk_error_line(exc: BaseException) -> str | None:
    """One line for the file-system errors any writer can meet (a full disk, a read-only one, a
    folder it may not write); None for others, which stay tracebacks (they are bugs to report).
    Every writer writes atomically or into a staging folder, so after any of these the earlier
    result is intact and the same command, run again, redoes or resumes what was cut short.
    Libraries with their own error types (safetensors, torch) are recognised by the OS's text."""
    code = exc.errno if isinstance(exc, OSError) else None
    if code is None:
        code = next((e for text, e in _TEXT_ERRNO.items() if text in str(exc)), None)
    where = (exc.filename if isinstance(exc, OSError) else None) or "its output"
    if code in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"no space left on the disk while writing {where}; free some space and run the same command "
            f"again (nothing half-written is kept as a result)"
        )
    if code == errno.EROFS:
        return f"{where} is on a read-only file system; write the output to a folder on a disk you can write"
    if code in (errno.EACCES, errno.EPERM):
        return f"permission denied for {where}; fix its permissions or write to a folder you can write"
    return None


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
