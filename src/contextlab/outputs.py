"""Output folders and what a command may replace: the kinds of output, and the refusals.

A command writes its output into ``--out``, and ``--overwrite`` lets it replace an earlier one. Each
kind of output (a token store, a packed store, an export ...) is an ``OutputKind``: how a folder of
that kind is recognised, and the names contextlab writes at its top level. A command replaces only
its own kind holding nothing else; a file, a link, a folder of another kind and one holding a
user's files are refused in one line, with or without ``--overwrite``, before any work and again
before the swap (``staged_dir``, ``replace_dir``: the judgement; ``io`` does the swap); so is an
output that is, holds or lies inside what the command reads, and one inside a run's ``checkpoints/``
folder (``refuse_in_checkpoints``: training deletes all but its newest checkpoints, and whatever a
user put in them would go too). ``refuse_non_folder`` and ``refuse_overlap``, the first checks of
every writer, make that last check too.

Trade-off: a folder is judged by its top level only (the writers put a user's name nowhere deeper),
which keeps the check instant on a store of a million files but would miss a user's file put inside
a store's subfolder.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from contextlab import rundir
from contextlab.errors import UserError, some
from contextlab.io import staged_folder, swap_in_dir


def refuse_in_checkpoints(out: str | os.PathLike, flag: str = "--out", file: bool = False) -> None:
    """One line for an output that is or lies inside a run's ``checkpoints/`` folder: training keeps only
    its newest checkpoints (``train.keep_last``) and deletes the others whole, so results written there
    would be lost with them. A ``checkpoints`` folder is a run's when the folder above it holds the run's
    config.toml or metrics.jsonl, or it holds a checkpoint itself. A checkpoint folder elsewhere (one
    copied out of its run) is never pruned, so an output inside it passes. ``file``: ``out`` is a file
    (the suggestion then names a file too). Links are followed."""
    given = Path(out)
    path = given.resolve()
    chain = [path, *path.parents]
    at = (i for i, f in enumerate(chain) if f.name == rundir.CHECKPOINTS and _a_runs_checkpoints(f))
    i = next(at, None)
    if i is None:
        return
    folder = chain[i]
    shown = [given, *given.parents][i] if i <= len(given.parents) else folder
    if shown.name != folder.name:  # "..", a link: the lexical parents are not the resolved ones
        shown = folder
    instead = shown.parent / rundir.EVAL / given.name if file else shown.parent / rundir.EVAL
    how = "is" if i == 0 else "lies inside"
    raise UserError(
        f"{flag} {out} {how} {shown}, a run's checkpoints folder: training keeps only the newest checkpoints "
        f"(train.keep_last) and deletes the others with everything in them; choose an {flag} outside it, "
        f"e.g. {instead} (nothing was written)"
    )


def _a_runs_checkpoints(folder: Path) -> bool:
    """A ``checkpoints`` folder of a run: its run's config or metrics above it, or a checkpoint inside it."""
    run = folder.parent
    if (run / rundir.CONFIG).is_file() or (run / rundir.METRICS).is_file():
        return True
    return bool(rundir.list_checkpoints(run))


def earlier_result(path: str | os.PathLike, fmt: str, what: str) -> dict | None:
    """The JSON document at ``path`` that a command is about to replace: None when there is none, else
    the document when its ``format`` is ``fmt``; anything else there (a user's file, another kind of
    result) is one line naming ``what`` it is not, and is left as it is."""
    import json

    path = Path(path)
    if not (path.exists() or path.is_symlink()):
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = None
    if not path.is_file() or not isinstance(doc, dict) or doc.get("format") != fmt:
        raise UserError(
            f"{path} exists and is not {what}; move it away or give another --out (it is left as it is)"
        )
    return doc


def refuse_below_file(out: str | os.PathLike, flag: str = "--out") -> None:
    """One line for an output path below a file (``afile/store``): no folder can be made there, and the
    writer's ``mkdir`` would end in a traceback (``FileExistsError``), after its work for some."""
    given = Path(out)
    for parent in given.absolute().parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise UserError(
                    f"{flag} {given}: {parent} is a file, not a folder; choose another {flag} "
                    "(it is left as it is)"
                )
            return


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def is_png(path: str | os.PathLike) -> bool:
    """Whether the file at ``path`` starts as a PNG does (False: it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(PNG_MAGIC)) == PNG_MAGIC
    except OSError:
        return False


def refuse_plot_target(path: str | os.PathLike, flag: str = "--plot") -> None:
    """One line for a plot path that would replace something that is not a plot: an existing file that
    is not a PNG (a store's own tokens.bin, a user's notes: a user's ``--plot`` replaced both), a folder,
    a link, a path below a file, or one inside a run's checkpoints. An existing PNG is replaced, as a
    plot of the same name is (atomically)."""
    p = Path(path)
    refuse_in_checkpoints(p, flag, file=True)
    refuse_below_file(p, flag)
    if p.is_symlink() or p.is_dir():
        kind = "a link" if p.is_symlink() else "a folder"
        raise UserError(f"{flag} {p} is {kind}, not a PNG file; choose another {flag} (it is left as it is)")
    if p.exists() and not is_png(p):
        raise UserError(f"{flag} {p} exists and is not a PNG; choose another {flag} (it is left as it is)")


def refuse_non_folder(out: str | os.PathLike, flag: str = "--out") -> None:
    """One line for an output path that exists and is a file or a link (a writer never deletes one), that
    lies below a file (``refuse_below_file``), or that lies in a run's checkpoints folder
    (``refuse_in_checkpoints``)."""
    refuse_in_checkpoints(out, flag)
    refuse_below_file(out, flag)
    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        kind = "a link" if out.is_symlink() else "a file"
        raise UserError(f"{flag} {out} is {kind}, not a folder; choose another {flag} (it is left as it is)")


def refuse_results_out(out: str | os.PathLike, flag: str = "--out") -> None:
    """``refuse_non_folder``, and one line for a results folder that is, or lies inside, a token store or
    packed store: results written there mix with the store's own files (`analyze --out STORE` and
    `compare --out STORE` wrote into the store they read, and its `ingest --overwrite` was then refused)."""
    from contextlab.data.store_meta import CONTENT_KEYS, meta_format

    refuse_non_folder(out, flag)
    here = Path(out).absolute()
    for folder in [here, *here.parents]:
        fmt = meta_format(folder)
        if fmt in CONTENT_KEYS:  # a token or packed store
            how = "is" if folder == here else f"lies inside {folder}, which is"
            raise UserError(
                f"{flag} {out} {how} a {fmt.removeprefix('contextlab-').replace('-', ' ')}: results written "
                f"there would mix with its files; choose an {flag} outside it (nothing was written)"
            )


def refuse_unwritable(out: str | os.PathLike, given: bool, flag: str = "--out") -> None:
    """One line, before any work, when the output folder cannot be written: the nearest folder at or
    above it that exists is read-only (a read-only disk, also for root, or a folder without write
    permission). ``given``: ``out`` came from ``flag``, else it is the default beside the model."""
    here = Path(out).absolute()
    while not here.exists() and here != here.parent:
        here = here.parent
    if os.access(here, os.W_OK):
        return
    where = f"{flag} {out}" if given else f"the results' default folder {out} (beside the model)"
    try:
        read_only_fs = bool(os.statvfs(here).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs (Windows)
        read_only_fs = False
    why = "is on a read-only file system" if read_only_fs else "is not writable for this user"
    raise UserError(f"{where} cannot be written: {here} {why}; give {flag} DIR, a folder you can write")


@dataclass(frozen=True)
class OutputKind:
    """A kind of folder a command writes and its ``--overwrite`` may replace: ``name`` for messages ("a
    token store"), ``recognise(folder)`` whether a folder is one, and ``entries``, the patterns
    (``fnmatch``) of the names contextlab writes at its top level: the writer's files and what other
    commands add (a plot, a reader's cache). Anything else in such a folder is someone's own and is
    never deleted: the folder is then refused, as a folder of another kind is."""

    name: str
    recognise: Callable[[Path], bool]
    entries: tuple[str, ...] = ("*",)

    def strangers(self, folder: Path) -> list[str]:
        """The names at the top of ``folder`` that contextlab does not write in this kind of folder."""
        mine = lambda name: name == WRITTEN or any(fnmatch.fnmatchcase(name, p) for p in self.entries)
        return sorted(p.name for p in Path(folder).iterdir() if not mine(p.name))


ANY_FOLDER = OutputKind("a folder", lambda path: True)  # a folder that is the writer's by construction

WRITTEN = ".contextlab-written.json"  # in a staged folder: each top-level file written, with its digest


def file_digest(path: str | os.PathLike) -> str | None:
    """The first 16 hex digits of the sha256 of a file's bytes (None: it cannot be read)."""
    import hashlib

    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while block := fh.read(1 << 22):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()[:16]


def record_written(folder: Path) -> None:
    """Write FOLDER/.contextlab-written.json: each file at its top level with the first digits of its
    sha256, so a later ``--overwrite`` can tell a file changed since (a user's own weights saved into an
    export) from the writer's own."""
    import json

    files = {
        p.name: file_digest(p) for p in sorted(Path(folder).iterdir()) if p.is_file() and p.name != WRITTEN
    }
    from contextlab.io import atomic_write_text

    atomic_write_text(Path(folder) / WRITTEN, json.dumps(files, indent=1, sort_keys=True) + "\n")


def changed_since_written(folder: Path) -> list[str]:
    """The files FOLDER's record names whose bytes are not those written (empty without a record)."""
    import json

    try:
        files = json.loads((Path(folder) / WRITTEN).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(files, dict):
        return []
    return sorted(
        n for n, d in files.items() if (Path(folder) / n).is_file() and file_digest(Path(folder) / n) != d
    )


def refuse_foreign(out: str | os.PathLike, kind: OutputKind, flag: str = "--out") -> None:
    """``--overwrite`` replaces only the command's own kind of output: one line, with or without it, for
    an ``out`` that is a file, a link, a folder holding anything but ``kind``, or a folder of ``kind``
    that also holds something contextlab does not write there (``kind.strangers``: a user's notes put
    into a store). An empty folder, a missing one and a pure one of ``kind`` pass. Writers call it
    before their work starts (no minutes spent on an output that cannot be written) and
    ``replace_dir`` again before it swaps."""
    out = Path(out)
    refuse_non_folder(out, flag)
    if not out.is_dir():
        return
    names = sorted(p.name for p in out.iterdir())
    if not names:
        return
    if not kind.recognise(out):
        raise UserError(
            f"{flag} {out} holds {some(names)} and is not {kind.name}; --overwrite replaces only "
            f"{kind.name}, never other folders: choose another {flag} (nothing was changed)"
        )
    changed = changed_since_written(out)
    if changed:
        raise UserError(
            f"{flag} {out} is {kind.name} whose {some(changed)} changed since contextlab wrote "
            f"{'it' if len(changed) == 1 else 'them'} (a model saved into it?); --overwrite would replace "
            f"{'it' if len(changed) == 1 else 'them'}: move the folder or the files first, or choose another "
            f"{flag} (nothing was changed)"
        )
    strangers = kind.strangers(out)
    if rundir.EVAL in strangers and (out / rundir.EVAL).is_dir():  # contextlab eval's results of it
        raise UserError(
            f"{flag} {out} is {kind.name} that holds {rundir.EVAL}/, results of `contextlab eval` of it, "
            f"which --overwrite would delete with the folder: move {out / rundir.EVAL} out first or choose "
            f"another {flag} (nothing was changed)"
        )
    if strangers:
        them = "it" if len(strangers) == 1 else "them"
        raise UserError(
            f"{flag} {out} is {kind.name} but also holds {some(strangers)}, which contextlab does not write "
            f"there; --overwrite would replace the folder whole: move {them} out first or choose another "
            f"{flag} (nothing was changed)"
        )


def refuse_overlap(out: str | os.PathLike, inputs: Iterable, flag: str = "--out") -> None:
    """Refuse an output folder that is, contains or lies inside one of ``inputs`` (the paths the
    command reads; entries that are None or do not exist are skipped): writing it would replace
    or mix with what is being read. Links are followed on both sides. An output in a run's checkpoints
    folder is refused too (``refuse_in_checkpoints``)."""
    refuse_in_checkpoints(out, flag)
    refuse_below_file(out, flag)
    dst = Path(out).resolve()
    for item in inputs:
        if item is None or not str(item) or not Path(item).exists():
            continue
        src = Path(item).resolve()
        if dst == src:
            how = "is"
        elif src in dst.parents:
            how = "lies inside"
        elif dst in src.parents:
            how = "contains"
        else:
            continue
        raise UserError(f"{flag} {out} {how} {item}, which this command reads; choose an {flag} outside it")


def replace_dir(src: str | os.PathLike, dst: str | os.PathLike, *, overwrite: bool, kind: OutputKind) -> None:
    """Move the folder ``src`` to ``dst``; an existing folder ``dst`` is replaced only when ``overwrite``
    and only when it is empty or the command's own ``kind`` of output holding nothing but what
    contextlab writes there: anything else is refused either way (``refuse_foreign``). The swap itself
    is ``io.swap_in_dir``: at every instant either the old or the new folder is at ``dst``."""
    dst = Path(dst)
    if dst.exists() or dst.is_symlink():
        refuse_foreign(dst, kind)
        if not overwrite:
            raise UserError(f"{dst} already exists; choose another --out or pass --overwrite")
    swap_in_dir(src, dst)


@contextlib.contextmanager
def staged_dir(
    out: str | os.PathLike,
    *,
    overwrite: bool,
    what: str = "folder",
    kind: OutputKind,
) -> Iterator[Path]:
    """A new empty folder beside ``out`` to write into; it replaces ``out`` when the block ends.

    An ``out`` that exists and is not an empty folder is refused up front unless ``overwrite``
    (``what`` names it in the message), and even then unless it is the writer's own ``kind`` of
    output holding nothing else (``refuse_foreign``), which is checked once more just before the swap
    (a user may have put a file in it meanwhile). If the block raises, the staged folder is deleted
    and ``out`` is left as it was (``io.staged_folder``).
    """
    out = Path(out)
    refuse_non_folder(out, what)
    refuse_foreign(out, kind)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise UserError(
            f"{what} {out} already exists and is not empty; choose another folder or pass --overwrite"
        )
    with staged_folder(out) as tmp:
        yield tmp
        record_written(tmp)  # what was written: a later --overwrite knows a file changed since
        refuse_foreign(out, kind)
