"""The ``contextlab`` command: one program, subcommands are plain functions in a dict.

Each command is ``fn(argv: list[str]) -> int`` with its own argparse parser (so
``contextlab data ingest --help`` documents every option) and calls the Python API; the
API does the work. ``main`` picks the longest command name that prefixes the arguments.
A ``UserError`` becomes one line on stderr and exit code 2; anything else is a bug and
keeps its traceback. Output whose reader has gone (``contextlab data info STORE | head -1``)
is handled here once for every command: the rest of it goes to the null device, the command
finishes its work (an evaluation of several models writes every result file; the lines were a
view of them) and exits quietly with 141, the status of a writer stopped by SIGPIPE.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable

from contextlab.errors import UserError, memory_error_line

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


READER_GONE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose pipe's reader left


class _Output:
    """``sys.stdout`` or ``sys.stderr`` while a command runs: once its pipe's reader has gone, every
    later write goes to the null device instead of raising BrokenPipeError."""

    def __init__(self, stream):
        self.stream, self.gone = stream, False

    def write(self, text):
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self.lose()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self.lose()

    def lose(self) -> None:
        """Point the stream at the null device: its file descriptor when it has one (so what its buffer
        still holds, flushed again at exit, goes there too), else the stream object."""
        self.gone = True
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, self.stream.fileno())
            finally:
                os.close(null)
            self.stream.flush()
        except (OSError, ValueError, AttributeError):  # no descriptor (a test's capture): swap the object
            self.stream = open(os.devnull, "w", encoding="utf-8")  # kept open: it serves to the end

    def lose_if_closed(self) -> None:
        """``lose`` when the stream is a pipe nobody reads any more (poll reports an error on it)."""
        import select

        try:
            poll = select.poll()
            poll.register(self.stream.fileno(), select.POLLOUT)
            closed = any(event & select.POLLERR for _, event in poll.poll(0))
        except (OSError, ValueError, AttributeError):
            return
        if closed:
            self.lose()

    def __getattr__(self, name):
        return getattr(self.stream, name)


TERMINATED = 143  # 128 + SIGTERM


_TERMINATING = []  # set once SIGTERM came: whatever ends the command then, its status is 143


def _terminated(signum, frame) -> None:
    """SIGTERM (``timeout``, a scheduler, torchrun stopping its workers) as an exit that runs ``finally``
    blocks and context managers: one-writer locks are released and their files deleted, staged folders
    removed, as after Ctrl-C; the resumable state on disk is what a kill leaves either way."""
    _TERMINATING.append(signum)
    raise SystemExit(TERMINATED)


def main(argv: list[str] | None = None) -> int:
    """Run one command (see ``_usage``) and return its exit status. Run as the program itself (``argv``
    None), SIGTERM ends it through ``_terminated``."""
    if argv is None:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _terminated)
    streams = sys.stdout, sys.stderr
    out, err = _Output(sys.stdout), _Output(sys.stderr)
    sys.stdout, sys.stderr = out, err
    try:
        code = _main(argv)
        out.flush()  # here, not at exit: a reader that has gone is found while the guard holds
        err.flush()
    except BrokenPipeError:  # written around the guard (a stream's .buffer, sys.__stdout__)
        out.lose_if_closed()
        err.lose_if_closed()
        if not (out.gone or err.gone):
            raise  # some other pipe: a bug, with its traceback
        code = 0
    except Exception as exc:
        if not _TERMINATING:
            raise
        # the SystemExit of SIGTERM, raised inside a library's code, came out as another error (a
        # library that wraps what its callback raised): the command was still stopped by SIGTERM
        print(f"contextlab: terminated by SIGTERM ({type(exc).__name__} on the way out)", file=sys.stderr)
        code = TERMINATED
    finally:
        sys.stdout, sys.stderr = streams
    return READER_GONE if (out.gone or err.gone) and code == 0 else code


def _main(argv: list[str] | None) -> int:
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
    from contextlab import ray_engine

    try:
        try:
            return int(fn(argv) or 0)
        finally:
            ray_engine.shutdown()  # a Ray this command started ends here, where an interrupt is one line
    except UserError as exc:
        print(f"contextlab {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # a run knows whether it has a checkpoint to resume from
        again = f": {exc.rerun}" if hasattr(exc, "rerun") else _again(name)
        if _first_process():
            print(f"\ncontextlab {name}: interrupted; run the same command again{again}", file=sys.stderr)
        return 130
    except SystemExit as exc:  # SIGTERM (a scheduler, `timeout`): said as Ctrl-C is (it ended in silence)
        if _TERMINATING and _first_process():
            again = f"; run the same command again: {exc.rerun}" if hasattr(exc, "rerun") else ""
            print(f"\ncontextlab {name}: terminated (SIGTERM){again}", file=sys.stderr)
        raise
    except Exception as exc:  # a file-system error from any layer (OSError, or a library's own type)
        line = disk_error_line(exc) or memory_error_line(exc, name)
        if line is None:
            raise
        print(f"contextlab {name}: error: {line}", file=sys.stderr)
        return 2


# commands whose half-done work a rerun picks up (parts, shards, checkpoints, finished steps); the
# others write their results whole at the end, so a rerun starts over and nothing half-done is left
RESUMES = {
    "quickstart",
    "data ingest",
    "data pack",
    "data export",
    "train",
    "sweep",
    "optimal-context",
    "profile",
}


def _first_process() -> bool:
    """Whether this process speaks for the command: not a worker of rank > 0 under torchrun, whose
    stop line repeated rank 0's once per process."""
    return os.environ.get("RANK", "0") == "0"


def _again(name: str) -> str:
    """What running ``name`` again does after an interrupt, as the end of its line."""
    return " to resume" if name in RESUMES else " (it starts over; nothing half-done was kept)"


# how libraries that are not Python's io report these errors (safetensors, torch.save: the OS's text)
_TEXT_ERRNO = {
    "No space left on device": errno.ENOSPC,
    "os error 28": errno.ENOSPC,
    "Disk quota exceeded": errno.EDQUOT,
    "Read-only file system": errno.EROFS,
    "os error 30": errno.EROFS,
    "File too large": errno.EFBIG,
    "os error 27": errno.EFBIG,
}


def disk_error_line(exc: BaseException) -> str | None:
    """One line for the file-system errors any writer can meet (a full disk, a read-only one, a
    file-size limit, a folder it may not write, a name too long); None for others, which stay
    tracebacks (they are bugs to report).
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
    if code == errno.EFBIG:  # SIGXFSZ is ignored (Python does that at start), so the write fails instead
        return (
            f"file too large for this filesystem or `ulimit -f` while writing {where}; raise the limit "
            "(`ulimit -f unlimited`) or write to a disk without one (not FAT32), then run the same command "
            "again (nothing half-written is kept as a result)"
        )
    if code == errno.ENAMETOOLONG:
        return f"a name in the path {where} is too long for this file system; choose a shorter name"
    if code == errno.EROFS:
        return f"{where} is on a read-only file system; write the output to a folder on a disk you can write"
    if code in (errno.EACCES, errno.EPERM):
        return f"permission denied for {where}; fix its permissions or write to a folder you can write"
    return None


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
