"""An evaluation never replaces a file it did not write: ``--plot`` onto a store's tokens.bin or a run's
metrics.jsonl, or an ``--out`` folder holding a user's ``contextwise.png`` or ``contextwise.pieces.npy``
beside no result, replaced them (exit 0). A write killed while it moved its files in is known for its
own by the rerun, which finishes it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contextlab.cli import main
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.errors import UserError
from contextlab.eval import results as res
from contextlab.train.trainer import train
from tests.conftest import shakespeare
from tests.train.test_moved_data import config as tiny_config  # a 1-layer byte model


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    root = tmp_path_factory.mktemp("kept")
    (root / "t.txt").write_text(shakespeare(20_000))
    ingest(root / "t.txt", root / "store", IngestConfig(tokenizer="byte"), progress=False)
    for name in ("a", "b"):
        train(tiny_config(str(root / "store"), str(root / name), 2))
    return root


def _contextwise(root, *extra) -> int:
    args = ["eval", "contextwise", "--model", str(root / "a"), "--data", str(root / "store")]
    return main([*args, "--max-docs", "2", "--no-progress", *extra])


def test_a_plot_onto_a_file_that_is_no_plot_is_refused_and_the_file_kept(two, tmp_path, capsys):
    tokens = two / "store" / "tokens.bin"
    before = tokens.read_bytes()
    for target in (tokens, two / "a" / "metrics.jsonl"):
        kept = target.read_bytes()
        argv = ["--model", str(two / "b"), "--out", str(tmp_path / "o"), "--plot", str(target)]
        assert _contextwise(two, *argv) != 0
        assert f"--plot {target} exists and is not a PNG" in capsys.readouterr().err
        assert target.read_bytes() == kept
    assert tokens.read_bytes() == before
    assert main(["data", "verify", str(two / "store")]) == 0


def test_an_out_folder_with_files_of_the_users_is_refused_with_or_without_overwrite(two, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "contextwise.png").write_text("mine")
    (out / "contextwise.pieces.npy").write_text("mine too")
    for extra in ((), ("--overwrite",)):
        assert _contextwise(two, "--out", str(out), *extra) != 0
        err = capsys.readouterr().err
        assert "holds contextwise.pieces.npy, contextwise.png, which a contextwise result would write" in err
        assert (out / "contextwise.png").read_text() == "mine"
        assert (out / "contextwise.pieces.npy").read_text() == "mine too"
        assert not (out / "contextwise.json").exists()
    # a result there owns its arrays and plot: a rerun replaces them
    (out / "contextwise.png").unlink()
    (out / "contextwise.pieces.npy").unlink()
    assert _contextwise(two, "--out", str(out)) == 0
    assert _contextwise(two, "--out", str(out)) == 0
    assert res.foreign_files(out, "contextwise") == []


def test_a_write_killed_while_moving_its_files_is_finished_by_the_rerun(tmp_path, monkeypatch):
    def write(**arrays):
        return res.write_result(
            tmp_path, "ppl", results={"summary": {"loss": 1.0}}, options={}, model={"path": "m"},
            data={"store": "s"}, seconds=0.0, arrays=arrays,
        )  # fmt: skip

    write(token_losses=np.ones(3))
    real = res.os.replace
    calls = []

    def killed(src, dst):  # the kill: after the first array is moved, before the JSON
        calls.append(dst)
        if str(dst) == str(tmp_path / "ppl.json"):
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(res.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write(token_losses=np.zeros(3), extra=np.ones(2))
    monkeypatch.undo()
    assert not (tmp_path / "ppl.json").exists() and (tmp_path / "ppl.extra.npy").exists()
    assert res.foreign_files(tmp_path, "ppl") == []  # the marker says they are the write's own
    write(token_losses=np.full(3, 2.0))  # the rerun
    doc = json.loads((tmp_path / "ppl.json").read_text())
    assert doc["arrays"] == {"token_losses": "ppl.token_losses.npy"}
    assert not (tmp_path / "ppl.extra.npy").exists()
    assert set(json.loads((tmp_path / ".ppl.written").read_text())) == {"ppl.token_losses.npy"}
    # a result deleted by hand leaves files contextlab wrote, unchanged: a rerun replaces them
    (tmp_path / "ppl.json").unlink()
    assert res.foreign_files(tmp_path, "ppl") == []
    write(token_losses=np.ones(3))
    # one changed since it was written is no longer the result's: kept, and the write refused
    (tmp_path / "ppl.json").unlink()
    np.save(tmp_path / "ppl.token_losses.npy", np.arange(4))
    assert res.foreign_files(tmp_path, "ppl") == ["ppl.token_losses.npy"]
    (tmp_path / "ppl.token_losses.npy").unlink()
    (tmp_path / "ppl.notes.npy").write_text("a user's")
    assert res.foreign_files(tmp_path, "ppl") == ["ppl.notes.npy"]  # before a run: no result, refused
    write(token_losses=np.ones(3))  # a write that does not touch it goes on, and keeps it
    with pytest.raises(UserError, match="holds ppl.notes.npy, which a ppl result would write"):
        write(token_losses=np.ones(3), notes=np.ones(1))  # one that would replace it is refused
    assert (tmp_path / "ppl.notes.npy").read_text() == "a user's"


def test_results_are_never_written_into_a_store(two, capsys):
    """`analyze attention --out STORE` and `compare --out STORE` wrote their results into the token store
    they read (eval refused it), and the store's `ingest --overwrite` was then refused."""
    store = two / "store"
    before = sorted(p.name for p in store.iterdir())
    for argv in (
        ["analyze", "attention", "--model", str(two / "a"), "--data", str(store), "--out", str(store)],
        ["compare", str(two / "a"), str(two / "b"), "--out", str(store)],
        ["eval", "ppl", "--model", str(two / "a"), "--data", str(store), "--out", str(store / "results")],
    ):
        assert main([*argv, "--no-progress"] if argv[0] != "compare" else argv) != 0
        err = capsys.readouterr().err
        assert "a token store: results written there would mix with its files" in err, err
    assert sorted(p.name for p in store.iterdir()) == before


def test_an_export_holding_its_evaluations_names_them_when_overwrite_is_refused(two, tmp_path, capsys):
    """`export --overwrite` onto an export whose eval/ holds `contextlab eval` results said eval/ was
    something "contextlab does not write there"; it is refused (the results would go with the folder),
    naming them for what they are."""
    hf = tmp_path / "hf"
    assert main(["export", str(two / "a"), "--out", str(hf), "--no-progress"]) == 0
    assert main(["eval", "ppl", "--model", str(hf), "--data", str(two / "store"), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["export", str(two / "a"), "--out", str(hf), "--overwrite", "--no-progress"]) != 0
    err = capsys.readouterr().err
    assert "holds eval/, results of `contextlab eval` of it, which --overwrite would delete" in err
    assert (hf / "eval" / "ppl.json").is_file()


def test_a_window_past_the_context_is_said_in_the_result(two, tmp_path, capsys):
    """`eval ppl --context 1024` of a context-32 model warned on the console only: its result, and the
    report built from it, said nothing of the extrapolated positions."""
    out = tmp_path / "far"
    argv = ["eval", "ppl", "--model", str(two / "a"), "--data", str(two / "store"), "--context", "256"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    assert "contextlab eval: warning: ppl's window runs" in capsys.readouterr().err  # still warned
    text = json.loads((out / "ppl.json").read_text())["results"]["text"]
    assert any(t.startswith("warning: ppl's window runs") and "extrapolated" in t for t in text)


def test_a_data_file_replaced_at_its_path_is_other_data(tmp_path):
    """A key-value file replaced in place (75 keys by 140) let `eval kv` replace its result unasked: only
    a token store's content was compared."""
    f = tmp_path / "kv.jsonl"
    f.write_text('{"a": 1}\n')
    doc = {"data": {"file": str(f), "hash": res.file_hash(f)}, "options": {}}
    assert res.differences(doc, options={}, model={}, data=str(f)) is None
    f.write_text('{"a": 2}\n')
    assert res.differences(doc, options={}, model={}, data=str(f)).startswith("--data content (hash) ")


def _edited_test_file_is_other_data(out, options, folder) -> dict:
    """A result of TREC ``folder`` is the same data to a rerun until its test.txt is edited in place, then
    other data (by the hash of its two files); returns the result's record."""
    doc = {"data": out.data, "options": res.jsonable(options)}
    assert res.differences(doc, options=options, model={}, data=str(folder)) is None
    test = folder / "test.txt"
    test.write_bytes(test.read_bytes().replace(b"LOC:", b"HUM:", 1))
    changed = res.differences(doc, options=options, model={}, data=str(folder))
    now = res.file_hash(folder / "train.txt", test)
    assert changed == f"--data content (hash) {out.data['hash']} -> {now}"
    return doc


def test_icl_data_changed_in_its_folder_is_other_data(tmp_path):
    """icl's TREC folder recorded a hash of its train.txt and test.txt that no rerun compared: a test file
    edited in place let the rerun replace the result unasked."""
    import shutil

    from contextlab.eval import icl
    from tests.conftest import TREC
    from tests.eval.conftest import byte_adapter, tiny_gpt

    folder = tmp_path / "trec"
    shutil.copytree(TREC, folder)
    options = icl.Options(shots=[0], n_test=6, seeds=1, balance=False)
    out = icl.run(byte_adapter(tiny_gpt(7, context=128)), options, str(folder))
    doc = _edited_test_file_is_other_data(out, options, folder)
    (folder / "test.txt").unlink()
    assert res.differences(doc, options=options, model={}, data=str(folder)).endswith("-> (a file missing)")


def test_visible_icl_data_changed_in_its_folder_is_other_data(tmp_path):
    """`visible --task icl` recorded its TREC folder without a hash: a test file edited in place was the
    same data to a rerun."""
    import shutil

    from contextlab.eval import visible
    from tests.conftest import TREC
    from tests.eval.conftest import byte_adapter, tiny_gpt

    folder = tmp_path / "trec"
    shutil.copytree(TREC, folder)
    labels = ["ABBR:exp", "DESC:def", "ENTY:other", "HUM:ind", "LOC:other", "NUM:date"]
    test = folder / "test.txt"  # a label-balanced draw needs 9 of each label
    test.write_text("".join(f"{lab} What is question {i} about ?\n" for lab in labels for i in range(9)))
    options = visible.Options(task="icl", visible=[1.0], shots=2)
    out = visible.run(byte_adapter(tiny_gpt(7, context=256), batch_size=6), options, str(folder))
    _edited_test_file_is_other_data(out, options, folder)


def test_an_export_whose_weights_were_changed_is_not_overwritten(two, tmp_path, capsys):
    """`export --overwrite` replaced weights a user had saved into an export folder: only the file names
    were checked. The export records what it wrote; a file changed since is refused, an unchanged
    export is replaced as before."""
    hf = tmp_path / "hf"
    export = ["export", str(two / "a"), "--out", str(hf), "--no-progress"]
    assert main(export) == 0
    assert main([*export, "--overwrite"]) == 0  # unchanged: replaced
    weights = next(hf.glob("*.safetensors"))
    mine = weights.read_bytes()[:-1] + b"\0"
    weights.write_bytes(mine)
    capsys.readouterr()
    assert main([*export, "--overwrite"]) != 0
    assert f"whose {weights.name} changed since contextlab wrote it" in capsys.readouterr().err
    assert weights.read_bytes() == mine
