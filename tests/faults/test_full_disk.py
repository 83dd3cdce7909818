"""Every writer on a full disk ends in one line, not a traceback (Robustness II item 7).

Each command runs in its own process with its output on a real, tiny file system: a tmpfs mounted
in a private mount namespace (``unshare --user --map-root-user --mount``, so no privileges are
needed and nothing is mounted outside the process). Its inputs live on the normal disk.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contextlab.cli import main
from contextlab.config import from_dict
from tests.conftest import REPO, shakespeare, write_tree

RUN = {
    "model": {"size": "tiny-2x128", "n_layer": 1, "n_head": 2, "n_embd": 32},
    "data": {"store": "", "val_split": "tail", "val_fraction": 0.1},
    "optim": {"warmup_steps": 1},
    "train": {
        "out_dir": "",
        "context": 32,
        "tokens_per_step": 128,
        "max_steps": 2,
        "val_every": 0,
        "ckpt_every": 1,
        "threads": 1,
        "progress": False,
        "dtype": "fp32",
    },
}


def on_small_disk(disk: Path, size: str, argv: list[str]) -> subprocess.CompletedProcess:
    """``contextlab ARGV`` in a new process whose ``disk`` folder is a tmpfs of ``size``."""
    disk.mkdir(parents=True, exist_ok=True)
    command = f'mount -t tmpfs -o size={size} tmpfs "$1" && shift && exec "$@"'
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", command, "sh", str(disk)]
        + [sys.executable, "-m", "contextlab", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    from contextlab.train.config import RunConfig
    from contextlab.train.trainer import train

    assert shutil.which("unshare"), "util-linux's unshare is needed for the small-disk tests"
    root = tmp_path_factory.mktemp("full_disk")
    text = shakespeare(200_000)
    write_tree(root / "corpus", {f"part{i}.txt": text[i * 25_000 : (i + 1) * 25_000] for i in range(8)})
    assert main(["data", "ingest", str(root / "corpus"), "--out", str(root / "store"), "--no-progress"]) == 0
    pack = ["data", "pack", str(root / "store"), "--method", "ep", "--context", "63", "--no-progress"]
    assert main([*pack, "--out", str(root / "packed")]) == 0
    cfg = json.loads(json.dumps(RUN))
    cfg["data"]["store"], cfg["train"]["out_dir"] = str(root / "store"), str(root / "run")
    train(from_dict(RunConfig, cfg))
    return root


def assert_one_line_about_space(res: subprocess.CompletedProcess) -> None:
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0], res.stderr[-3000:]
    assert "no space left" in lines[0].lower() or "disk is full" in lines[0].lower(), lines[0]


def test_the_small_disk_is_real_and_private(tmp_path):
    res = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c"]
        + [f'mount -t tmpfs -o size=64k tmpfs "{tmp_path}" && head -c 200000 /dev/zero > "{tmp_path}/x"'],
        capture_output=True,
        text=True,
    )
    assert res.returncode != 0 and "No space left" in res.stderr
    assert not (tmp_path / "x").exists()  # the mount was the process's own


CASES = {
    "pack": (
        "16k",
        lambda p, d: (
            ["data", "pack", str(p / "store"), "--method", "ep", "--context", "63", "--out", str(d / "pk")]
            + ["--no-progress"]
        ),
    ),
    "export parquet": (
        "64k",
        lambda p, d: ["data", "export", str(p / "packed"), "--out", str(d / "ex"), "--no-progress"],
    ),
    "export megatron": (
        "64k",
        lambda p, d: (
            ["data", "export", str(p / "packed"), "--format", "megatron", "--out", str(d / "ex")]
            + ["--no-progress"]
        ),
    ),
    "eval": (
        "16k",
        lambda p, d: (
            ["eval", "contextwise", "--model", str(p / "run"), "--data", str(p / "store")]
            + ["--out", str(d / "ev"), "--max-docs", "2", "--length", "32"]
        ),
    ),
    "model export": ("64k", lambda p, d: ["export", str(p / "run"), "--out", str(d / "hf")]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_writer_on_a_full_disk_says_so_in_one_line(project, tmp_path, case):
    size, argv = CASES[case]
    assert_one_line_about_space(on_small_disk(tmp_path / "disk", size, argv(project, tmp_path / "disk")))


def test_training_on_a_full_disk_says_the_disk_is_full(project, tmp_path):
    config = tmp_path / "run.toml"
    cfg = json.loads(json.dumps(RUN))
    cfg["data"]["store"], cfg["train"]["out_dir"] = str(project / "store"), str(tmp_path / "disk" / "run")
    import tomli_w

    config.write_text(tomli_w.dumps(cfg))
    res = on_small_disk(tmp_path / "disk", "64k", ["train", str(config)])
    assert_one_line_about_space(res)


def on_read_only(folder: Path, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``contextlab ARGV`` in a new process that sees ``folder`` read-only (a read-only bind mount)."""
    command = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", command, "sh", str(folder)]
        + [sys.executable, "-m", "contextlab", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


READ_ONLY_WRITERS = {  # Robustness II item 8: an --out on a read-only disk
    "ingest": lambda p, d: ["data", "ingest", str(p / "corpus"), "--out", str(d / "st"), "--no-progress"],
    "pack": lambda p, d: (
        ["data", "pack", str(p / "store"), "--method", "ep", "--context", "63"]
        + ["--out", str(d / "pk"), "--no-progress"]
    ),
    "data export": lambda p, d: [
        "data",
        "export",
        str(p / "packed"),
        "--out",
        str(d / "ex"),
        "--no-progress",
    ],
    "model export": lambda p, d: ["export", str(p / "run"), "--out", str(d / "hf")],
    "eval": lambda p, d: (
        ["eval", "contextwise", "--model", str(p / "run"), "--data", str(p / "store")]
        + ["--out", str(d / "ev"), "--max-docs", "2", "--length", "32"]
    ),
}


@pytest.mark.parametrize("case", list(READ_ONLY_WRITERS))
def test_a_writer_with_a_read_only_out_says_so_in_one_line(project, tmp_path, case):
    (tmp_path / "ro").mkdir()
    res = on_read_only(tmp_path / "ro", READ_ONLY_WRITERS[case](project, tmp_path / "ro"), tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "read-only file system" in lines[0], res.stderr[-3000:]


@pytest.mark.parametrize("what", ["info", "pack-stats"])
def test_stats_of_a_read_only_store_draw_their_plot_where_they_can(project, tmp_path, what):
    """``data info`` and ``data pack-stats`` drew their PNG into the store by default: a read-only one
    failed. The plot now goes to the current directory, and the command says where."""
    folder = project / ("store" if what == "info" else "packed")
    res = on_read_only(folder, ["data", what, str(folder)], tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    png = tmp_path / f"{folder.name}_{'doc_lengths' if what == 'info' else 'pack_stats'}.png"
    assert png.is_file() and str(png) in res.stdout


SWEEP = """
[sweep]
name = "tiny"
out_dir = "{out}"
[base.model]
size = "tiny-2x128"
n_layer = 1
n_embd = 32
n_head = 2
[base.data]
store = "{store}"
val_split = "tail"
val_fraction = 0.1
[base.optim]
warmup_steps = 1
[base.train]
context = 32
tokens_per_step = 128
max_steps = 2
threads = 1
dtype = "fp32"
[grid]
"train.seed" = [0, 1]
"""


def test_a_sweep_on_a_full_disk_says_so_in_one_line(project, tmp_path):
    recipe = tmp_path / "sweep.toml"
    recipe.write_text(SWEEP.format(out=tmp_path / "disk" / "sw", store=project / "store"))
    res = on_small_disk(tmp_path / "disk", "16k", ["sweep", str(recipe), "--no-analysis"])
    assert res.returncode in (1, 2) and "Traceback" not in res.stderr, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert "no space left" in last.lower() or "run(s) failed" in last, res.stderr[-3000:]


@pytest.mark.parametrize("what", ["train", "sweep"])
def test_train_and_sweep_with_a_read_only_out_say_so_in_one_line(project, tmp_path, what):
    (tmp_path / "ro").mkdir()
    if what == "train":
        cfg = json.loads(json.dumps(RUN))
        cfg["data"]["store"], cfg["train"]["out_dir"] = str(project / "store"), str(tmp_path / "ro" / "run")
        import tomli_w

        (tmp_path / "run.toml").write_text(tomli_w.dumps(cfg))
        argv = ["train", str(tmp_path / "run.toml")]
    else:
        (tmp_path / "sweep.toml").write_text(
            SWEEP.format(out=tmp_path / "ro" / "sw", store=project / "store")
        )
        argv = ["sweep", str(tmp_path / "sweep.toml"), "--no-analysis"]
    res = on_read_only(tmp_path / "ro", argv, tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "read-only file system" in lines[0], res.stderr[-3000:]
