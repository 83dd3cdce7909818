"""``contextlab generate`` end to end on a tiny trained run: streaming, JSONL batches, errors."""

from __future__ import annotations

import json
import shutil

import pytest

from contextlab.cli import main
from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.eval import load_model
from tests.conftest import shakespeare


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from contextlab.train.config import RunConfig
    from contextlab.train.trainer import train

    root = tmp_path_factory.mktemp("gen")
    (root / "src").mkdir()
    (root / "src" / "a.txt").write_text(shakespeare(20_000))
    store = ingest(root / "src", root / "store", IngestConfig(tokenizer="byte"), progress=False).store
    cfg = {
        "model": {"size": "tiny-2x128", "n_embd": 64},
        "data": {"store": str(store.path), "val_split": "tail", "val_fraction": 0.1},
        "optim": {"lr": 3e-3, "warmup_steps": 2},
        "train": {
            "out_dir": str(root / "run"),
            "context": 64,
            "tokens_per_step": 512,
            "max_steps": 8,
            "val_every": 0,
            "val_tokens": 256,
            "ckpt_every": 0,
            "threads": 1,
            "peak_flops": 1e12,
            "progress": False,
            "dtype": "fp32",
        },
    }
    train(from_dict(RunConfig, cfg))
    return root / "run"


def greedy_text(run, prompt: str, n: int) -> str:
    adapter = load_model(run)
    return adapter.tokenizer.decode(adapter.generate(adapter.encode(prompt), n, [adapter.tokenizer.eot_id]))


def test_one_prompt_streams_the_greedy_continuation(run, capsys):
    assert main(["generate", "--model", str(run), "--prompt", "ROMEO:", "--max-new-tokens", "12"]) == 0
    expected = greedy_text(run, "ROMEO:", 12)
    assert len(expected) > 0 and capsys.readouterr().out == expected + "\n"


def test_many_prompts_in_batches_equal_each_alone_and_stop_strings(run, tmp_path, capsys):
    prompts = ["First Citizen:", "O", "What say you to this, my lord? I"]
    file = tmp_path / "p.jsonl"
    file.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    out = tmp_path / "out.jsonl"
    argv = ["generate", "--model", str(run), "--prompts", str(file), "--batch-size", "2", "--out", str(out)]
    assert main([*argv, "--max-new-tokens", "10"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["prompt"] for r in rows] == prompts
    assert [r["completion"] for r in rows] == [greedy_text(run, p, 10) for p in prompts]
    stop = rows[0]["completion"][3:5]  # a stop string inside the first continuation
    assert main([*argv, "--max-new-tokens", "10", "--stop", stop, "--overwrite"]) == 0  # its own rows
    cut = json.loads(out.read_text().splitlines()[0])["completion"]
    assert cut == rows[0]["completion"][: rows[0]["completion"].index(stop)]
    capsys.readouterr()
    sampled = ["generate", "--model", str(run), "--prompts", str(file), "--temperature", "2.0", "--seed", "3"]
    sampled += ["--max-new-tokens", "10"]
    assert main(sampled) == 0  # no --out: JSONL on stdout
    first = [json.loads(line)["completion"] for line in capsys.readouterr().out.splitlines()]
    assert main(sampled) == 0
    assert [json.loads(line)["completion"] for line in capsys.readouterr().out.splitlines()] == first
    assert first != [r["completion"] for r in rows[:3]]


def test_errors_are_one_line(run, tmp_path, capsys):
    assert main(["generate", "--model", str(tmp_path / "nope"), "--prompt", "a"]) == 2
    assert "model not found" in capsys.readouterr().err
    assert main(["generate", "--model", str(run), "--prompt", "x" * 200]) == 2
    err = capsys.readouterr().err
    assert "200 tokens" in err and "context of 64" in err and len(err.strip().splitlines()) == 1
    mlm = tmp_path / "mlm"
    shutil.copytree(run, mlm)
    for state in mlm.rglob("state.json"):  # the run as a masked-LM run records itself
        data = json.loads(state.read_text())
        data["objective"], data["left_to_right"] = "mlm", {"prefix_ids": None, "why": "bidirectional"}
        state.write_text(json.dumps(data))
    assert main(["generate", "--model", str(mlm), "--prompt", "a"]) == 2
    err = capsys.readouterr().err
    assert "mlm" in err and len(err.strip().splitlines()) == 1
    assert main(["generate", "--model", str(run), "--prompt", "a", "--temperature", "-1"]) == 2
    assert "temperature" in capsys.readouterr().err


def test_a_stop_string_written_backslash_n_stops_at_a_newline(run, capsys):
    r"""--stop '\n\n' as the docs write it reaches the CLI as backslash and n (bash does not unescape it):
    \n, \t and \\ are read as a newline, a tab and one backslash; other backslashes stay."""
    from contextlab.cli.generate import stop_text

    assert stop_text(r"\n\n") == "\n\n" and stop_text(r"a\tb") == "a\tb"
    assert stop_text(r"\\n") == "\\n" and stop_text(r"C:\x") == "C:\\x"  # \\: a literal backslash
    full = greedy_text(run, "ROMEO:", 48)
    assert "\n" in full
    argv = ["generate", "--model", str(run), "--prompt", "ROMEO:", "--max-new-tokens", "48"]
    assert main([*argv, "--stop", "\\n"]) == 0  # the two characters backslash and n
    assert capsys.readouterr().out == full[: full.index("\n")] + "\n"


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xff\xfe garbage \x80", "is not UTF-8 text (byte offset 0); save it as UTF-8 (iconv -t utf-8)"),
        (b"", "holds no prompt (it is empty or blank); write one prompt per line"),
        (b"\n  \n", "holds no prompt (it is empty or blank); write one prompt per line"),
        (None, "is a folder; pass a .jsonl or text file with one prompt per line"),
    ],
)
def test_a_prompts_file_that_holds_no_prompt_is_one_line(run, tmp_path, content, message, capsys):
    """A non-UTF-8 prompts file was a UnicodeDecodeError traceback; an empty one wrote 0 continuations
    with exit 0; a folder was "not found"."""
    prompts = tmp_path / "p.txt"
    if content is None:
        prompts.mkdir()
    else:
        prompts.write_bytes(content)
    assert main(["generate", "--model", str(run), "--prompts", str(prompts), "--max-new-tokens", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"--prompts {prompts} {message}")


def test_blank_lines_of_a_prompts_file_are_said(run, tmp_path, capsys):
    prompts = tmp_path / "p.txt"
    prompts.write_text("one\n\ntwo\n")
    assert main(["generate", "--model", str(run), "--prompts", str(prompts), "--max-new-tokens", "1"]) == 0
    assert f"note: --prompts {prompts}: 1 blank line skipped" in capsys.readouterr().err
