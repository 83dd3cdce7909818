"""Fault injection for ``contextlab data ingest``: SIGKILL at chosen points, a full disk, two writers.

Each kill test starts the real command in a subprocess that wraps one function (``KILLER``
below) so that the process SIGKILLs itself right before or right after the n-th call whose
arguments name a given file: mid-batch, after a committed batch, and before/after every step of
store finalization. The same command is then run again, and the store must equal an
uninterrupted ingest's byte for byte (tokens, offsets, documents; meta.json apart from its
timestamp), leave nothing behind, and pass ``contextlab data verify``.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys

import pytest

from contextlab.cli import main
from tests.conftest import REPO, shakespeare, write_tree

# Wraps MODULE:ATTR so that the process kills itself before/after the NTH call whose argument
# repr contains MATCH, then runs the CLI with the remaining arguments.
KILLER = r"""
import importlib, os, signal, sys
target, when, nth, match, *argv = sys.argv[1:]
mod_name, _, qual = target.partition(":")
owner = importlib.import_module(mod_name)
*path, name = qual.split(".")
for part in path:
    owner = getattr(owner, part)
real, calls = getattr(owner, name), [0]
def wrapper(*args, **kwargs):
    hit = match in repr(args) + repr(kwargs)
    calls[0] += hit
    fire = hit and calls[0] == int(nth)
    if fire and when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    out = real(*args, **kwargs)
    if fire and when == "after":
        os.kill(os.getpid(), signal.SIGKILL)
    return out
setattr(owner, name, wrapper)
from contextlab.cli import main
raise SystemExit(main(argv))
"""

STORE = "contextlab.data.store_write"
KILL_POINTS = {
    "before-the-first-batch": ("contextlab.data.ingest:atomic_write_json", "before", 1, "progress.json"),
    "mid-batch": (f"{STORE}:StoreWriter.add", "after", 25, ""),
    "after-a-commit": ("contextlab.data.ingest:atomic_write_json", "after", 4, "progress.json"),
    "after-finalize.json": ("os:replace", "after", 1, "finalize.json"),
    "before-offsets.npy": ("os:replace", "before", 1, "offsets.npy"),
    "after-offsets.npy": ("os:replace", "after", 1, "offsets.npy"),
    "in-content-hash": (f"{STORE}:content_hash", "before", 1, ""),
    "after-content-hash": (f"{STORE}:content_hash", "after", 1, ""),
    "before-meta.json": ("os:replace", "before", 1, "meta.json"),
    "after-meta.json": ("os:replace", "after", 1, "meta.json"),
    "after-offsets.i64-unlink": ("pathlib:Path.unlink", "after", 1, "offsets.i64"),
    "after-progress.json-unlink": ("pathlib:Path.unlink", "after", 1, "progress.json"),
    "after-finalize.json-unlink": ("pathlib:Path.unlink", "after", 1, "finalize.json"),
    "before-rename": (f"{STORE}:replace_dir", "before", 1, ""),
    "after-rename": (f"{STORE}:replace_dir", "after", 1, ""),
}


def _corpus(root):
    """About 1 MB of Tiny Shakespeare as 40 files in 4 folders."""
    text = shakespeare()
    n = len(text) // 40
    return write_tree(root, {f"d{i % 4}/part{i:02d}.txt": text[i * n : (i + 1) * n] for i in range(40)})


def _args(src, out) -> list[str]:
    return ["data", "ingest", str(src), "--out", str(out), "--tokenizer", "byte", "--batch-mb", "0.03"]


def _run_killed(point: str, argv: list[str]) -> subprocess.CompletedProcess:
    target, when, nth, match = KILL_POINTS[point]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "-c", KILLER, target, when, str(nth), match, *argv, "--no-progress"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def _same_store(got, ref) -> None:
    """Equal files byte for byte; meta.json equal apart from the timestamp."""
    assert sorted(p.name for p in got.iterdir()) == sorted(p.name for p in ref.iterdir())
    for name in ("tokens.bin", "offsets.npy", "docs.jsonl", "config.toml"):
        assert (got / name).read_bytes() == (ref / name).read_bytes(), name
    metas = [json.loads((d / "meta.json").read_text()) for d in (got, ref)]
    for meta in metas:
        meta.pop("created")
    assert metas[0] == metas[1]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The corpus and an uninterrupted ingest of it."""
    root = tmp_path_factory.mktemp("ingest_faults")
    src = _corpus(root / "corpus")
    assert main(_args(src, root / "ref") + ["--no-progress"]) == 0
    return src, root / "ref"


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_ingest_killed_anywhere_resumes_to_the_same_store(point, reference, tmp_path, capsys):
    src, ref = reference
    out = tmp_path / "store"
    argv = _args(src, out)
    killed = _run_killed(point, argv)
    assert killed.returncode == -signal.SIGKILL, f"the kill point was never reached:\n{killed.stderr}"
    assert main(argv + ["--no-progress"]) == 0, capsys.readouterr().err
    assert not out.with_name("store.partial").exists()
    _same_store(out, ref)
    assert main(["data", "verify", str(out)]) == 0
    assert main(argv + ["--no-progress"]) == 0 and "up to date" in capsys.readouterr().out


def test_ingest_on_a_full_disk_is_one_line_and_resumes(reference, tmp_path, monkeypatch, capsys):
    """ENOSPC in the middle of the data files: one line, the partial kept resumable (its uncommitted
    tail cut off), and the same command completes the store once there is space again."""
    import contextlab.data.store_write as store_mod

    src, ref = reference
    out = tmp_path / "store"
    real_add, calls = store_mod.StoreWriter.add, [0]

    def add_until_full(self, tokens, meta):
        calls[0] += 1
        if calls[0] == 25:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_add(self, tokens, meta)

    monkeypatch.setattr(store_mod.StoreWriter, "add", add_until_full)
    assert main(_args(src, out) + ["--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no space left" in err.lower() and "run the same command" in err
    partial = out.with_name("store.partial")
    record = json.loads((partial / "progress.json").read_text())
    assert (partial / "tokens.bin").stat().st_size == record["writer"]["n_tokens"] * 2  # tail cut off
    monkeypatch.undo()
    assert main(_args(src, out) + ["--no-progress"]) == 0
    _same_store(out, ref)


def test_full_disk_while_finalizing_is_one_line_and_resumes(reference, tmp_path, monkeypatch, capsys):
    import contextlab.io as io_mod

    src, ref = reference
    out = tmp_path / "store"
    real = io_mod.atomic_write_bytes

    def full(path, data):
        if str(path).endswith("meta.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(io_mod, "atomic_write_bytes", full)
    assert main(_args(src, out) + ["--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no space left" in err.lower()
    assert not list(out.with_name("store.partial").glob(".*.tmp"))
    monkeypatch.undo()
    assert main(_args(src, out) + ["--no-progress"]) == 0
    _same_store(out, ref)


# Holds the first writer after its first progress record until the file GO exists.
PAUSER = r"""
import os, sys, time
import contextlab.data.ingest as ingest_mod
go, *argv = sys.argv[1:]
real = ingest_mod.atomic_write_json
def paused(path, obj):
    real(path, obj)
    print("paused", flush=True)
    deadline = time.time() + 120
    while not os.path.exists(go) and time.time() < deadline:
        time.sleep(0.02)
ingest_mod.atomic_write_json = paused
from contextlab.cli import main
raise SystemExit(main(argv))
"""


def test_second_ingest_into_the_same_out_is_refused_while_the_first_runs(reference, tmp_path):
    """A second writer exits at once with one line naming the first; the first finishes a correct store."""
    src, ref = reference
    out, go = tmp_path / "store", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    first = subprocess.Popen(
        [sys.executable, "-c", PAUSER, str(go), *_args(src, out), "--no-progress"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stdout.readline().strip() == "paused", first.stderr.read()
    second = subprocess.run(
        [sys.executable, "-m", "contextlab", *_args(src, out), "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    go.touch()
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert second.returncode == 2, second.stdout
    assert second.stderr.count("\n") == 1 and f"pid {first.pid}" in second.stderr, second.stderr
    _same_store(out, ref)


def test_pack_into_an_out_being_written_is_refused(reference, tmp_path):
    """``data pack`` holds the same one-writer lock on its --out as ingest does."""
    from contextlab.data.packing import pack
    from contextlab.data.store import output_lock
    from contextlab.errors import UserError

    _, ref = reference
    out = tmp_path / "packed"
    with output_lock(out, "packed store"), pytest.raises(UserError, match=f"packed store {out} is being"):
        pack(ref, out, progress=False)
    assert not out.exists() and not out.with_name("packed.partial").exists()


def test_packs_of_single_shards_may_share_an_out(reference, tmp_path):
    """``only_shards`` slices (many machines on one filesystem) run unlocked; assembling locks."""
    from contextlab.data.packing import PackConfig, pack
    from contextlab.data.store import output_lock

    _, ref = reference
    out = tmp_path / "packed"
    with output_lock(out, "packed store"):
        pack(ref, out, PackConfig(shards=2), only_shards=[1], progress=False)
    assert pack(ref, out, PackConfig(shards=2), progress=False).shards_resumed == 1
