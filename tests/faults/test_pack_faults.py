"""Fault injection for ``contextlab data pack``: SIGKILL at chosen points, then the same command again.

Each case runs the command line in a subprocess through a small driver script that patches one
function of the packing code to kill its own process at a chosen point (mid-shard with a
half-written shard file, between shards, while writing the final arrays or meta.json, just before
the finished folder is renamed into place; and a pack with 2 worker processes whose parent is
killed once shards are under way). The rerun must finish, and its packed store must equal an
uninterrupted pack's: the same files, every array and config.toml byte for byte, meta.json equal
but for the timings it records. A killed parent must take its worker processes with it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contextlab.cli import main
from tests.conftest import REPO, process_alive, shakespeare, write_tree

DRIVER = '''
import os, signal, sys, time
from pathlib import Path
import importlib
packmod = importlib.import_module("contextlab.data.packing.pack")  # the package exports pack() as .pack
shards = importlib.import_module("contextlab.data.packing.shards")

POINT = sys.argv[1] if __name__ == "__main__" else os.environ["PACK_FAULT_POINT"]
os.environ["PACK_FAULT_POINT"] = POINT  # for the spawned workers, which import this file again


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def half_then_die(write, name):
    """Patch ``write(path, data)``: for ``name``, leave half of it in a temporary file and die."""
    def patched(path, data):
        path = Path(path)
        if path.name == name:
            blob = data if isinstance(data, bytes) else repr(data).encode()
            path.parent.mkdir(parents=True, exist_ok=True)
            (path.parent / f".{path.name}.dead.tmp").write_bytes(blob[: len(blob) // 2])
            die()
        return write(path, data)
    return patched


if POINT == "mid-shard":
    shards.atomic_write_bytes = half_then_die(shards.atomic_write_bytes, "shard_00001.npz")
elif POINT == "between-shards":
    write_shard = shards.write_shard
    def after_shard_1(path, *args):
        write_shard(path, *args)
        if Path(path).name == "shard_00001.npz":
            die()
    shards.write_shard = after_shard_1
elif POINT == "final-arrays":  # die inside the streamed write of seq_offsets.npy, after its first block
    write_npy = packmod.atomic_write_npy
    def dies_midway(path, dtype, shape, blocks):
        def dying(blocks=blocks):
            for i, block in enumerate(blocks):
                if i == 1:
                    die()
                yield block
        return write_npy(path, dtype, shape, dying() if Path(path).name == "seq_offsets.npy" else blocks)
    packmod.atomic_write_npy = dies_midway
elif POINT == "final-meta":
    packmod.atomic_write_json = half_then_die(packmod.atomic_write_json, "meta.json")
elif POINT == "final-rename":
    packmod.replace_dir = lambda *a, **k: die()
elif POINT == "workers" and __name__ == "__mp_main__":
    pack_shard = shards.pack_shard
    def slow_shard(*args, **kwargs):  # a worker: say who it is, then take a while
        Path(os.environ["PACK_FAULT_PIDS"], str(os.getpid())).write_text("")
        time.sleep(float(os.environ["PACK_FAULT_SLEEP"]))
        return pack_shard(*args, **kwargs)
    shards.pack_shard = slow_shard
elif POINT == "worker-dies" and __name__ == "__mp_main__":
    pack_shard = shards.pack_shard
    def dies_on_shard_2(store, cfg, index, *args, **kwargs):  # a worker killed from outside, mid-pack
        if index == 2:
            die()
        return pack_shard(store, cfg, index, *args, **kwargs)
    shards.pack_shard = dies_on_shard_2

if __name__ == "__main__":
    from contextlab.cli import main
    raise SystemExit(main(sys.argv[2:]))
'''

TIMINGS = ("seconds", "index_seconds")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pack_faults")
    text = shakespeare(60_000)
    files = {f"play{i % 4}/scene{i:02d}.txt": text[i * 1250 : (i + 1) * 1250] for i in range(48)}
    write_tree(root / "corpus", files)
    assert main(["data", "ingest", str(root / "corpus"), "--out", str(root / "store"), "--no-progress"]) == 0
    return root / "store"


def _pack_args(store: Path, out: Path, *more: str) -> list[str]:
    return ["data", "pack", str(store), "--out", str(out), "--method", "splice", "--retriever", "repo"] + [
        "--context",
        "255",
        "--shards",
        "4",
        "--seed",
        "3",
        *more,
    ]


def _run(driver: Path, point: str, args: list[str], **env: str) -> subprocess.Popen:
    env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    cmd = [sys.executable, str(driver), point, *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _snapshot(folder: Path) -> dict[str, object]:
    """Every file under ``folder``: bytes, but meta.json as JSON without its timings."""
    files: dict[str, object] = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.name == "meta.json":
            meta = json.loads(path.read_text())
            for shard in meta["shards"]:
                for key in TIMINGS:
                    shard.pop(key)
            files[rel] = meta
        elif path.is_file():
            files[rel] = path.read_bytes()
        else:
            files[rel] = "folder"
    return files


@pytest.fixture(scope="module")
def reference(store, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("reference") / "packed"
    assert main([*_pack_args(store, out), "--no-progress"]) == 0
    return _snapshot(out)


@pytest.fixture
def driver(tmp_path) -> Path:
    path = tmp_path / "pack_driver.py"
    path.write_text(DRIVER)
    return path


@pytest.mark.parametrize(
    "point", ["mid-shard", "between-shards", "final-arrays", "final-meta", "final-rename"]
)
def test_a_killed_pack_resumes_to_the_uninterrupted_result(store, reference, driver, tmp_path, point):
    out = tmp_path / "packed"
    killed = _run(driver, point, _pack_args(store, out, "--no-progress"))
    _, err = killed.communicate(timeout=300)
    assert killed.returncode == -signal.SIGKILL, err
    again = _run(driver, "none", _pack_args(store, out))
    stdout, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert _snapshot(out) == reference
    assert not out.with_name("packed.partial").exists()
    if point.startswith("final"):  # finalizing resumes where it stopped: no shard is packed again
        assert not re.search(r"^  shard \d+/", stdout, re.M) and "0 documents packed now" in stdout, stdout


def test_workers_die_with_a_killed_parent_and_the_rerun_equals_the_reference(
    store, reference, driver, tmp_path
):
    """issue 21 item 16: SIGKILL of `data pack --workers 2` left its worker processes running."""
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    out = tmp_path / "packed"
    parent = _run(
        driver,
        "workers",
        _pack_args(store, out, "--workers", "2", "--no-progress"),
        PACK_FAULT_PIDS=str(pids_dir),
        PACK_FAULT_SLEEP="4",
    )
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(pids) < 2 and time.monotonic() < deadline and parent.poll() is None:
            pids = [int(p.name) for p in pids_dir.iterdir()]
            time.sleep(0.05)
        assert len(pids) == 2, parent.communicate()[1]
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 3
        while any(process_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if process_alive(p)], "worker processes outlived their killed parent"
    finally:
        for pid in pids:
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
    again = _run(driver, "none", _pack_args(store, out, "--workers", "2", "--no-progress"))
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert _snapshot(out) == reference


@pytest.mark.parametrize("damage", ["another-shard", "truncated", "flipped-byte"])
def test_a_shard_file_that_is_not_its_shard_is_packed_again(store, reference, tmp_path, damage, capsys):
    """Robustness II items 4 and 14: a resume used shard files it never checked (shard 0 copied over
    shard 1 gave rc 0, shard 0 twice, documents missing and doubled); a truncated one was a
    BadZipFile traceback. Each resumed shard is checked (index, documents, checksum) and redone."""
    out = tmp_path / "packed"
    assert main([*_pack_args(store, out, "--no-progress"), "--only-shards", "0,1,2,3"]) == 0
    shards = out.with_name("packed.partial") / "shards"
    one = shards / "shard_00001.npz"
    if damage == "another-shard":
        one.write_bytes((shards / "shard_00000.npz").read_bytes())
    elif damage == "truncated":
        one.write_bytes(one.read_bytes()[: one.stat().st_size // 2])
    else:  # one byte of an array changed, the zip still readable: only the checksum can tell
        import numpy as np

        with np.load(one) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["entries"] = arrays["entries"].copy()
        arrays["entries"][0, 2] -= 1  # the first entry ends one token earlier
        with open(one, "wb") as fh:
            np.savez(fh, **arrays)
    capsys.readouterr()
    assert main(_pack_args(store, out)) == 0
    said = capsys.readouterr().out
    line = r"^shard 2/4: shard_00001\.npz is not usable \(.+\); packing it again$"  # index 1: shard 2 of 4
    assert re.search(line, said, re.M), said
    assert "shard 1/4:" not in said and "shard 3/4:" not in said
    assert _snapshot(out) == reference


def test_a_worker_killed_mid_pack_is_one_line_and_the_rerun_equals_the_reference(
    store, reference, driver, tmp_path
):
    """Robustness II item 13: a killed worker of `data pack --workers 2` was a BrokenProcessPool traceback."""
    out = tmp_path / "packed"
    broken = _run(driver, "worker-dies", _pack_args(store, out, "--workers", "2", "--no-progress"))
    _, err = broken.communicate(timeout=300)
    assert broken.returncode == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "worker process died" in lines[0] and "run the same command again" in lines[0]
    again = _run(driver, "none", _pack_args(store, out, "--workers", "2", "--no-progress"))
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert _snapshot(out) == reference
