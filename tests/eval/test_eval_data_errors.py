"""Every evaluation that reads --data answers a path it cannot use in one line, never a traceback.

A user's trial passed the lost-in-the-middle folder to ``eval kv`` and got ``IsADirectoryError`` from
deep inside kv.py; kv now names the file of that folder to pass. The same matrix (a folder, an empty
folder, a missing path, an empty file, a text file, JSON lines of another format) is run through the
command line for every evaluation that reads --data.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from contextlab.cli import main
from contextlab.data.tokenizers import ByteTokenizer
from contextlab.eval import kv
from contextlab.train.checkpoint import write_untrained_run
from tests.conftest import KV_75
from tests.eval.conftest import tiny_gpt


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data_errors")
    return write_untrained_run(
        root / "run", tiny_gpt(0, context=64), ByteTokenizer(), note="test"
    ).parent.parent


@pytest.fixture(scope="module")
def datas(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad_data")
    lim = root / "lost_in_the_middle"  # laid out as the public data: two kv files and others
    lim.mkdir()
    for name in (
        "kv-retrieval-140_keys.jsonl.gz",
        "kv-retrieval-75_keys.jsonl.gz",
        "nq-open-oracle.jsonl.gz",
    ):
        shutil.copy(KV_75, lim / name)
    (lim / "SOURCE.txt").write_text("where it came from")
    (root / "empty_folder").mkdir()
    (root / "empty.jsonl").write_bytes(b"")
    (root / "text.txt").write_text("plain text, not a store\n" * 20)
    (root / "other.jsonl").write_text('{"a": 1}\n')
    return {
        "folder": lim,
        "empty folder": root / "empty_folder",
        "missing": root / "missing",
        "empty file": root / "empty.jsonl",
        "text file": root / "text.txt",
        "other jsonl": root / "other.jsonl",
    }


def test_kv_with_a_folder_names_the_file_to_pass(run, datas, capsys):
    folder = datas["folder"]
    assert main(["eval", "kv", "--model", str(run), "--data", str(folder), "--no-progress"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"contextlab eval: error: --data {folder} is a folder; kv reads one key-value file: pass --data "
        f"{folder / 'kv-retrieval-75_keys.jsonl.gz'} (or kv-retrieval-140_keys.jsonl.gz beside it)"
    ]
    assert main(["eval", "kv", "--model", str(run), "--data", str(datas["empty folder"])]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"contextlab eval: error: --data {datas['empty folder']} is a folder with no .jsonl or .jsonl.gz "
        f"file; kv reads one key-value file: pass --data FILE, e.g. {kv.EXAMPLE}"
    ]
    assert not (run / "eval").exists()


EVALS = ["ppl", "contextwise", "bayes-fit", "niah", "kv", "mqar", "icl", "infill"]
VALID = {("niah", "text file")}  # a haystack: it runs (into the context check of a 64-token model)


@pytest.mark.parametrize("name", EVALS)
@pytest.mark.parametrize(
    "what", ["folder", "empty folder", "missing", "empty file", "text file", "other jsonl"]
)
def test_an_unusable_data_path_is_one_line(run, datas, tmp_path, name, what, capsys):
    args = ["eval", name, "--model", str(run), "--data", str(datas[what]), "--out", str(tmp_path / "out")]
    assert main([*args, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("contextlab eval: error: "), err
    if (name, what) not in VALID:
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["ppl", "contextwise", "bayes-fit"])
def test_text_given_where_a_store_is_read_names_the_ingest_with_the_models_tokenizer(
    run, datas, name, capsys
):
    for what in ("text file", "folder"):
        data = datas[what]
        assert main(["eval", name, "--model", str(run), "--data", str(data), "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"contextlab eval: error: --data {data} is text, and {name} reads a token store: ingest it with "
            f"the model's tokenizer (contextlab data ingest {data} --tokenizer dir:{run / 'tokenizer'} --out "
            "STORE) and pass STORE, or run `contextlab profile`, which takes text"
        ]


def test_niah_given_a_token_store_as_its_haystack_says_so(run, tmp_path, capsys):
    """The store's config.toml was read as the haystack (every other file left out) and the needle
    hidden in it; exit 0 and a meaningless result."""
    from contextlab.data.ingest import IngestConfig, ingest

    (tmp_path / "text.txt").write_text("some words of text " * 200)
    store = ingest(
        tmp_path / "text.txt", tmp_path / "store", IngestConfig(tokenizer="byte"), progress=False
    ).store
    argv = ["eval", "niah", "--model", str(run), "--data", str(store.path), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--data {store.path} is a token store, and the haystack is text the needle is hidden in" in err
    assert not (tmp_path / "o" / "niah.json").exists()


@pytest.mark.parametrize("name", ["passkey", "vartrack"])
def test_an_evaluation_that_reads_no_data_refuses_one(run, tmp_path, capsys, name):
    """passkey --data STORE ran on its built-in filler and said nothing of the store."""
    (tmp_path / "t.txt").write_text("text")
    argv = [
        "eval",
        name,
        "--model",
        str(run),
        "--data",
        str(tmp_path / "t.txt"),
        "--out",
        str(tmp_path / "o"),
    ]
    assert main(argv) == 2
    assert f"{name} reads no --data: its text is built in; leave --data out" in capsys.readouterr().err


@pytest.mark.parametrize(
    "option,said",
    [
        (["--length", "1"], "--length must be 0 (the default) or at least 2"),
        (["--best-fraction", "0"], "--best-fraction must be in (0, 1]"),
        (["--best-fraction", "-0.1"], "--best-fraction must be in (0, 1]"),
        (["--best-fraction", "1.5"], "--best-fraction must be in (0, 1]"),
        (["--max-docs", "-5"], "--max-docs must be 0 (the default) or more, got -5"),
        (["--pieces-per-doc", "-1"], "--pieces-per-doc must be 0 (as many as fit) or more"),
        (["--train-context", "-8"], "--train-context must be 0 (the default) or more"),
    ],
)
def test_contextwise_refuses_values_it_has_no_meaning_for(run, tmp_path, capsys, option, said):
    """--length 1 and --best-fraction 0 ended in a traceback; --max-docs -5 dropped the last 5 pieces in
    silence (a slice); --best-fraction 1.5 averaged the whole curve as the "best-context loss"."""
    (tmp_path / "t.txt").write_text("some text to score " * 40)
    store = tmp_path / "store"
    assert main(["data", "ingest", str(tmp_path / "t.txt"), "--tokenizer", "byte", "--out", str(store)]) == 0
    capsys.readouterr()
    argv = ["eval", "contextwise", "--model", str(run), "--data", str(store), "--out", str(tmp_path / "o")]
    assert main(argv + option) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and not (tmp_path / "o" / "contextwise.json").exists()
