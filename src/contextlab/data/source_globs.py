"""File names and globs: what ``--include``/``--exclude`` match, and which files describe a corpus.

``glob_regex`` / ``globs_regex`` translate the globs every command takes (``**/`` any folders, ``*``
within one part; a glob without ``/`` matches a file's name at any depth; a trailing ``/`` everything
below), ``unmatched_globs`` says which of a command's globs matched nothing it should have (an
``--exclude tests`` meant for folders named ``tests``), and ``provenance_files`` / ``prose_excludes``
name a corpus's own notes (README, SOURCE, LICENSE, manifest) and files of records (JSON lines, CSV,
Parquet), which a folder read as prose leaves out. Trade-off: the globs are translated by hand rather
than by ``fnmatch`` or ``pathlib.PurePath.match``: neither gives ``**`` its any-depth meaning on the
Pythons contextlab supports, and one translation serves every command alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

EXCLUDED = "excluded by --include/--exclude"
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".json.gz")
# files that describe a corpus rather than belong to it (where it came from, its licence, its index),
# in any case and with any extension: README.md, SOURCE.txt, LICENSE, manifest.jsonl (``provenance_globs``)
PROVENANCE_NAMES = (
    "readme",
    "source",
    "sources",
    "license",
    "licence",
    "copying",
    "notice",
    "provenance",
    "manifest",
)


# files of records, not prose: a folder's index or its data in another form (manifest.jsonl, a CSV);
# a folder read as prose (a haystack, the profile's text) leaves them out with the provenance files
RECORD_GLOBS = [f"*{s}" for s in (*JSONL_SUFFIXES, ".csv", ".tsv", ".parquet", ".arrow")]


def prose_excludes() -> list[str]:
    """``--exclude`` globs that leave a folder's prose: no provenance files, no files of records."""
    return provenance_globs() + RECORD_GLOBS


def provenance_globs() -> list[str]:
    """``--exclude`` globs that leave out the provenance files of ``PROVENANCE_NAMES`` at any depth,
    in any case (``[Rr][Ee]...``), bare or with an extension (``SOURCE.txt``, ``LICENSE``)."""
    anycase = ["".join(f"[{c.upper()}{c}]" for c in name) for name in PROVENANCE_NAMES]
    return [g + tail for g in anycase for tail in ("", ".*")]


NOTE_SUFFIXES = ("", ".txt", ".md", ".rst", ".json", ".jsonl", ".csv", ".tsv", ".yaml", ".yml", ".html")


def provenance_files(rels: Iterable[str]) -> list[str]:
    """The paths of ``rels`` whose names say they describe the corpus (``PROVENANCE_NAMES``), bare or
    with the extension of a note or an index (``NOTE_SUFFIXES``: a code tree's ``source.py`` is code)."""
    pattern = globs_regex(provenance_globs())
    note = lambda rel: Path(rel).suffix.lower() in NOTE_SUFFIXES or "." not in rel.rsplit("/", 1)[-1]
    return [rel for rel in rels if pattern.match(rel) and note(rel)]


def exclude_globs(rels: list[str]) -> list[str]:
    """The fewest ``--exclude`` globs, in the names' own case, that leave out the files ``rels`` (by file
    name at any depth: ``SOURCE.*`` for SOURCE.txt, ``LICENSE`` for a bare LICENSE)."""
    globs = []
    for rel in rels:
        name = rel.rsplit("/", 1)[-1]
        stem = name.split(".", 1)[0]
        glob = stem if stem == name else f"{stem}.*"
        if glob not in globs:
            globs.append(glob)
    return globs


def globs_regex(patterns: list[str]) -> re.Pattern:
    """One regex matching a relative posix path against any of ``patterns``."""
    return re.compile("|".join(f"(?:{glob_regex(p)})" for p in patterns), re.S)


def glob_regex(pattern: str) -> str:
    """Translate a glob into a regex string: ``**/`` = any directories, ``*`` and ``?`` stay in one part.

    A pattern without ``/`` matches the file name at any depth (``*.py``); a trailing ``/``
    means everything below (``docs/`` = ``docs/**``).
    """
    pat = pattern.strip()
    if pat.endswith("/"):
        pat += "**"
    pat = pat.lstrip("/") if "/" in pat.rstrip("/") else "**/" + pat
    out, i = [], 0
    while i < len(pat):
        if pat.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pat.startswith("**", i):
            out.append(".*")
            i += 2
        elif pat[i] in "*?":
            out.append("[^/]*" if pat[i] == "*" else "[^/]")
            i += 1
        elif pat[i] == "[" and (j := pat.find("]", i + 2)) != -1:
            body = pat[i + 1 : j]
            body = ("^" + body[1:] if body[0] == "!" else body).replace("\\", "\\\\").replace("[", "\\[")
            out.append("[" + body + "]")  # a "[" inside is literal (the class "[[]" matches one)
            i = j + 1
        else:
            out.append(re.escape(pat[i]))
            i += 1
    return "".join(out) + r"\Z"


def unmatched_globs(kept, skipped, include: list[str], exclude: list[str]) -> list[str]:
    """A note per ``--include`` glob that matched no file, and per ``--exclude`` glob that matched none
    where a folder of that name exists: ``--exclude tests`` left all 1,847 files of Django's ``tests/``
    folders in, unseen (a glob matches files; one without ``/`` a file's name at any depth). ``kept``
    and ``skipped`` are ``walk``'s listing."""
    read = [rel for rel, _ in kept]
    every = read + [e["path"] for e in skipped]  # an --include of binary files matched them, skipped or not
    notes = []
    for flag, patterns in (("--include", include), ("--exclude", exclude)):
        for pattern in patterns:
            rx = globs_regex([pattern])
            if any(rx.match(rel) for rel in every):
                continue
            name = pattern.strip().strip("/")
            # a folder of that name whose files are still read (another glob may take them out already)
            folder = bool(name) and any(
                f"/{name}/" in f"/{rel}" for rel in (read if flag == "--exclude" else every)
            )
            if flag == "--exclude" and not folder:  # excluding what is not there: nothing to say
                continue
            pool = read if flag == "--exclude" else every
            top = any(rel.startswith(f"{name}/") for rel in pool)  # a folder of that name at the top
            fix = ""
            if folder and top:
                fix = (
                    f"; {name!r} is a folder here: {flag} '**/{name}/**' takes every folder of that name, "
                    f"'{name}/**' the one at the top"
                )
            elif folder:  # only deeper down: '{name}/**' would take nothing
                fix = f"; {name!r} is a folder here, below the top: {flag} '**/{name}/**' takes it"
            notes.append(
                f"note: {flag} {pattern!r} matched no file (a glob matches files' paths below the source; "
                f"one without '/' matches a file's name at any depth){fix}"
            )
    return notes
