"""Runs are relocatable: export, eval and analyze find a run's tokenizer from any working directory.

The project below trains the way people do: from its own folder, with relative paths
(``data.store = "stores/bpe"``, ``train.out_dir = "out/runs/tiny"``). The commands then run
from somewhere else. A BPE tokenizer is used on purpose: a byte tokenizer is rebuilt from its
spec and would hide a missing tokenizer folder.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from contextlab.cli import main
from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.errors import UserError
from contextlab.eval import load_model
from tests.conftest import shakespeare

RUN = "out/runs/tiny"
TINY = {
    "model": {"size": "tiny-4x256", "n_layer": 2, "n_head": 2, "n_embd": 32},
    "data": {"store": "stores/bpe", "val_split": "tail", "val_fraction": 0.1},
    "optim": {"lr": 3e-3, "warmup_steps": 2},
    "train": {
        "out_dir": RUN,
        "context": 32,
        "tokens_per_step": 256,
        "max_steps": 2,
        "val_every": 0,
        "ckpt_every": 0,
        "threads": 1,
        "peak_flops": 1e12,
        "progress": False,
        "dtype": "fp32",
        "log_every": 1,
    },
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A project folder in which a tiny BPE store and run were made with relative paths."""
    from contextlab.train.config import RunConfig
    from contextlab.train.trainer import train

    proj = tmp_path_factory.mktemp("proj")
    text = shakespeare(30_000)
    (proj / "corpus").mkdir()
    for i in range(3):
        (proj / "corpus" / f"part{i}.txt").write_text(text[i * 10_000 : (i + 1) * 10_000])
    cwd = os.getcwd()
    os.chdir(proj)
    try:
        ingest("corpus", "stores/bpe", IngestConfig(tokenizer="bpe:300"), progress=False)
        train(from_dict(RunConfig, json.loads(json.dumps(TINY))))
    finally:
        os.chdir(cwd)
    return proj


def store_hash(proj) -> str:
    return json.loads((proj / "stores/bpe/meta.json").read_text())["tokenizer"]["hash"]


def elsewhere(tmp_path, monkeypatch):
    work = tmp_path / "elsewhere"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def test_a_run_carries_its_tokenizer(project):
    spec = json.loads((project / RUN / "tokenizer" / "tokenizer_spec.json").read_text())
    assert spec["name"] == "bpe-300" and spec["hash"] == store_hash(project)
    assert (project / RUN / "tokenizer" / "tokenizer.json").is_file()  # the files, not only the spec


def test_export_from_another_directory_writes_the_tokenizer(project, tmp_path, monkeypatch):
    work = elsewhere(tmp_path, monkeypatch)
    assert main(["export", str(project / RUN), "--out", "hf"]) == 0
    spec = json.loads((work / "hf" / "tokenizer" / "tokenizer_spec.json").read_text())
    assert spec["hash"] == store_hash(project)
    assert load_model(work / "hf").tokenizer.hash == store_hash(project)


def test_eval_from_another_directory_finds_the_tokenizer(project, tmp_path, monkeypatch):
    work = elsewhere(tmp_path, monkeypatch)
    args = ["eval", "ppl", "--model", str(project / RUN), "--data", str(project / "stores/bpe")]
    assert main([*args, "--out", "ev", "--max-docs", "1", "--max-tokens", "200"]) == 0
    doc = json.loads((work / "ev" / "ppl.json").read_text())
    assert doc["model"]["tokenizer"]["hash"] == store_hash(project)


def test_a_moved_run_still_loads(project, tmp_path, monkeypatch):
    moved = tmp_path / "archive" / "tiny"
    shutil.copytree(project / RUN, moved)  # the run alone, far from its store
    elsewhere(tmp_path, monkeypatch)
    assert load_model(moved).tokenizer.hash == store_hash(project)


def test_an_old_run_finds_the_store_it_was_trained_from(project, tmp_path, monkeypatch):
    old = tmp_path / "old"
    shutil.copytree(project, old)
    shutil.rmtree(
        old / RUN / "tokenizer", ignore_errors=True
    )  # as written before runs carried their tokenizer
    work = elsewhere(tmp_path, monkeypatch)
    assert load_model(old / RUN).tokenizer.hash == store_hash(project)
    assert main(["export", str(old / RUN), "--out", "hf"]) == 0
    assert (work / "hf" / "tokenizer" / "tokenizer_spec.json").is_file()


def test_an_old_run_without_its_store_is_one_clear_error(project, tmp_path, monkeypatch, capsys):
    lonely = tmp_path / "lonely" / "tiny"
    shutil.copytree(project / RUN, lonely)
    shutil.rmtree(lonely / "tokenizer", ignore_errors=True)
    work = elsewhere(tmp_path, monkeypatch)
    with pytest.raises(UserError, match="cannot find the tokenizer"):
        load_model(lonely)
    assert main(["export", str(lonely), "--out", "hf"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot find the tokenizer" in err[0]
    assert not (work / "hf").exists()  # never an export without its tokenizer


def test_an_old_byte_run_exports_with_its_rebuilt_tokenizer(tmp_path, monkeypatch):
    """A byte tokenizer is fully described by its spec: an old run far from its store still exports."""
    from contextlab.train.config import RunConfig
    from contextlab.train.trainer import train

    (tmp_path / "corpus.txt").write_text(shakespeare(20_000))
    store = ingest(tmp_path / "corpus.txt", tmp_path / "bytes", IngestConfig(), progress=False).store
    cfg = json.loads(json.dumps(TINY))
    cfg["data"]["store"], cfg["train"]["out_dir"] = str(store.path), str(tmp_path / "run")
    train(from_dict(RunConfig, cfg))
    shutil.rmtree(tmp_path / "run" / "tokenizer")
    shutil.rmtree(store.path)
    work = elsewhere(tmp_path, monkeypatch)
    assert main(["export", str(tmp_path / "run"), "--out", "hf"]) == 0
    spec = json.loads((work / "hf" / "tokenizer" / "tokenizer_spec.json").read_text())
    assert spec["hash"] == store.tokenizer_hash and load_model("hf").tokenizer.hash == store.tokenizer_hash
