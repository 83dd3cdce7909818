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
    write_tree(tmp_path / "one", {"a.txt": "alpha"})
    res = run_cli("data", "ingest", str(tmp_path / "one"), "--out", str(tmp_path / "s1"), "--no-progress")
    assert res.returncode == 0 and "1 document, 5 tokens" in res.stdout, res.stderr
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
            "config key 'train.dtype' must be 'auto' | 'bf16' | 'fp32', got 'fp8'",
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


def _pack_cli_store(tmp_path):
    src = write_tree(tmp_path / "c", {f"{d}/{i}.txt": f"text {d} {i} " * 8 for d in "ab" for i in range(6)})
    assert main(["data", "ingest", str(src), "--out", str(tmp_path / "s"), "--no-progress"]) == 0
    return tmp_path / "s"


def test_repeated_include_and_comma_lists_all_count(tmp_path, capsys):
    """issue 21 item 13: a repeated --include kept only the last one (6 of 12 documents were read)."""
    src = write_tree(tmp_path / "c", {f"{d}/{i}.txt": f"text {d} {i}" for d in "abc" for i in range(4)})
    args = ["data", "ingest", str(src), "--no-progress", "--include", "a/*", "--include", "b/0.txt,b/1.txt"]
    assert main([*args, "--out", str(tmp_path / "s"), "--exclude", "a/0.txt", "--exclude", "a/1.txt"]) == 0
    assert "wrote" in capsys.readouterr().out
    from contextlab.data.store import TokenStore

    paths = [m["path"] for m in TokenStore(tmp_path / "s").docs_meta()]
    assert paths == ["a/2.txt", "a/3.txt", "b/0.txt", "b/1.txt"]


def test_tokenizer_spec_error_lists_the_forms_help_lists(tmp_path, capsys):
    """issue 21 item 13: the error listed dir: while --help listed store:; both now list what ingest takes."""
    with pytest.raises(SystemExit):
        main(["data", "ingest", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    for spec in ("sentencepiece:x", "bpe:many", f"hf:{tmp_path / 'missing'}", "dir:"):
        assert main(["data", "ingest", str(tmp_path), "--out", str(tmp_path / "s"), "--tokenizer", spec]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and repr(spec) in err
        forms = err.split("use one of: ")[1]
        for form in ("byte", "gpt2:DIR", "hf:PATH", "bpe:N", "dir:DIR", "store:STORE"):
            assert form in forms
        assert forms in helptext
    assert not (tmp_path / "s.partial").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--method", "ep", "--retriever", "repo", "--k", "5"],
            "--method ep does not use --k 5, --retriever repo",
        ),
        (
            ["--method", "icp", "--order", "shuffle"],
            "--method icp with --retriever bm25 does not use --order",
        ),
        (["--method", "splice", "--retriever", "repo", "--dense-batch", "8"], "does not use --dense-batch 8"),
        (["--context", "1"], "context must be >= 4 tokens, got 1"),
        (["--only-shards", "5"], "shard 5 does not exist"),
    ],
)
def test_pack_refuses_ignored_and_bad_options_without_creating_anything(tmp_path, capsys, flags, message):
    """issue 21 item 13: options a method ignores, --context 1 and a missing shard were accepted or left
    an empty OUT.partial behind."""
    store = _pack_cli_store(tmp_path)
    capsys.readouterr()
    out = tmp_path / "p"
    assert main(["data", "pack", str(store), "--out", str(out), "--context", "16", *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists() and not (tmp_path / "p.partial").exists()
    # the defaults of an option the method ignores are fine, and so is the option where it is used
    ok = ["--method", "ep", "--retriever", "bm25", "--k", "1", "--no-progress"]
    assert main(["data", "pack", str(store), "--out", str(out), "--context", "16", *ok]) == 0
    assert (
        main(
            [
                "data",
                "pack",
                str(store),
                "--out",
                str(tmp_path / "q"),
                "--method",
                "splice",
                "--k",
                "5",
                "--retriever",
                "repo",
                "--context",
                "16",
                "--no-progress",
            ]
        )
        == 0
    )


def test_ingest_bar_has_the_source_bytes_as_total_and_reaches_it(tmp_path, monkeypatch):
    """issue 21 item 18: the ingest bar had no total (so no ETA) and counted characters, not bytes."""
    import tqdm.auto

    bars = []

    class Recorded(tqdm.auto.tqdm):
        def close(self):
            bars.append((self.total, self.n))
            super().close()

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorded)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # bars draw on a terminal only
    files = {f"d{i % 3}/{i}.txt": f"café {i} " * (40 + i) for i in range(30)}
    src = write_tree(tmp_path / "c", {**files, "skip/x.md": "left out"})
    assert main(["data", "ingest", str(src), "--out", str(tmp_path / "s"), "--exclude", "skip/*"]) == 0
    size = sum(len(text.encode()) for text in files.values())
    assert bars[-1] == (size, size)


def test_training_a_bpe_says_so_on_stderr(tmp_path, capsys):
    """issue 21 item 18: training a BPE tokenizer gave 30 s of silence."""
    from tests.conftest import shakespeare

    src = write_tree(tmp_path / "c", {"play.txt": shakespeare(200_000)})
    args = [
        "data",
        "ingest",
        str(src),
        "--out",
        str(tmp_path / "s"),
        "--tokenizer",
        "bpe:300",
        "--no-progress",
    ]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "training a BPE of 43 merges: reading the text" in err
    assert "training a BPE of 43 merges on 0.2 MB ..." in err


def test_file_size_and_name_length_errors_are_one_line_for_every_command():
    """EFBIG (``ulimit -f``, a FAT32 disk) was a traceback in every writer, raised by Python's io or, as
    text, by safetensors; ENAMETOOLONG likewise."""
    import errno

    from contextlab.cli import disk_error_line

    raised = OSError(errno.EFBIG, "File too large")
    rust = RuntimeError("Error while serializing: I/O error: File too large (os error 27)")
    for exc in (raised, rust):
        assert "file too large for this filesystem or `ulimit -f`" in disk_error_line(exc)
    long_name = OSError(errno.ENAMETOOLONG, "File name too long", "out/" + "x" * 300)
    assert "too long for this file system; choose a shorter name" in disk_error_line(long_name)


def test_running_out_of_memory_is_one_line_with_the_allocation_and_the_commands_fix(monkeypatch, capsys):
    """A Qwen2 profiled at its 32,768 positions asked the CPU allocator for 53 GB of logits and died with
    a 40-line traceback; running out of memory is now one line naming the allocation and the option
    that asks for less, for the host's allocator, torch's CUDA error and Python's MemoryError alike."""
    import torch

    from contextlab.cli import main
    from contextlab.errors import memory_error_line

    host = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
        "to allocate 52698284032 bytes. Error code 12 (Cannot allocate memory)"
    )
    line = memory_error_line(host, "profile")
    assert line.startswith("out of memory (one allocation of 52.7 GB); give --batch-size 1, or measure at")
    cuda = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.1 GiB total)")
    assert memory_error_line(cuda, "train").startswith(
        "out of memory (one allocation of 2.00 GiB); set train."
    )
    assert memory_error_line(MemoryError(), "data ingest").startswith("out of memory; use smaller batches")
    assert memory_error_line(ValueError("bad value"), "eval") is None

    def no_memory(argv):
        raise host

    monkeypatch.setattr("contextlab.cli._resolve", lambda command: no_memory)
    assert main(["eval", "ppl"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["contextlab eval: error: " + memory_error_line(host, "eval")]


def test_no_command_takes_an_abbreviated_flag(capsys):
    """`--strid 8` was read as `--stride 8` without a word: a typo of one flag could be read as another.
    Every parser of the command line refuses abbreviations (checked in the source, so a new one does too)."""
    import ast
    from pathlib import Path

    import contextlab.cli as cli_pkg
    from contextlab.cli import main

    calls = []
    for f in sorted(Path(cli_pkg.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "ArgumentParser":
                flags = {k.arg: getattr(k.value, "value", None) for k in node.keywords}
                calls.append((f.name, node.lineno, flags.get("allow_abbrev")))
    assert len(calls) >= 18 and [c for c in calls if c[2] is not False] == []
    with pytest.raises(SystemExit) as exc:
        main(["eval", "ppl", "--model", "m", "--strid", "8"])
    assert exc.value.code == 2 and "unrecognized arguments: --strid 8" in capsys.readouterr().err


def test_a_wrong_choice_names_the_flag(tmp_path, capsys):
    """`data ingest --encoding latin1` was answered about "config key 'source.encoding'", which the user
    never typed: a flag of a few allowed values now lists them under its own name."""
    from contextlab.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["data", "ingest", str(tmp_path), "--out", str(tmp_path / "s"), "--encoding", "latin1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert (
        "argument --encoding: invalid choice: 'latin1' (choose from 'strict', 'replace', 'skip', 'latin-1')"
        in err
    )
    assert not (tmp_path / "s").exists()
