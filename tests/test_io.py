"""Tests for contextlab.io and contextlab.figures: atomic files, staged folders, PNGs.

A write that raises or is killed must leave the old file (or folder) exactly as it was and
no half-written target; a written file gets the mode a plain ``open()`` would give it, and
the process umask is never touched to find that mode.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import pytest

from contextlab import io as cio
from contextlab import outputs
from contextlab.errors import UserError
from contextlab.figures import pyplot, save_png
from tests.conftest import write_tree


@pytest.fixture
def no_umask(monkeypatch):
    """Fail the test if anything calls os.umask (reading it means setting it)."""

    def umask(mask):
        raise AssertionError(f"os.umask({mask:o}) was called")

    monkeypatch.setattr(os, "umask", umask)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _names(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002, 0o000])
def test_atomic_write_gives_the_mode_of_a_plain_open(tmp_path, mask):
    script = textwrap.dedent(
        f"""
        import os, stat
        from pathlib import Path
        os.umask({mask})
        import contextlab.io as cio
        import contextlab.outputs as outputs
        def fail(m):
            raise AssertionError("umask called")
        os.umask = fail
        d = Path({str(tmp_path)!r})
        with open(d / "plain", "wb") as f:
            f.write(b"x")
        cio.atomic_write_bytes(d / "atomic", b"x")
        cio.atomic_write_bytes(d / "atomic", b"again")  # replacing a file: still the default mode
        with outputs.staged_dir(d / "folder", overwrite=False, kind=outputs.ANY_FOLDER) as tmp:
            (tmp / "f").write_bytes(b"x")
        (d / "plain_dir").mkdir()
        mode = lambda name: oct(stat.S_IMODE((d / name).stat().st_mode))
        print(mode("plain"), mode("atomic"))
        print(mode("plain_dir"), mode("folder"))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    (plain, atomic), (plain_dir, folder) = (line.split() for line in out.splitlines())
    assert atomic == plain == oct(0o666 & ~mask)
    assert folder == plain_dir == oct(0o777 & ~mask)


def test_atomic_write_never_touches_the_umask(tmp_path, no_umask):
    before = open("/proc/self/status").read() if os.path.exists("/proc/self/status") else ""
    cio.atomic_write_json(tmp_path / "a" / "b.json", {"x": 1})
    assert (tmp_path / "a" / "b.json").read_text() == '{\n  "x": 1\n}\n'
    with open(tmp_path / "plain", "w") as f:
        f.write("x")
    assert _mode(tmp_path / "a" / "b.json") == _mode(tmp_path / "plain")
    if before:
        umask = [ln for ln in before.splitlines() if ln.startswith("Umask:")]
        after = [ln for ln in open("/proc/self/status").read().splitlines() if ln.startswith("Umask:")]
        assert umask == after


def test_a_write_that_raises_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "f.txt"
    cio.atomic_write_text(target, "old")

    def broken_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        cio.atomic_write_text(target, "new " * 10_000)
    assert target.read_text() == "old"
    assert _names(tmp_path) == ["f.txt"]  # the temporary file was removed


def test_a_killed_write_leaves_the_old_file(tmp_path):
    """SIGKILL after the data is written but before the rename: the target keeps its old bytes."""
    target = tmp_path / "f.bin"
    cio.atomic_write_bytes(target, b"old")
    script = textwrap.dedent(
        f"""
        import os, signal
        import contextlab.io as cio
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
        cio.atomic_write_bytes({str(target)!r}, b"new" * 100_000)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script])
    assert proc.returncode == -9
    assert target.read_bytes() == b"old"
    leftovers = [n for n in _names(tmp_path) if n != "f.bin"]
    assert all(n.startswith(".f.bin.") and n.endswith(".tmp") for n in leftovers)  # hidden, never the target


def test_staged_dir_swaps_the_folder_whole(tmp_path):
    out = tmp_path / "export"
    with outputs.staged_dir(out, overwrite=False, kind=outputs.ANY_FOLDER) as tmp:
        assert tmp.parent == tmp_path and tmp.is_dir() and not out.exists()
        (tmp / "a.txt").write_text("1")
    record = [outputs.WRITTEN]  # what it wrote, with digests: a later --overwrite knows a changed file
    assert _names(out) == record + ["a.txt"] and _names(tmp_path) == ["export"]
    with outputs.staged_dir(out, overwrite=True, kind=outputs.ANY_FOLDER) as tmp:
        (tmp / "b.txt").write_text("2")
    assert _names(out) == record + ["b.txt"] and _names(tmp_path) == ["export"]  # the old files are gone


def test_staged_dir_that_raises_leaves_the_old_folder(tmp_path):
    out = tmp_path / "export"
    out.mkdir()
    (out / "old.txt").write_text("keep")
    with (
        pytest.raises(RuntimeError, match="boom"),
        outputs.staged_dir(out, overwrite=True, kind=outputs.ANY_FOLDER) as tmp,
    ):
        (tmp / "half.txt").write_text("half")
        raise RuntimeError("boom")
    assert _names(out) == ["old.txt"] and (out / "old.txt").read_text() == "keep"
    assert _names(tmp_path) == ["export"]  # the staged folder was deleted


def test_staged_dir_refuses_a_non_empty_folder(tmp_path):
    out = tmp_path / "export"
    out.mkdir()
    # an empty one may be filled
    with outputs.staged_dir(out, overwrite=False, kind=outputs.ANY_FOLDER) as tmp:
        (tmp / "a").write_text("a")
    with (
        pytest.raises(UserError, match="export folder .* already exists and is not empty"),
        outputs.staged_dir(out, overwrite=False, what="export folder", kind=outputs.ANY_FOLDER),
    ):
        pass
    assert _names(out) == [outputs.WRITTEN, "a"] and _names(tmp_path) == ["export"]


def test_overwrite_replaces_only_the_writers_own_kind_of_folder(tmp_path):
    """An ``OutputKind`` says what a writer's output looks like: a folder of anything else is refused
    with and without overwrite, by ``staged_dir`` up front and by ``replace_dir`` at the swap; an empty
    folder and one of the writer's own kind are taken."""
    thing = outputs.OutputKind("a thing", lambda p: (p / "mine.json").is_file(), ("mine.json", "plot.*"))
    user = write_tree(tmp_path / "user", {"notes.txt": "keep", "thesis/ch1.tex": "keep"})
    for overwrite in (False, True):
        with (
            pytest.raises(
                UserError, match="holds notes.txt, thesis and is not a thing; --overwrite replaces only"
            ),
            outputs.staged_dir(user, overwrite=overwrite, kind=thing),
        ):
            raise AssertionError("the block must not run")
        src = write_tree(tmp_path / f"new{overwrite}", {"mine.json": "{}"})
        with pytest.raises(UserError, match="is not a thing"):
            outputs.replace_dir(src, user, overwrite=overwrite, kind=thing)
        assert (src / "mine.json").is_file()  # the new folder is left where it was
    assert (user / "notes.txt").read_text() == "keep" and (user / "thesis" / "ch1.tex").read_text() == "keep"
    own_kind = write_tree(tmp_path / "own", {"mine.json": "old", "plot.png": "old"})
    with outputs.staged_dir(own_kind, overwrite=True, kind=thing) as tmp:
        (tmp / "mine.json").write_text("new")
    assert (
        _names(own_kind) == [outputs.WRITTEN, "mine.json"] and (own_kind / "mine.json").read_text() == "new"
    )
    (tmp_path / "empty").mkdir()
    with outputs.staged_dir(tmp_path / "empty", overwrite=False, kind=thing) as tmp:
        (tmp / "mine.json").write_text("1")
    assert _names(tmp_path / "empty") == [outputs.WRITTEN, "mine.json"]


def test_overwrite_keeps_a_users_files_put_into_an_output_of_its_kind(tmp_path):
    """A folder of the writer's own kind that also holds something contextlab does not write there (a
    user's notes, a folder of analyses) is refused, with and without overwrite, and left as it was."""
    thing = outputs.OutputKind("a thing", lambda p: (p / "mine.json").is_file(), ("mine.json", "plot.*"))
    out = write_tree(
        tmp_path / "out", {"mine.json": "old", "plot.png": "p", "my_notes.txt": "keep", "a/b": "k"}
    )
    for overwrite in (False, True):
        with (
            pytest.raises(UserError, match=r"is a thing but also holds a, my_notes.txt, which contextlab"),
            outputs.staged_dir(out, overwrite=overwrite, kind=thing),
        ):
            raise AssertionError("the block must not run")
        src = write_tree(tmp_path / f"new{overwrite}", {"mine.json": "{}"})
        with pytest.raises(UserError, match="move them out first"):
            outputs.replace_dir(src, out, overwrite=overwrite, kind=thing)
    assert _names(out) == ["a", "mine.json", "my_notes.txt", "plot.png"]
    assert (out / "my_notes.txt").read_text() == "keep" and (out / "mine.json").read_text() == "old"


def test_open_partial_resumes_restarts_or_refuses(tmp_path):
    out = tmp_path / "store"
    has_work = lambda folder, old: (folder / "work").exists()
    partial, record = cio.open_partial(
        out, {"fingerprint": "A", "pos": 0}, overwrite=False, has_work=has_work, what="job"
    )
    assert partial == tmp_path / "store.partial" == cio.partial_dir(out)
    assert record == {"fingerprint": "A", "pos": 0}
    cio.atomic_write_json(partial / "progress.json", {"fingerprint": "A", "pos": 7})
    (partial / "work").write_text("done")
    # the same fingerprint resumes: the record and the work stay
    again = cio.open_partial(
        out, {"fingerprint": "A", "pos": 0}, overwrite=False, has_work=has_work, what="job"
    )
    assert again == (partial, {"fingerprint": "A", "pos": 7}) and (partial / "work").exists()
    # another fingerprint over finished work needs overwrite
    with pytest.raises(
        UserError, match=r"store.partial holds an unfinished job; delete it or pass --overwrite"
    ):
        cio.open_partial(out, {"fingerprint": "B"}, overwrite=False, has_work=has_work, what="job")
    assert (partial / "work").exists()
    _, record = cio.open_partial(out, {"fingerprint": "B"}, overwrite=True, has_work=has_work, what="job")
    assert record == {"fingerprint": "B"} and _names(partial) == ["progress.json"]
    # no work (or an unreadable record): started afresh without asking
    (partial / "progress.json").write_text("{torn")
    _, record = cio.open_partial(out, {"fingerprint": "C"}, overwrite=False, has_work=has_work, what="job")
    assert record == {"fingerprint": "C"}


def test_save_png_writes_and_closes(tmp_path):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    path = save_png(fig, tmp_path / "p.png", dpi=50)
    assert path == tmp_path / "p.png"
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 500
    assert fig.number not in plt.get_fignums()
    assert plt.get_backend().lower() == "agg"


def test_save_png_that_fails_leaves_the_old_png(tmp_path):
    plt = pyplot()
    target = tmp_path / "p.png"
    target.write_bytes(b"old png")
    fig, _ = plt.subplots()

    def broken(*args, **kwargs):
        raise ValueError("cannot render")

    fig.savefig = broken
    with pytest.raises(ValueError, match="cannot render"):
        save_png(fig, target)
    assert target.read_bytes() == b"old png" and _names(tmp_path) == ["p.png"]
    assert fig.number not in plt.get_fignums()  # closed even though it failed


def test_exclusive_lock_refuses_a_second_writer_and_names_the_holder(tmp_path):
    import time

    from contextlab.io import exclusive_lock

    lock = tmp_path / "run" / ".lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from contextlab.io import exclusive_lock\n"
            f"with exclusive_lock({str(lock)!r}, 'x'):\n"
            "    print('held', flush=True); time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        refused = rf"run directory R is being written by pid {holder.pid} "
        with pytest.raises(UserError, match=refused), exclusive_lock(lock, "run directory R"):
            pass
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 10
    while True:  # the kernel drops a killed holder's lock: the next writer gets it
        try:
            with exclusive_lock(lock, "run directory R"):
                break
        except UserError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_exclusive_lock_leaves_no_lock_file_behind(tmp_path):
    """The holder deletes its lock file on the way out (a user's trial counted 55 hidden .NAME.lock files
    beside their outputs), also when the block raises; a killed holder's stale file is taken over and
    deleted; a writer that locked a file its predecessor deleted meanwhile locks the new one instead."""
    import fcntl

    from contextlab.io import exclusive_lock

    lock = tmp_path / ".out.lock"
    with exclusive_lock(lock, "x"):
        assert lock.is_file() and "pid" in lock.read_text()
    assert not lock.exists()
    with pytest.raises(RuntimeError, match="boom"), exclusive_lock(lock, "x"):
        raise RuntimeError("boom")
    assert not lock.exists()
    lock.write_text("pid 1 (a killed writer)")  # no process holds it: the next writer takes it over
    with exclusive_lock(lock, "x"):
        assert "a killed writer" not in lock.read_text()
    assert _names(tmp_path) == []
    real_flock, swapped = fcntl.flock, []

    def flock_after_a_swap(fd, op):  # between this writer's open and its lock the file was replaced
        if op & fcntl.LOCK_EX and not swapped:
            swapped.append(os.fstat(fd).st_ino)
            lock.unlink()
            lock.write_text("")
        return real_flock(fd, op)

    fcntl.flock = flock_after_a_swap
    try:
        with exclusive_lock(lock, "x"):
            assert os.stat(lock).st_ino != swapped[0]  # it holds the file that is there now
    finally:
        fcntl.flock = real_flock
    assert _names(tmp_path) == []


def test_names_made_beside_a_long_name_fit_and_are_the_same_every_time(tmp_path):
    """A legal 254-byte name (127 two-byte characters) plus ``.lock``, ``.partial`` or ``.<hex>.tmp``
    passed the 255-byte limit; ``sibling`` shortens the name (whole characters, and a hash of the
    whole name, so two long names sharing a start differ) only when it must."""
    name = "é" * 127
    target = tmp_path / name
    cio.atomic_write_bytes(target, b"x")  # through a temporary file beside it
    assert target.read_bytes() == b"x" and _names(tmp_path) == [name]
    other = tmp_path / ("é" * 126 + "e")
    for prefix, suffix in [(".", ".lock"), ("", ".partial")]:
        made = cio.sibling(target, prefix, suffix)
        assert made == cio.sibling(target, prefix, suffix) != cio.sibling(other, prefix, suffix)
        assert made.name.startswith(prefix + "é" * 100) and made.name.endswith(suffix)
        made.mkdir()  # a name the file system takes
    assert cio.partial_dir(target) == tmp_path / made.name
    assert cio.sibling(tmp_path / "short", ".", ".lock") == tmp_path / ".short.lock"
    assert cio.partial_dir(tmp_path / "short") == tmp_path / "short.partial"


def test_the_swap_alone_never_replaces_a_file_or_a_link(tmp_path):
    """``io.swap_in_dir`` (under every staged writer, and alone under the run's tokenizer copy) refuses a
    file or a link at the destination whatever its caller judged: the file stays, the new folder too."""
    src = tmp_path / "new"
    src.mkdir()
    (src / "a").write_text("a")
    user_file = tmp_path / "tokenizer"
    user_file.write_text("mine")
    link = tmp_path / "link"
    link.symlink_to(src)
    for dst in (user_file, link):
        with pytest.raises(UserError, match="not a folder"):
            cio.swap_in_dir(src, dst)
    assert user_file.read_text() == "mine" and link.is_symlink() and (src / "a").is_file()
    with pytest.raises(UserError, match="not a folder"), cio.staged_folder(user_file) as tmp:
        (tmp / "b").write_text("b")
    assert user_file.read_text() == "mine" and _names(tmp_path) == ["link", "new", "tokenizer"]


def test_a_refused_writer_leaves_no_empty_folders_it_made_for_its_lock(tmp_path, monkeypatch):
    """`data pack STORE_NOT_THERE --out bad/x` left an empty bad/: the folders made for the lock go with
    it when nothing was written into them; one the output was written into stays, and so does one that
    was there before."""
    from contextlab.io import exclusive_lock

    with pytest.raises(UserError), exclusive_lock(tmp_path / "bad" / "deeper" / ".x.lock", "x"):
        raise UserError("store not found")
    assert not (tmp_path / "bad").exists()
    with exclusive_lock(tmp_path / "good" / ".x.lock", "x"):
        (tmp_path / "good" / "x").mkdir()
    assert (tmp_path / "good" / "x").is_dir()
    with exclusive_lock(tmp_path / ".y.lock", "y"):
        pass
    assert tmp_path.is_dir()
    # a writer whose folder another writer's exit removes between its mkdir and its open makes it again
    import os

    real, calls = os.open, []

    def open_after_the_folder_went(path, *args):
        if not calls:
            calls.append(path)
            (tmp_path / "race").rmdir()
        return real(path, *args)

    monkeypatch.setattr(os, "open", open_after_the_folder_went)
    with exclusive_lock(tmp_path / "race" / ".z.lock", "z"):
        assert (tmp_path / "race" / ".z.lock").is_file()
    assert len(calls) == 1
