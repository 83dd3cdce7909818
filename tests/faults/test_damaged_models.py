"""A damaged Hugging Face folder is one line in eval and generate (Robustness II item 10): a
config.json cut short was a JSONDecodeError, a model.safetensors cut short a SafetensorError."""

from __future__ import annotations

import shutil

import pytest

from contextlab.cli import main
from contextlab.config import from_dict
from tests.conftest import shakespeare, write_tree
from tests.faults.projects import run_config


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from contextlab.train.config import RunConfig
    from contextlab.train.trainer import train

    root = tmp_path_factory.mktemp("damaged")
    write_tree(root / "corpus", {"a.txt": shakespeare(6000)})
    assert main(["data", "ingest", str(root / "corpus"), "--out", str(root / "store"), "--no-progress"]) == 0
    train(from_dict(RunConfig, run_config(root / "store", root / "run")))
    assert main(["export", str(root / "run"), "--out", str(root / "hf")]) == 0
    return root


def cut(path, keep=0.5):
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


@pytest.mark.parametrize("damaged", ["config.json", "model.safetensors"])
@pytest.mark.parametrize("command", ["eval", "generate"])
def test_a_folder_cut_short_is_one_line(exported, tmp_path, damaged, command, capsys):
    folder = tmp_path / "hf"
    shutil.copytree(exported / "hf", folder)
    cut(folder / damaged)
    argv = {
        "eval": ["eval", "contextwise", "--model", str(folder), "--data", str(exported / "store")]
        + ["--out", str(tmp_path / "ev"), "--max-docs", "1", "--length", "32"],
        "generate": ["generate", "--model", str(folder), "--prompt", "ROMEO:", "--max-new-tokens", "4"],
    }[command]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(folder) in err[0] and "again" in err[0], err
