"""The command line: dispatch, --help for every option, one-line errors with exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from contextlab.cli import main
from tests.conftest import REPO, write_tree


def run_cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run(
        [sys.executable, "-m", "contextlab", *args], capture_output=True, text=True, env=env, cwd=cwd
    )


def test_top_level_help_lists_commands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("quickstart", "data ingest", "data info", "data verify"):
        assert name in out


def test_ingest_help_documents_every_option(capsys):
    with pytest.raises(SystemExit) as e:
        main(["data", "ingest", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in (
        "--tokenizer",
        "--min-tokens",
        "--max-tokens",
        "--include",
        "--exclude",
        "--encoding",
        "--strip-gutenberg",
        "--text-field",
        "--overwrite",
        "--set",
        "--config",
    ):
        assert flag in out
    assert "bpe:N" in out


def test_unknown_command_and_group(capsys):
    assert main(["nope"]) == 2
    assert "unknown command" in capsys.readouterr().err
    assert main(["data"]) == 2
    assert "ingest" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["data", "ingest", "{tmp}/missing", "--out", "{tmp}/s"], "not found"),
        (["data", "ingest", "{tmp}/c", "--out", "{tmp}/s", "--tokenizer", "wordpiece"], "tokenizer"),
        (
            ["data", "ingest", "{tmp}/c", "--out", "{tmp}/s", "--set", "nosuch=1"],
            "unknown config key 'nosuch'",
        ),
        (
            ["data", "ingest", "{tmp}/c", "--out", "{tmp}/s", "--min-tokens", "many"],
            "config key 'min_tokens' must be int",
        ),
        (["data", "info", "{tmp}/c"], "not a contextlab token store"),
        (["data", "info", "{tmp}/missing"], "store not found"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    write_tree(tmp_path / "c", {"a.txt": "some text"})
    res = run_cli(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in res.stderr
    assert not (tmp_path / "s").exists()


def test_ingest_info_verify_end_to_end(tmp_path):
    write_tree(tmp_path / "c", {"x/a.txt": "alpha beta", "y/b.txt": "gamma"})
    res = run_cli("data", "ingest", str(tmp_path / "c"), "--out", str(tmp_path / "s"), "--no-progress")
    assert res.returncode == 0, res.stderr
    assert "2 documents, 15 tokens" in res.stdout
    res = run_cli("data", "ingest", str(tmp_path / "c"), "--out", str(tmp_path / "s"), "--no-progress")
    assert res.returncode == 0 and "up to date" in res.stdout
    res = run_cli("data", "info", str(tmp_path / "s"))
    assert res.returncode == 0, res.stderr
    assert "documents  2" in res.stdout and "domains    2" in res.stdout
    png = tmp_path / "s" / "doc_lengths.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = run_cli("data", "verify", str(tmp_path / "s"))
    assert res.returncode == 0 and ": ok" in res.stdout


def test_train_help_lists_config_keys(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for key in ("train.tokens_per_step", "train.max_flops", "data.store", "objective.name", "optim.lr"):
        assert key in out


@pytest.mark.parametrize(
    "sets, message",
    [
        ([], "no training data"),
        (["data.store={tmp}/missing"], "store not found"),
        (["data.store={tmp}/s", "objective.name=nope"], "unknown objective 'nope'"),
        (["data.store={tmp}/s", "train.nosuch=1"], "unknown config key 'train.nosuch'"),
        (
            ["data.store={tmp}/s", "train.max_steps=2", "train.dtype=fp8"],
            "config key 'train.dtype' must be 'bf16' | 'fp32', got 'fp8'",
        ),
        (["data.store={tmp}/s", "model.size=huge"], "model"),
        (["data.store={tmp}/s", "train.max_steps=2", "train.max_tokens=9"], "exactly one budget"),
    ],
)
def test_train_bad_input_is_one_line(tmp_path, sets, message):
    write_tree(tmp_path / "c", {f"{i}.txt": "some text " * 50 for i in range(10)})
    assert run_cli("data", "ingest", str(tmp_path / "c"), "--out", str(tmp_path / "s")).returncode == 0
    args = [
        "train",
        "--set=train.peak_flops=1e12",
        f"--set=train.out_dir={tmp_path}/run",
        "--set=train.context=32",
        "--set=train.tokens_per_step=64",
    ]
    res = run_cli(*args, *[f"--set={s.replace('{tmp}', str(tmp_path))}" for s in sets])
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr


def test_export_of_a_missing_run(tmp_path):
    res = run_cli("export", str(tmp_path / "nope"), "--out", str(tmp_path / "hf"))
    assert res.returncode == 2 and "not found" in res.stderr
