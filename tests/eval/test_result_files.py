"""An evaluation's files are put in place together (Robustness II item 5): a failure while writing a
new result (a full disk) leaves the old one whole, never the new arrays beside the old JSON."""

from __future__ import annotations

import errno
import json

import numpy as np
import pytest

import contextlab.eval.results as R


def write(out, value: float, arrays_value: int):
    return R.write_result(
        out,
        "contextwise",
        results={"best_context_loss": value},
        options={},
        model={"path": "m"},
        data={"path": "d"},
        seconds=1.0,
        arrays={
            "pieces": np.full(4, arrays_value),
            "piece_bucket_loss": np.full((4, 2), float(arrays_value)),
        },
    )


def test_a_full_disk_while_writing_the_json_leaves_the_old_result_whole(tmp_path, monkeypatch):
    write(tmp_path, 1.0, 1)
    real = R.atomic_write_text

    def full_disk(path, text):
        if str(path).endswith(".json"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, text)

    monkeypatch.setattr(R, "atomic_write_text", full_disk)
    with pytest.raises(OSError):
        write(tmp_path, 2.0, 2)
    doc = json.loads((tmp_path / "contextwise.json").read_text())
    assert doc["results"]["best_context_loss"] == 1.0
    for key, fname in doc["arrays"].items():  # the old JSON's arrays are still the old run's
        assert np.all(np.load(tmp_path / fname) == 1), key
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".contextwise.written",  # the record of the files results of contextwise wrote here
        "contextwise.json",
        "contextwise.piece_bucket_loss.npy",
        "contextwise.pieces.npy",
    ]  # no staging folder left behind


def test_a_new_result_replaces_the_old_one_with_all_its_arrays(tmp_path):
    write(tmp_path, 1.0, 1)
    path = write(tmp_path, 2.0, 2)
    doc = json.loads(path.read_text())
    assert doc["results"]["best_context_loss"] == 2.0
    assert all(np.all(np.load(tmp_path / f) == 2) for f in doc["arrays"].values())
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [".contextwise.written"]


def test_arrays_the_new_result_has_not_go_with_the_old_result_and_no_other_file(tmp_path):
    """niah rerun with other scoring left the old run's correct_exact arrays beside the new result."""

    def niah(**arrays):
        return R.write_result(
            tmp_path, "niah", results={}, options={}, model={}, data={}, seconds=0.0, arrays=arrays
        )

    niah(correct_exact=np.ones(60), cell=np.zeros(60))
    (tmp_path / "niah.notes.npy").write_bytes(b"the user's own file")  # named by no result: kept
    path = niah(cell=np.zeros(30))
    assert json.loads(path.read_text())["arrays"] == {"cell": "niah.cell.npy"}
    assert (
        not (tmp_path / "niah.correct_exact.npy").exists() and len(np.load(tmp_path / "niah.cell.npy")) == 30
    )
    assert (tmp_path / "niah.notes.npy").read_bytes() == b"the user's own file"


def test_a_store_given_relative_is_recorded_absolute(tmp_path, monkeypatch):
    """entropy.json recorded `stores/heldout` where ppl.json and contextwise.json recorded the absolute
    path; the report then read it from wherever it was run."""
    from contextlab.cli import main
    from contextlab.data.tokenizers import ByteTokenizer
    from contextlab.train.checkpoint import write_untrained_run
    from tests.eval.conftest import tiny_gpt

    run = write_untrained_run(
        tmp_path / "run", tiny_gpt(0, context=32), ByteTokenizer(), note="t"
    ).parent.parent
    (tmp_path / "t.txt").write_text("some text to score, and more of it. " * 30)
    monkeypatch.chdir(tmp_path)
    assert main(["data", "ingest", "t.txt", "--tokenizer", "byte", "--out", "stores/s"]) == 0
    assert main(["eval", "ppl", "--model", str(run), "--data", "stores/s", "--out", "o"]) == 0
    entropy = [
        "--contexts",
        "4,8,16",
        "--samples",
        "50",
        "--estimators",
        "",
        "--kde-dims",
        "0",
        "--n-components",
        "10",
    ]
    assert (
        main(["analyze", "entropy", "--model", str(run), "--data", "stores/s", "--out", "o", *entropy]) == 0
    )
    for name in ("ppl", "entropy"):
        doc = json.loads((tmp_path / "o" / f"{name}.json").read_text())
        assert doc["data"]["store"] == str((tmp_path / "stores" / "s").resolve()), name
