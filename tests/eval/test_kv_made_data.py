"""``eval kv`` without --data: examples of random UUID pairs made in memory, recorded and compared."""

from __future__ import annotations

import json

import pytest

from contextlab.cli import main
from contextlab.data.kv_synthetic import write_kv_file
from contextlab.data.tokenizers import ByteTokenizer
from contextlab.eval import kv
from contextlab.eval.results import file_hash
from contextlab.train.checkpoint import write_untrained_run
from tests.conftest import KV_75
from tests.eval.conftest import tiny_gpt


def test_made_examples_are_the_lost_in_the_middle_format_and_hash_as_their_file(tmp_path):
    rows, source = kv.examples(None, 5)
    assert len(rows) == 5 and all(len(r["ordered_kv_records"]) == kv.SYNTHETIC_PAIRS for r in rows)
    assert all(any(k == r["key"] for k, _ in r["ordered_kv_records"]) for r in rows)
    assert "file" not in source and "300 an example" in source["synthetic"]
    # the same lines written as a file hash the same: the record says which data it was
    assert source["hash"] == file_hash(write_kv_file(tmp_path / "kv.jsonl", 5, kv.SYNTHETIC_PAIRS, seed=0))
    assert kv.examples(None, 3)[0] == rows[:3]  # more examples extend the same ones
    rows_file, source_file = kv.examples(str(KV_75), 2)
    assert len(rows_file) == 2 and source_file == {"file": str(KV_75), "hash": file_hash(KV_75)}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("kv_made")
    return write_untrained_run(
        root / "run", tiny_gpt(0, context=512), ByteTokenizer(), note="test"
    ).parent.parent


def test_eval_kv_runs_without_data_and_a_rerun_with_other_data_is_refused(run, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["eval", "kv", "--model", str(run), "--out", str(out), "--n-examples", "2", "--no-progress"]
    argv += ["--scoring", "likelihood"]
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert "data random UUID pairs, 300 an example (seed 0; no --data)" in said
    doc = json.loads((out / "kv.json").read_text())
    assert doc["data"]["synthetic"].startswith("random UUID pairs") and "file" not in doc["data"]
    assert doc["data"]["n_examples"] == 2 and doc["data"]["n_pairs"] >= 2
    assert main(argv) == 0  # the same settings again: a reproduction
    capsys.readouterr()
    assert main([*argv, "--data", str(KV_75)]) == 2  # other data: refused, naming both
    assert f"--data (none) -> {KV_75}" in capsys.readouterr().err
    other = tmp_path / "other"
    with_file = ["eval", "kv", "--model", str(run), "--out", str(other), "--n-examples", "2", "--no-progress"]
    with_file += ["--scoring", "likelihood", "--data", str(KV_75)]
    assert main(with_file) == 0
    capsys.readouterr()
    assert main(with_file[:-2]) == 2
    assert f"--data {KV_75} -> (none)" in capsys.readouterr().err


def test_help_no_longer_calls_data_required(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "kv", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "required:" not in text and "default: examples of 300 random UUID pairs" in text


def test_visible_reads_the_default_data_of_niah_and_kv(run, tmp_path, capsys):
    """eval visible --task niah without --data used to stop with 'niah needs a haystack' after its
    settings line, while eval niah reads the shipped books; both now read the same default."""
    base = ["eval", "visible", "--model", str(run), "--no-progress", "--visible", "0.5,1"]
    for task in ("niah", "kv"):
        out = tmp_path / task
        assert main([*base, "--task", task, "--out", str(out)]) == 0, capsys.readouterr().err
        data = json.loads((out / "visible.json").read_text())["data"]
        assert ("haystack" in data) if task == "niah" else ("synthetic" in data)
        assert main([*base, "--task", task, "--out", str(out)]) == 0  # a rerun is a reproduction
