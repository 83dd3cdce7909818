"""A sweep notices a store ingested again at its path: a run trained on other content than its store
holds now is stale (refused, or trained again with --overwrite), and an evaluation that read a store
now holding other content is run again. A user's sweep kept both runs as done, trained a new one on
the new text, and ranked the three together."""

from __future__ import annotations

import pytest

from contextlab.cli import main
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.errors import UserError
from contextlab.sweep.runner import run_sweep
from tests.conftest import shakespeare
from tests.sweep.conftest import tiny_sweep


def _store(path, text: str):
    src = path.parent / f"{path.name}.txt"
    src.write_text(text)
    return ingest(src, path, IngestConfig(), progress=False, overwrite=True).store


def test_a_store_ingested_again_makes_its_runs_stale_and_its_evaluations_rerun(tmp_path, capsys):
    train_store = _store(tmp_path / "train", shakespeare(20_000))
    eval_store = _store(tmp_path / "held", shakespeare(30_000)[20_000:])
    f = tiny_sweep(tmp_path, train_store, "d")
    text = f.read_text().replace(
        "threads_per_run = 1",
        f'threads_per_run = 1\nevals = ["ppl"]\neval_args = {{ ppl = ["--data", "{eval_store.path}"] }}',
    )
    f.write_text(text)
    run_sweep(f, progress=False)
    capsys.readouterr()
    assert main(["sweep", str(f), "--dry-run"]) == 0
    assert "rerun" not in capsys.readouterr().out

    _store(tmp_path / "held", shakespeare(40_000)[30_000:])  # the evaluation's store, ingested again
    assert main(["sweep", str(f), "--dry-run"]) == 0
    assert "which holds other content now" in capsys.readouterr().out
    run_sweep(f, progress=False)
    err = capsys.readouterr().err
    assert f"read {eval_store.path}, which holds other content now (" in err and "running it again" in err
    assert main(["sweep", str(f), "--dry-run"]) == 0
    assert "rerun" not in capsys.readouterr().out  # evaluated on the new content: done

    _store(tmp_path / "train", shakespeare(25_000)[5_000:])  # the training store, ingested again
    with pytest.raises(UserError, match=r"data\.store .* holds other content than it trained on"):
        run_sweep(f, progress=False)
    run_sweep(f, progress=False, overwrite=True)  # trained again, in a fresh folder, on the new content
    run_sweep(f, progress=False)
