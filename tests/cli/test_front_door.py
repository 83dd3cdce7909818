"""What a user meets at the command line: a closed pipe, a bad option or path is one line or nothing.

A stdout whose reader has gone (``| head -1``) ends quietly with status 141 and the command still
does its work; ``--batch-size``, ``--threads``, ``--device`` and ``--depths`` are checked before any
model is loaded, the same way in every command that runs a model; a missing path is named as such.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch

from contextlab.cli import READER_GONE, main
from contextlab.eval import EVALS


@pytest.fixture
def closed_stdout(monkeypatch):
    """Call it in the test (capsys takes sys.stdout back as the test starts): sys.stdout becomes a pipe
    whose reader has already gone, what `| head -1` leaves behind; stderr stays capsys's."""
    read, write = os.pipe()
    os.close(read)
    stream = open(write, "w", encoding="utf-8")
    yield lambda: monkeypatch.setattr(sys, "stdout", stream)
    stream.close()


def test_data_info_into_a_closed_pipe_is_quiet_and_141(stores, closed_stdout, capsys):
    closed_stdout()
    assert main(["data", "info", str(stores["one"])]) == READER_GONE
    assert capsys.readouterr().err == ""


def test_a_closed_pipe_in_a_real_process_leaves_no_message_at_exit(stores):
    """Python flushes stdout once more at exit: that flush must not print 'Exception ignored'."""
    code = (
        "import os, sys; r, w = os.pipe(); os.close(r); os.dup2(w, 1)\n"
        "from contextlab.cli import main\n"
        f"raise SystemExit(main(['data', 'info', {str(stores['one'])!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert (done.returncode, done.stderr) == (READER_GONE, b"")


def test_eval_of_several_models_into_a_closed_pipe_evaluates_every_model(
    tiny_runs, stores, tmp_path, closed_stdout, capsys
):
    argv = ["eval", "ppl", "--model", str(tiny_runs["a"]), "--model", str(tiny_runs["b"])]
    argv += ["--data", str(stores["one"]), "--out", str(tmp_path / "out"), "--no-progress", "--max-docs", "1"]
    closed_stdout()
    assert main(argv) == READER_GONE
    assert capsys.readouterr().err == ""
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a", "b"]
    for name in "ab":
        assert (tmp_path / "out" / name / "ppl.json").is_file()


def test_an_open_stdout_keeps_the_status_of_the_command(stores, capsys):
    assert main(["data", "info", str(stores["one"])]) == 0
    assert capsys.readouterr().out.startswith(f"store      {stores['one']}\n")


@pytest.fixture
def cpu_only_torch(monkeypatch):
    """torch as a build without CUDA reports itself (whatever this machine has)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)


def _command(name: str, runs, stores, llama) -> list[str]:
    """A command line of every command that runs a model; the checks come before any of it is read."""
    model, data = str(runs["a"]), str(stores["one"])
    return {
        "eval": ["eval", "passkey", "--model", model],
        "analyze entropy": ["analyze", "entropy", "--model", model, "--data", data],
        "analyze attention": ["analyze", "attention", "--model", model, "--data", data],
        "profile": ["profile", "--model", str(llama), "--data", data, "--out", "/nonexistent/profile"],
        "generate": ["generate", "--model", model, "--prompt", "a"],
    }[name]


COMMANDS = ["eval", "analyze entropy", "analyze attention", "profile", "generate"]
BAD = [
    (["--batch-size", "0"], "--batch-size must be 1 or more, got 0"),
    (["--threads", "-3"], "--threads must be a number of CPU threads (0 = torch's default), got -3"),
    (
        ["--device", "cuda"],
        "--device cuda is not available: this torch was built without CUDA; devices here: cpu",
    ),
    (["--device", "cuda:x"], "--device 'cuda:x' is not a torch device; devices here: cpu"),
]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("flags", "message"), BAD)
def test_compute_options_are_one_line_in_every_command(
    command, flags, message, tiny_runs, stores, llama, cpu_only_torch, capsys
):
    threads = torch.get_num_threads()
    assert main([*_command(command, tiny_runs, stores, llama), *flags]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"contextlab {command}: error: {message}\n" and captured.out == ""
    assert torch.get_num_threads() == threads


def test_the_compute_check_comes_before_the_model_is_opened(tmp_path, capsys):
    argv = ["eval", "passkey", "--model", str(tmp_path / "missing"), "--batch-size", "0"]
    assert main(argv) == 2
    assert capsys.readouterr().err == "contextlab eval: error: --batch-size must be 1 or more, got 0\n"


def test_threads_are_set_when_valid(tiny_runs, capsys):
    threads = torch.get_num_threads()
    try:
        argv = ["generate", "--model", str(tiny_runs["a"]), "--prompt", "a", "--max-new-tokens", "1"]
        assert main([*argv, "--threads", "1"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize(("name", "depth"), [("passkey", "150"), ("niah", "-1"), ("passkey", "100.5")])
def test_depths_outside_0_to_100_are_refused(name, depth, tiny_runs, tmp_path, capsys):
    argv = ["eval", name, "--model", str(tiny_runs["a"]), "--depths", f"0,{depth}", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"contextlab eval: error: --depths {float(depth):g} is out of range: a depth is a percent of the "
        "text, from 0 (its start) to 100 (its end)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_missing_data_is_named_not_a_traceback(tiny_runs, tmp_path, capsys):
    missing = tmp_path / "nonexist"
    argv = [
        "eval",
        "niah",
        "--model",
        str(tiny_runs["a"]),
        "--data",
        str(missing),
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"contextlab eval: error: --data {missing} not found; niah reads {EVALS['niah'].data}\n"
    )


def test_a_file_missing_inside_the_data_folder_is_named(tiny_runs, tmp_path, capsys):
    trec = tmp_path / "trec"
    trec.mkdir()
    (trec / "test.txt").write_text("DESC:manner How did serfdom develop ?\n")
    argv = ["eval", "icl", "--model", str(tiny_runs["a"]), "--data", str(trec), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"contextlab eval: error: --data {trec.resolve()} has no train.txt; icl reads {EVALS['icl'].data}\n"
    )
    assert not (tmp_path / "o" / "icl.json").exists()


def test_compare_names_a_missing_run_and_refuses_a_file_as_out(tiny_runs, stores, tmp_path, capsys):
    out = tmp_path / "a"
    argv = ["eval", "ppl", "--model", str(tiny_runs["a"]), "--data", str(stores["one"]), "--max-docs", "1"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["compare", str(out), str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == (
        f"contextlab compare: error: RUN_B {tmp_path / 'nope'} not found; give a run directory or a folder "
        "of evaluation results\n"
    )
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert main(["compare", str(out), str(out), "--out", str(notes)]) == 2
    assert capsys.readouterr().err == (
        f"contextlab compare: error: --out {notes} is a file, not a folder; choose another --out (it is left "
        "as it is)\n"
    )
    assert notes.read_text() == "mine"


def test_generate_shows_the_length_warning_as_one_line(tiny_runs, capsys):
    argv = ["generate", "--model", str(tiny_runs["a"]), "--prompt", "a" * 500, "--max-new-tokens", "20"]
    with warnings.catch_warnings():
        from contextlab.eval.adapter import ContextLengthWarning

        warnings.simplefilter("always", ContextLengthWarning)
        assert main(argv) == 0
    assert capsys.readouterr().err == (
        f"contextlab generate: warning: the longest prompt with its new tokens runs {tiny_runs['a']} on 519 "
        "tokens, but it was trained at context 512 and its RoPE was not extended to "
        "519: positions past 512 are "
        "extrapolated and usually score much worse; shorten the prompt or lower --max-new-tokens\n"
    )


@pytest.fixture
def transformers_bar():
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    yield hf_logging.is_progress_bar_enabled
    hf_logging.enable_progress_bar()


@pytest.mark.parametrize("command", ["profile", "generate"])
def test_no_progress_turns_off_the_transformers_bar(
    command, llama, stores, tmp_path, transformers_bar, capsys
):
    argv = {
        "profile": [
            "profile",
            "--model",
            str(llama),
            "--data",
            str(tmp_path / "none"),
            "--out",
            str(tmp_path / "p"),
        ],
        "generate": ["generate", "--model", str(llama), "--prompt", "a", "--max-new-tokens", "1"],
    }[command]
    from contextlab.cli import runtime

    code = 2 if command == "profile" else 0  # profile stops at its missing --data, after the switch
    with pytest.MonkeyPatch.context() as m:
        m.setattr(runtime, "on_terminal", lambda: True)
        assert main(argv) == code
        assert transformers_bar()  # on a terminal, without --no-progress, it is left on
        assert main([*argv, "--no-progress"]) == code
        assert not transformers_bar()
    from transformers.utils import logging as hf_logging

    hf_logging.enable_progress_bar()
    assert main(argv) == code
    assert not transformers_bar()  # off a terminal (a log: pytest's capture) it is off without asking


def test_sigterm_ends_a_command_like_ctrl_c_leaving_no_lock(tiny_runs, tmp_path):
    """`timeout`, a scheduler or torchrun stop a command with SIGTERM: it exits with 143 through its
    finally blocks, so the one-writer lock file beside the output is gone (it stayed after SIGTERM)."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "ev"
    argv = [sys.executable, "-m", "contextlab", "eval", "passkey", "--model", str(tiny_runs["a"])]
    argv += ["--out", str(out), "--samples", "64", "--no-progress", "--threads", "1"]
    with open(tmp_path / "stderr.txt", "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
    lock = tmp_path / ".ev.lock"
    deadline = time.monotonic() + 120
    while not lock.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lock.exists(), "the evaluation ended before its lock was seen"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143, (tmp_path / "stderr.txt").read_text()[-4000:]
    assert not lock.exists() and not (out / "passkey.json").exists()
    assert "contextlab eval: terminated (SIGTERM)" in (tmp_path / "stderr.txt").read_text()  # not silence


def test_icl_and_mqar_data_are_checked_before_the_model_loads(
    tiny_runs, stores, tmp_path, monkeypatch, capsys
):
    """A TREC folder without train.txt and a token store that is no MQAR store: one line each, before any
    model is loaded (a Hugging Face model's loading bar came first)."""
    import contextlab.eval

    def no_loading(*a, **k):
        raise AssertionError("the model was loaded before the data was checked")

    monkeypatch.setattr(contextlab.eval, "load_model", no_loading)
    (tmp_path / "trec").mkdir()
    (tmp_path / "trec" / "test.txt").write_text("DESC:def what is it ?\n")
    for name, data, said in (
        ("icl", tmp_path / "trec", "has no train.txt; icl reads the TREC folder"),
        ("mqar", stores["one"], "holds no MQAR data"),
    ):
        assert main(["eval", name, "--model", str(tiny_runs["a"]), "--data", str(data), "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], err


def test_sigterm_wrapped_by_a_library_still_exits_143(monkeypatch, capsys):
    """A library that turns what its callback raised into its own error (the SystemExit of SIGTERM
    inside it) made a terminated command exit 1 with a traceback; it is still 143, with one line."""
    import contextlab.cli as cli

    def library_call(argv):
        try:
            cli._terminated(15, None)
        except SystemExit as exc:
            raise RuntimeError("callback failed") from exc

    monkeypatch.setattr(cli, "_TERMINATING", [])
    monkeypatch.setattr(cli, "_main", library_call)
    assert cli.main(["eval"]) == 143
    assert "terminated by SIGTERM (RuntimeError" in capsys.readouterr().err

    def plain_failure(argv):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "_TERMINATING", [])
    monkeypatch.setattr(cli, "_main", plain_failure)
    with pytest.raises(RuntimeError, match="a bug"):  # without SIGTERM it is a bug: its traceback stays
        cli.main(["eval"])


@pytest.mark.parametrize("cuda", [False, True])
def test_device_auto_is_the_gpu_when_one_is_visible(cuda, monkeypatch):
    from types import SimpleNamespace

    from contextlab.cli.runtime import check_compute

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    args = SimpleNamespace(batch_size=8, threads=0, device="auto")
    check_compute(args)
    assert args.device == ("cuda" if cuda else "cpu")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_that_runs_a_model_defaults_to_device_auto(command, capsys):
    with pytest.raises(SystemExit):
        main([*command.split(), "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--device DEVICE auto (a CUDA GPU when one is visible, else the CPU)" in text
    assert "cuda:N (default: auto)" in text


@pytest.mark.parametrize("command", COMMANDS)
def test_a_store_given_as_the_model_is_named_as_one(command, tiny_runs, stores, llama, capsys):
    """`eval ppl --model STORE` said the output folder lay inside the store; generate said "no
    checkpoints; train first"."""
    argv = _command(command, tiny_runs, stores, llama)
    i = argv.index("--model") + 1
    argv[i] = str(stores["one"])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--model {argv[i]} is a token store, not a model" in err[0], err


@pytest.mark.parametrize(
    "argv",
    [
        ["profile", "--model", "{a}", "--compare", "{b}", "--data", "{data}", "--out", "{out}"],
        ["analyze", "attention", "--model", "{a}", "--compare", "{b}", "--data", "{data}"],
        ["eval", "ppl", "--model", "{a}", "--model", "{b}", "--data", "{data}", "--out", "{out}"],
    ],
    ids=["profile", "analyze attention", "eval"],
)
def test_a_second_model_without_its_tokenizer_is_named_before_the_first_loads(
    argv, tiny_runs, stores, llama, tmp_path, monkeypatch, capsys
):
    """A profile of two models loaded the first (53 s on a loaded machine) before saying the second had
    no tokenizer.json."""
    import shutil

    import contextlab.inference

    bare = tmp_path / "no-tokenizer"
    shutil.copytree(llama, bare)
    (bare / "tokenizer.json").unlink()

    def loaded(*a, **k):
        raise AssertionError("a model was loaded before the check")

    monkeypatch.setattr(contextlab.inference, "open_model", loaded)
    fill = {"{a}": str(tiny_runs["a"]), "{b}": str(bare), "{data}": str(stores["one"])}
    fill["{out}"] = str(tmp_path / "o")
    assert main([fill.get(x, x) for x in argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"contextlab {' '.join(argv[:2]) if argv[0] == 'analyze' else argv[0]}: error: {bare} has no "
        "tokenizer.json; save the model's fast tokenizer beside it (tokenizer.save_pretrained(folder))"
    ], err
