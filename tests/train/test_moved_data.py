"""A run's data that moved: a renamed store resumes (same content hash), other content is refused,
a relative path is found in the directory the run was trained in, and the messages say how to pass
the store when it is found nowhere."""

from __future__ import annotations

import json
import shutil

import pytest

from contextlab.config import from_dict
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.errors import UserError
from contextlab.eval.base import trained_store
from contextlab.train.config import RunConfig
from contextlab.train.trainer import train
from tests.conftest import shakespeare

TINY = {
    "model": {"size": "tiny-4x256", "n_layer": 1, "n_head": 2, "n_embd": 32},
    "optim": {"warmup_steps": 2},
    "train": {
        "context": 32,
        "tokens_per_step": 128,
        "val_every": 0,
        "val_tokens": 64,
        "ckpt_every": 2,
        "threads": 1,
        "progress": False,
        "dtype": "fp32",
    },
    "data": {"val_split": "tail", "val_fraction": 0.1},
}


def config(store: str, out_dir: str, steps: int) -> RunConfig:
    data = json.loads(json.dumps(TINY))
    data["data"]["store"] = store
    data["train"].update(out_dir=out_dir, max_steps=steps)
    return from_dict(RunConfig, data)


def make_store(folder, name: str, text: str) -> None:
    (folder / f"{name}.txt").write_text(text)
    ingest(folder / f"{name}.txt", folder / name, IngestConfig(tokenizer="byte"), progress=False)


def test_a_renamed_store_resumes_and_other_content_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    make_store(tmp_path, "st orig", shakespeare(20_000))
    make_store(tmp_path, "other", shakespeare(30_000)[10_000:])
    train(config("st orig", "run", 2))
    state = json.loads((tmp_path / "run/checkpoints/step_000002/state.json").read_text())
    assert state["data"]["cwd"] == str(tmp_path) and state["data"]["paths"]["data.store"]["path"] == "st orig"
    shutil.move("st orig", "st renamed")
    with pytest.raises(UserError) as err:
        train(config("other", "run", 4))
    assert str(err.value).startswith(
        'run holds a run with a different config (data.store "st orig" there, "other" now; its newest '
        "checkpoint is step_000002; data.store holds other content: "
    )
    capsys.readouterr()
    assert train(config("st renamed", "run", 4)).steps == 4
    out = capsys.readouterr().out
    assert (
        "note: data.store is 'st renamed' now and was 'st orig' when run was trained (the same content" in out
    )
    assert "resuming run from step_000002" in out


def test_a_relative_store_is_looked_for_where_the_run_was_trained(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    make_store(tmp_path, "st orig", shakespeare(20_000))
    train(config("st orig", "run", 2))
    run = tmp_path / "run"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # the same config, from another directory
    assert trained_store("st orig", str(run)) == str(tmp_path / "st orig")  # eval's --data
    from contextlab.cli.eval import _data

    assert _data("ppl", "st orig", str(run)) == str((tmp_path / "st orig").resolve())  # the command's check

    shutil.move(tmp_path / "st orig", tmp_path / "gone")  # found nowhere: where to look, how to pass it
    with pytest.raises(UserError) as err:
        train(config("st orig", str(run), 4))
    assert str(err.value) == (
        f"data.store 'st orig' is not found from {tmp_path / 'elsewhere'}: the run {run} names it relative "
        f"to {tmp_path}, where the run was trained; it is not at {tmp_path / 'st orig'} either; pass the "
        "store with --set data.store=PATH"
    )
    with pytest.raises(UserError) as err:
        trained_store("st orig", str(run))
    assert str(err.value) == (
        f"store not found: st orig: the run {run} names its data.store relative to {tmp_path}, where the run "
        f"was trained; it is not at {tmp_path / 'st orig'} either; pass the store as --data STORE"
    )

    shutil.move(tmp_path / "gone", tmp_path / "st orig")
    capsys.readouterr()
    assert train(config("st orig", str(run), 4)).steps == 4
    out = capsys.readouterr().out
    assert f"note: data.store is '{tmp_path / 'st orig'}' now and was 'st orig' when {run} was trained" in out


def test_a_store_ingested_again_under_a_run_is_refused_without_blaming_the_version(tmp_path, capsys):
    """Resuming on a store ingested again at its path printed "validation rows differ ... another version
    of contextlab builds them otherwise" before the refusal that named the real cause."""
    make_store(tmp_path, "s", shakespeare(20_000))
    train(config(str(tmp_path / "s"), str(tmp_path / "run"), 2))
    capsys.readouterr()
    (tmp_path / "s.txt").write_text(shakespeare(30_000)[10_000:])
    ingest(tmp_path / "s.txt", tmp_path / "s", IngestConfig(tokenizer="byte"), progress=False, overwrite=True)
    with pytest.raises(
        UserError, match=r"cannot resume from step_000002: data\.store .* holds other content"
    ):
        train(config(str(tmp_path / "s"), str(tmp_path / "run"), 4))
    assert "another version of contextlab" not in capsys.readouterr().out
