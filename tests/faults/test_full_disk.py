"""Every writer on a full disk ends in one line, not a traceback (Robustness II item 7).

Each command runs in its own process with its output on a real, tiny file system: a tmpfs mounted
in a private mount namespace (``unshare --user --map-root-user --mount``, so no privileges are
needed and nothing is mounted outside the process). Its inputs live on the normal disk.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.faults.projects import make_project, run_config
from tests.sweep.test_sweep import SWEEP


def in_namespace(mount: str, folder: Path, argv: list[str], cwd: Path | None = None):
    """``contextlab ARGV`` in a new process with its own user and mount namespace (no privileges
    needed, nothing mounted outside it), after the shell ``mount`` commands run on ``$1`` = ``folder``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    return subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", f'{mount} && shift && exec "$@"']
        + ["sh", str(folder), sys.executable, "-m", "contextlab", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


def on_small_disk(disk: Path, size: str, argv: list[str]) -> subprocess.CompletedProcess:
    """``contextlab ARGV`` with ``disk`` a tmpfs of ``size`` for it."""
    disk.mkdir(parents=True, exist_ok=True)
    return in_namespace(f'mount -t tmpfs -o size={size} tmpfs "$1"', disk, argv)


def on_read_only(folder: Path, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``contextlab ARGV`` that sees ``folder`` read-only (a read-only bind mount)."""
    return in_namespace('mount --bind "$1" "$1" && mount -o remount,bind,ro "$1"', folder, argv, cwd)


def train_toml(path: Path, store: Path, out_dir: Path) -> Path:
    """A run config file: the tiny run, a checkpoint every step (something to write on every step)."""
    import tomli_w

    path.write_text(tomli_w.dumps(run_config(store, out_dir, max_steps=2, ckpt_every=1)))
    return path


def sweep_toml(path: Path, store: Path, out: Path) -> Path:
    """The sweep tests' tiny grid (three contexts) on ``store`` into ``out``."""
    path.write_text(SWEEP.format(out=out, store=store, bad=64))
    return path


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    assert shutil.which("unshare"), "util-linux's unshare is needed for the small-disk tests"
    return make_project(tmp_path_factory.mktemp("full_disk"), chars=200_000, parts=8)


def error_lines(res: subprocess.CompletedProcess) -> list[str]:
    """The command's stderr lines but its notes (an evaluation of the run's own training store says so)."""
    return [line for line in res.stderr.strip().splitlines() if not line.startswith("note: ")]


def assert_one_line_about_space(res: subprocess.CompletedProcess) -> None:
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    lines = error_lines(res)
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
    config = train_toml(tmp_path / "run.toml", project / "store", tmp_path / "disk" / "run")
    assert_one_line_about_space(on_small_disk(tmp_path / "disk", "64k", ["train", str(config)]))


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
    lines = error_lines(res)
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


def test_a_sweep_on_a_full_disk_says_so_in_one_line(project, tmp_path):
    recipe = sweep_toml(tmp_path / "sweep.toml", project / "store", tmp_path / "disk" / "sw")
    res = on_small_disk(tmp_path / "disk", "16k", ["sweep", str(recipe), "--no-analysis"])
    assert res.returncode in (1, 2) and "Traceback" not in res.stderr, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert "no space left" in last.lower() or "run(s) failed" in last, res.stderr[-3000:]


@pytest.mark.parametrize("what", ["train", "sweep"])
def test_train_and_sweep_with_a_read_only_out_say_so_in_one_line(project, tmp_path, what):
    (tmp_path / "ro").mkdir()
    if what == "train":
        argv = ["train", str(train_toml(tmp_path / "run.toml", project / "store", tmp_path / "ro" / "run"))]
    else:
        recipe = sweep_toml(tmp_path / "sweep.toml", project / "store", tmp_path / "ro" / "sw")
        argv = ["sweep", str(recipe), "--no-analysis"]
    res = on_read_only(tmp_path / "ro", argv, tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    lines = error_lines(res)
    assert len(lines) == 1 and "read-only file system" in lines[0], res.stderr[-3000:]


def under_file_size_limit(kib: int, argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``contextlab ARGV`` under ``ulimit -f KIB`` (a FAT32 disk's 4 GiB limit, made small): the kernel
    sends SIGXFSZ, which Python ignores, and the write fails with EFBIG."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    return subprocess.run(
        ["bash", "-c", f'ulimit -f {kib} && exec "$@"', "bash", sys.executable, "-m", "contextlab", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


FILE_SIZE_CASES = {  # each writes a file of more than 8 KiB
    "ingest": lambda p, d: ["data", "ingest", str(p / "corpus"), "--out", str(d / "st"), "--no-progress"],
    **{case: CASES[case][1] for case in ("pack", "export megatron", "model export")},
    "eval": lambda p, d: (
        ["eval", "ppl", "--model", str(p / "run"), "--data", str(p / "store"), "--out", str(d / "ev")]
        + ["--threads", "1", "--no-progress"]
    ),
    "train": lambda p, d: ["train", str(train_toml(d / "run.toml", p / "store", d / "run"))],
}


@pytest.mark.parametrize("case", list(FILE_SIZE_CASES))
def test_a_writer_past_the_file_size_limit_says_so_in_one_line(project, tmp_path, case):
    res = under_file_size_limit(8, FILE_SIZE_CASES[case](project, tmp_path), tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    lines = error_lines(res)
    assert len(lines) == 1 and "`ulimit -f`" in lines[-1], res.stderr[-3000:]
    assert "file too large" in lines[0] or "size limit" in lines[0], lines[0]


def test_the_file_size_limit_leaves_the_earlier_output_as_it_was(project, tmp_path):
    from contextlab.cli import main
    from contextlab.io import tree_digest

    argv = CASES["pack"][1](project, tmp_path)
    assert main(argv) == 0
    before = tree_digest(tmp_path / "pk")
    res = under_file_size_limit(8, [*argv, "--overwrite"], tmp_path)
    assert res.returncode == 2 and "file too large" in res.stderr, res.stderr[-3000:]
    assert tree_digest(tmp_path / "pk") == before
