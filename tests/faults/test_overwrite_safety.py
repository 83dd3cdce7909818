"""Nothing a user made is deleted by a writer, with or without ``--overwrite`` (Robustness II, items 1-2).

Through the command line, for the four writers that replace a folder (ingest, pack, data export,
model export):

- a sibling ``OUT.old`` (a folder with a file in it, or a plain file) survives ``--overwrite``, and
  the new result is in place;
- an ``--out`` that is a regular file is refused in one line and left as it was;
- an ``--out`` that is, contains or lies inside an input of the command is refused in one line that
  does not suggest ``--overwrite``, and the input is left as it was.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from contextlab.cli import main
from contextlab.config import from_dict
from tests.conftest import write_tree
from tests.faults.projects import make_project


def tree_digest(path: Path) -> str:
    """A digest of every file's relative path and bytes under ``path`` (or of the file itself)."""
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        h.update(str(f.relative_to(path.parent)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A corpus, its byte store, an EP packed store and a one-step run, all made once."""
    return make_project(tmp_path_factory.mktemp("overwrite"), chars=20_000, parts=4)


def writer_args(project: Path, kind: str, out: Path) -> list[str]:
    return {
        "ingest": ["data", "ingest", str(project / "corpus"), "--out", str(out), "--no-progress"],
        "pack": [
            "data",
            "pack",
            str(project / "store"),
            "--method",
            "ep",
            "--context",
            "63",
            "--out",
            str(out),
        ]
        + ["--no-progress", "--val-fraction", "0"],  # 4 documents: holding one out would be said
        "data export": ["data", "export", str(project / "packed"), "--out", str(out), "--no-progress"],
        "export": ["export", str(project / "run"), "--out", str(out)],
    }[kind]


def made(kind: str, out: Path) -> bool:
    """Whether ``out`` holds what writer ``kind`` makes."""
    name = {"ingest": "meta.json", "pack": "meta.json", "data export": "export.json", "export": "config.json"}
    return (out / name[kind]).is_file()


WRITERS = ["ingest", "pack", "data export", "export"]


@pytest.mark.parametrize("kind", WRITERS)
@pytest.mark.parametrize("old_is", ["folder", "file"])
def test_overwrite_leaves_a_sibling_named_out_old(project, tmp_path, kind, old_is):
    out = tmp_path / "out"
    args = writer_args(project, kind, out)
    assert main(args) == 0 and made(kind, out)
    old = tmp_path / "out.old"
    if old_is == "folder":
        write_tree(old, {"keep.txt": "keep"})
    else:
        old.write_text("keep")
    before = tree_digest(old)
    assert main([*args, "--overwrite"]) == 0
    assert made(kind, out)
    assert old.exists() and tree_digest(old) == before  # the user's OUT.old is untouched
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))
    assert left == ["out", "out.old"]  # nothing else left behind (some writers keep a lock file)


@pytest.mark.parametrize("kind", WRITERS)
def test_an_out_that_is_a_file_is_refused_and_kept(project, tmp_path, kind, capsys):
    out = tmp_path / "out"
    out.write_text("my notes")
    assert main([*writer_args(project, kind, out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file, not a folder" in err[0] and str(out) in err[0]
    assert out.read_text() == "my notes"
    assert not (tmp_path / "out.partial").exists()


FOREIGN = [  # (writer, what is at its --out): never that writer's own kind of output
    (kind, foreign)
    for kind in WRITERS
    for foreign in ("user folder", "run", "token store")
    if (kind, foreign) != ("ingest", "token store")  # ingest's own output: what its --overwrite replaces
]


@pytest.mark.parametrize("kind, foreign", FOREIGN)
def test_overwrite_never_replaces_a_folder_of_another_kind(project, tmp_path, kind, foreign, capsys):
    """--overwrite replaces only the command's own output: a folder of the user's files, a training run
    or a token store (another command's output) at --out is refused in one line, with and without it,
    and left byte for byte as it was (a user's trial found all four writers deleting such folders)."""
    import shutil

    out = tmp_path / "out"
    if foreign == "user folder":
        write_tree(out, {"notes.txt": "keep", "thesis/ch1.tex": "keep"})
    else:
        shutil.copytree(project / {"run": "run", "token store": "store"}[foreign], out)
    before = tree_digest(out)
    for extra in ([], ["--overwrite"]):
        assert main([*writer_args(project, kind, out), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--overwrite replaces only" in err[0] and str(out) in err[0], err
        assert tree_digest(out) == before
    assert not (tmp_path / "out.partial").exists()


OVERLAPS = [  # (writer, where --out goes, relative to the project, the input that must survive)
    ("ingest", "corpus", "corpus"),  # is the corpus
    ("ingest", "corpus/sub", "corpus"),  # lies inside it
    ("ingest", ".", "corpus"),  # contains it
    ("pack", "store", "store"),
    ("pack", "store/packed", "store"),
    ("data export", "store", "store"),  # the packed store's token store
    ("data export", "packed", "packed"),
    ("export", "run", "run"),
    ("export", "run/hf", "run"),
]


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("kind, out, kept", OVERLAPS)
def test_an_out_that_overlaps_an_input_is_refused(project, kind, out, kept, overwrite, capsys):
    before = tree_digest(project / kept)
    args = writer_args(project, kind, project / out) + (["--overwrite"] if overwrite else [])
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "which this command reads" in err[0], err
    assert "--overwrite" not in err[0]
    assert tree_digest(project / kept) == before
    assert not (project / f"{Path(out).name}.partial").exists()


def test_a_folder_replaced_by_overwrite_is_gone_whole(project, tmp_path):
    """The replaced folder is deleted (it was the command's own output, with the files other commands
    add to it: pack-stats' record and plot), and nothing hidden stays."""
    out = tmp_path / "packed"
    args = writer_args(project, "pack", out)
    assert main(args) == 0
    assert main(["data", "pack-stats", str(out)]) == 0 and (out / "pack_stats.json").is_file()
    assert main([*args, "--overwrite"]) == 0
    assert not (out / "pack_stats.json").exists() and made("pack", out)
    assert [
        p.name for p in tmp_path.iterdir() if p.name.startswith(".") and not p.name.endswith(".lock")
    ] == []


def kind_of(writer: str):
    from contextlab.data.export import EXPORT as DATA_EXPORT
    from contextlab.data.packing.pack import PACKED
    from contextlab.data.store_write import STORE
    from contextlab.models.hf.custom_code import EXPORT

    return {"ingest": STORE, "pack": PACKED, "data export": DATA_EXPORT, "export": EXPORT}[writer]


def add_derived(project: Path, writer: str, out: Path) -> None:
    """What other commands add to a writer's output: data info's plot and cache, pack-stats' files, and
    `contextlab report`'s page of a store or a packed store (a user's --overwrite after a report was
    refused: "holds report.html, which contextlab does not write there")."""
    if writer in ("ingest", "pack"):
        assert main(["report", str(out)]) == 0 and (out / "report.html").is_file()
    if writer == "ingest":
        assert main(["data", "info", str(out)]) == 0 and (out / "doc_lengths.png").is_file()
    elif writer == "pack":
        assert main(["data", "pack-stats", str(out)]) == 0 and (out / "pack_stats.png").is_file()


@pytest.mark.parametrize("kind", WRITERS)
def test_every_entry_a_command_writes_is_its_kinds_own(project, tmp_path, kind):
    """The names each writer (and the commands that add to its output) writes are all its kind's own
    entries, so --overwrite of an untouched output is never refused."""
    out = tmp_path / "out"
    assert main(writer_args(project, kind, out)) == 0
    add_derived(project, kind, out)
    assert kind_of(kind).strangers(out) == []
    assert main([*writer_args(project, kind, out), "--overwrite"]) == 0 and made(kind, out)


@pytest.mark.parametrize("kind", WRITERS)
def test_overwrite_keeps_a_users_files_inside_an_output(project, tmp_path, kind, capsys):
    """A user's notes or folder put into a store, a packed store or an export are never deleted by
    --overwrite (a user's trial lost both): refused in one line naming them, the folder byte for byte
    as it was, nothing staged left behind."""
    out = tmp_path / "out"
    assert main(writer_args(project, kind, out)) == 0
    write_tree(out, {"my_notes.txt": "keep", "analysis/a.txt": "keep"})
    before = tree_digest(out)
    assert main([*writer_args(project, kind, out), "--overwrite"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "also holds analysis, my_notes.txt, which contextlab does not write" in err[0]
    assert tree_digest(out) == before
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["out"]


def test_replace_dir_puts_the_old_folder_back_when_the_new_one_cannot_move_in(tmp_path, monkeypatch):
    from contextlab import io as cio
    from contextlab import outputs

    dst = write_tree(tmp_path / "out", {"old.txt": "old"})
    src = write_tree(tmp_path / "new", {"new.txt": "new"})
    real = os.replace

    def failing(a, b):
        if Path(a) == src:
            raise OSError(28, "No space left on device")
        return real(a, b)

    monkeypatch.setattr(cio.os, "replace", failing)
    with pytest.raises(OSError):
        outputs.replace_dir(src, dst, overwrite=True, kind=outputs.ANY_FOLDER)
    assert (dst / "old.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "out"]


@pytest.mark.parametrize("kind", WRITERS)
def test_a_second_writer_of_one_out_is_refused_naming_the_first(project, tmp_path, kind, capsys):
    """Every writer takes the one-writer lock of its --out (a second data export used to interleave its
    files with the first's); the second is refused in one line that names the holder."""
    from contextlab.data.store import output_lock

    out = tmp_path / "out"
    with output_lock(out, "test holder"):  # another process's lock: flock conflicts across open files
        assert main(writer_args(project, kind, out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is being written by pid" in err[0], err
    assert not out.exists()
    assert main(writer_args(project, kind, out)) == 0 and made(kind, out)  # free again afterwards


def test_eval_with_an_out_that_is_a_file_is_refused_before_evaluating(project, tmp_path, capsys):
    """Robustness II item 9: eval --out FILE ended in FileExistsError after the evaluation had run."""
    out = tmp_path / "results"
    out.write_text("my notes")
    args = ["eval", "contextwise", "--model", str(project / "run"), "--data", str(project / "store")]
    assert main([*args, "--out", str(out), "--max-docs", "1", "--length", "32"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a file, not a folder" in err[0]
    assert out.read_text() == "my notes"


@pytest.mark.parametrize("kind", WRITERS)
def test_a_killed_writers_staging_folder_is_removed_by_the_next_run(project, tmp_path, kind):
    """Robustness II item 17: a model export killed while staging left .NAME.<hex>.tmp for good. The
    next writer of that --out, holding its lock, removes what a killed one left; a look-alike the
    user made stays."""
    out = tmp_path / "out"
    write_tree(tmp_path / ".out.0badf00d.tmp", {"half.bin": "x"})
    write_tree(tmp_path / ".out.12345678.replaced", {"out/old.txt": "x"})
    write_tree(tmp_path / ".out.my-notes.tmp", {"keep.txt": "keep"})
    assert main(writer_args(project, kind, out)) == 0 and made(kind, out)
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))
    assert left == [".out.my-notes.tmp", "out"]


def test_a_second_evaluation_into_one_folder_is_refused_naming_the_first(project, tmp_path, capsys):
    """Robustness II item 3 for eval: two evaluations writing one folder could interleave their files."""
    from contextlab.data.store import output_lock

    out = tmp_path / "ev"
    args = ["eval", "contextwise", "--model", str(project / "run"), "--data", str(project / "store")]
    with output_lock(out, "test holder"):
        assert main([*args, "--out", str(out), "--max-docs", "1", "--length", "32"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is being written by pid" in err[0], err
    assert not (out / "contextwise.json").exists()
    assert main([*args, "--out", str(out), "--max-docs", "1", "--length", "32"]) == 0


@pytest.mark.parametrize("kind", WRITERS)
def test_an_out_name_of_up_to_255_bytes_is_written_locked_and_cleaned_up(project, tmp_path, kind, capsys):
    """A legal --out name of 248-255 bytes ended in "File name too long": the lock file ``.OUT.lock``,
    the staging folders ``.OUT.<hex>.tmp`` and ``OUT.partial`` beside it were longer than the 255-byte
    limit. Those names now shorten OUT (its first bytes and a hash of the whole), the same for every
    writer, so the lock still excludes and a killed writer's leftovers are still found."""
    from contextlab.data.store import output_lock
    from contextlab.io import fresh_dir

    out = tmp_path / ("s" * 250)
    assert main(writer_args(project, kind, out)) == 0 and made(kind, out)
    killed = [fresh_dir(out, "tmp"), fresh_dir(out, "replaced")]  # what a killed writer leaves
    look_alike = fresh_dir(tmp_path / ("s" * 249 + "t"), "tmp")  # another long name's: not this writer's
    assert all(p.is_dir() and len(p.name) <= 255 for p in [*killed, look_alike])
    with output_lock(out, "test holder"):
        assert main([*writer_args(project, kind, out), "--overwrite"]) == 2
    assert "is being written by pid" in capsys.readouterr().err
    assert main([*writer_args(project, kind, out), "--overwrite"]) == 0 and made(kind, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, look_alike.name])
    longest = tmp_path / ("x" * 255)
    assert main(writer_args(project, kind, longest)) == 0 and made(kind, longest)


def test_an_evaluation_into_a_folder_named_with_255_bytes(project, tmp_path):
    out = tmp_path / ("v" * 255)
    args = ["eval", "contextwise", "--model", str(project / "run"), "--data", str(project / "store")]
    for again in ([], ["--overwrite"]):
        assert main([*args, "--out", str(out), "--max-docs", "1", "--length", "32", *again]) == 0
    assert (out / "contextwise.json").is_file() and [p.name for p in tmp_path.iterdir()] == [out.name]


def below_a_file(project: Path, kind: str, out: Path) -> list[str]:
    """The command line of ``kind`` writing to ``out`` (a path below a file)."""
    if kind in WRITERS:
        return writer_args(project, kind, out)
    run = str(project / "run")
    return {
        "eval": ["eval", "ppl", "--model", run, "--data", str(project / "store"), "--out", str(out)],
        "generate": ["generate", "--model", run, "--prompt", "a", "--max-new-tokens", "1", "--out", str(out)],
    }[kind]


@pytest.mark.parametrize("kind", [*WRITERS, "eval", "generate", "train"])
def test_an_out_below_a_file_is_one_line_not_a_traceback(project, tmp_path, kind, capsys):
    """A user's `--out afile/store` (afile a file) ended in a FileExistsError traceback in seven commands,
    generate's after generating; each is now one line before any work, and the file is kept."""
    afile = tmp_path / "afile"
    afile.write_text("my notes")
    if kind == "train":
        from contextlab.train.config import RunConfig
        from contextlab.train.trainer import train
        from tests.faults.projects import run_config

        with pytest.raises(Exception) as err:
            train(from_dict(RunConfig, run_config(project / "store", afile / "run")))
        assert str(err.value) == (
            f"train.out_dir {afile / 'run'}: {afile} is a file, not a folder; choose another "
            "train.out_dir (it is left as it is)"
        )
    else:
        assert main(below_a_file(project, kind, afile / "out")) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].endswith(
            f"{afile / 'out'}: {afile} is a file, not a folder; choose another --out (it is left as it is)"
        )
    assert afile.read_text() == "my notes"


@pytest.mark.parametrize("command", ["info", "pack-stats"])
def test_a_plot_path_that_is_not_a_png_is_refused_and_kept(project, tmp_path, command, capsys):
    """`data info STORE --plot STORE/tokens.bin` replaced the store's tokens with a PNG (and
    `pack-stats --plot PACKED/entries.npy` the pack's entries): a --plot that exists and is not a PNG
    is now refused before anything is read; an earlier plot is replaced."""
    folder = project / ("store" if command == "info" else "packed")
    victim = folder / ("tokens.bin" if command == "info" else "entries.npy")
    before = victim.read_bytes()
    assert main(["data", command, str(folder), "--plot", str(victim)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"contextlab data {command}: error: --plot {victim} exists and is not a PNG; choose another "
        "--plot (it is left as it is)"
    ]
    assert victim.read_bytes() == before
    png = tmp_path / "p.png"
    assert main(["data", command, str(folder), "--plot", str(png)]) == 0
    assert main(["data", command, str(folder), "--plot", str(png)]) == 0  # its own plot: replaced
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
