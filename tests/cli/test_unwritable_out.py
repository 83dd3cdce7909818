"""A model in a folder that cannot be written (a read-only disk, a shared model directory): its results'
default folder is beside it, and every command that writes there says so in one line naming --out,
before it loads the model (it used to load and evaluate, then fail on its lock with a generic line)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from contextlab.cli import main
from contextlab.errors import UserError
from contextlab.outputs import refuse_unwritable


@pytest.fixture
def read_only(monkeypatch):
    """Folders at or below the given ones read as not writable (as a read-only mount does, also for root)."""
    frozen: list[Path] = []
    real = os.access

    def access(path, mode, *args, **kwargs):
        p = Path(path).absolute()
        if mode & os.W_OK and any(p == f or f in p.parents for f in frozen):
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)
    return frozen


def test_the_nearest_existing_folder_decides(tmp_path, read_only):
    refuse_unwritable(tmp_path / "a" / "b", given=True)  # nothing there yet: its parent is writable
    read_only.append(tmp_path)
    with pytest.raises(
        UserError, match=r"--out .*/a/b cannot be written: .* is not writable for this user; give --out DIR"
    ):
        refuse_unwritable(tmp_path / "a" / "b", given=True)
    with pytest.raises(
        UserError, match=r"the results' default folder .* \(beside the model\) cannot be written"
    ):
        refuse_unwritable(tmp_path / "eval", given=False)


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "ppl", "--model", "{model}", "--data", "{store}"],
        ["analyze", "entropy", "--model", "{model}", "--data", "{store}", "--contexts", "4,8"],
        ["analyze", "attention", "--model", "{model}", "--data", "{store}"],
    ],
    ids=["eval", "entropy", "attention"],
)
def test_a_read_only_model_folder_is_refused_before_loading_naming_out(
    argv, llama, stores, read_only, monkeypatch, capsys
):
    import contextlab.eval as ev

    read_only.append(Path(llama))
    monkeypatch.setattr(ev, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    args = [a.format(model=llama, store=stores["one"]) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "(beside the model) cannot be written" in err and "give --out DIR" in err


def test_compare_refuses_before_drawing(tiny_runs, read_only, tmp_path, capsys):
    for run in tiny_runs.values():
        args = [
            "eval",
            "passkey",
            "--model",
            str(run),
            "--lengths",
            "300",
            "--depths",
            "50",
            "--samples",
            "2",
        ]
        assert main([*args, "--no-progress", "--overwrite"]) == 0
    read_only.append(Path(tiny_runs["a"]))
    assert main(["compare", str(tiny_runs["a"]), str(tiny_runs["b"]), "--eval", "passkey"]) == 2
    assert "cannot be written" in capsys.readouterr().err
    assert not (Path(tiny_runs["a"]) / "compare").exists()
