"""A token store changed after it was written is caught by the commands that consume it (Robustness II
item 6): one token id changed in place (same size, every check of opening passes) is refused by
``data pack`` and ``train`` in one line; ``--no-verify`` / ``data.verify=false`` uses it as it is; an
unchanged store is read once and remembered by its files' stamps."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from contextlab.cli import main
from contextlab.data.store import VERIFIED_FILE, TokenStore
from tests.conftest import shakespeare, write_tree

TRAIN_TOML = """
[model]
size = "tiny-2x128"
n_layer = 1
n_embd = 32
n_head = 2
[data]
store = "{store}"
val_split = "tail"
val_fraction = 0.1
[optim]
warmup_steps = 1
[train]
out_dir = "{out}"
context = 32
tokens_per_step = 128
max_steps = 1
val_every = 0
ckpt_every = 0
threads = 1
progress = false
dtype = "fp32"
"""


@pytest.fixture
def store(tmp_path):
    text = shakespeare(8_000)
    write_tree(tmp_path / "corpus", {f"p{i}.txt": text[i * 2000 : (i + 1) * 2000] for i in range(4)})
    assert (
        main(["data", "ingest", str(tmp_path / "corpus"), "--out", str(tmp_path / "store"), "--no-progress"])
        == 0
    )
    return tmp_path / "store"


def change_one_token(store) -> None:
    """Overwrite token 100 with another valid id, in place: same size, same offsets."""
    dtype = np.dtype(json.loads((store / "meta.json").read_text())["dtype"])
    with open(store / "tokens.bin", "r+b") as fh:
        fh.seek(100 * dtype.itemsize)
        old = int(np.frombuffer(fh.read(dtype.itemsize), dtype)[0])
        fh.seek(100 * dtype.itemsize)
        fh.write(np.array([old ^ 1], dtype).tobytes())  # another byte id, still in the vocabulary


def pack_args(store, out, *more):
    return [
        "data",
        "pack",
        str(store),
        "--method",
        "ep",
        "--context",
        "31",
        "--out",
        str(out),
        "--no-progress",
        *more,
    ]


def test_pack_refuses_a_store_changed_in_place(store, tmp_path, capsys):
    assert main(pack_args(store, tmp_path / "p1")) == 0
    assert (store / VERIFIED_FILE).is_file()  # remembered: the next pack of this store reads nothing
    change_one_token(store)
    TokenStore(store)  # opening still passes: sizes, counts and offsets are all as meta.json says
    capsys.readouterr()
    assert main(pack_args(store, tmp_path / "p2")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "changed after it was written" in err[0] and "--no-verify" in err[0]
    assert not (tmp_path / "p2").exists() and not (tmp_path / "p2.partial").exists()
    assert main(pack_args(store, tmp_path / "p3", "--no-verify")) == 0  # as it is, when asked


def test_train_refuses_a_store_changed_in_place(store, tmp_path, capsys):
    config = tmp_path / "run.toml"
    config.write_text(TRAIN_TOML.format(store=store, out=tmp_path / "run"))
    change_one_token(store)
    capsys.readouterr()
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "changed after it was written" in err[0]
    assert err[0].endswith("(or skip this check with data.verify=false to use it as it is)")
    assert main(["train", str(config), "--set", "data.verify=false"]) == 0
    run = tmp_path / "run"
    capsys.readouterr()
    assert main(["eval", "ppl", "--model", str(run), "--data", str(store), "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # eval has no option to skip it: none is named
    assert len(err) == 1 and err[0].endswith("ingest the source again")


def test_a_verified_store_is_checked_again_once_its_files_change(store, tmp_path):
    TokenStore(store).check_content()
    seen = json.loads((store / VERIFIED_FILE).read_text())
    TokenStore(store).check_content()  # unchanged: the record stands
    assert json.loads((store / VERIFIED_FILE).read_text()) == seen
    change_one_token(store)
    st = os.stat(store / "tokens.bin")
    assert [st.st_size, st.st_mtime_ns, st.st_ino] != seen["stamp"]["tokens.bin"]
    with pytest.raises(Exception, match="changed after it was written"):
        TokenStore(store).check_content()


def test_ids_outside_the_vocabulary_are_one_line_in_train_and_eval(store, tmp_path, capsys):
    """Robustness II item 12: a store holding ids >= its vocabulary (its content hash agreeing, as from a
    faulty writer) gave `IndexError: index out of range in self` in train and eval."""
    from contextlab.data.store_write import content_hash

    config = tmp_path / "run.toml"
    config.write_text(TRAIN_TOML.format(store=store, out=tmp_path / "run"))
    assert main(["train", str(config)]) == 0
    tokens = np.memmap(store / "tokens.bin", dtype=np.uint16, mode="r+")
    tokens[5] = 60_000
    tokens.flush()
    del tokens
    meta = json.loads((store / "meta.json").read_text())
    meta["content_hash"] = content_hash(store / "tokens.bin", store / "offsets.npy")
    (store / "meta.json").write_text(json.dumps(meta))
    capsys.readouterr()
    ev = [
        "eval",
        "contextwise",
        "--model",
        str(tmp_path / "run"),
        "--data",
        str(store),
        "--out",
        str(tmp_path / "ev"),
    ]
    for argv in (
        ev + ["--max-docs", "1", "--length", "32"],
        ["train", str(config), "--set", f"train.out_dir={tmp_path / 'r2'}"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "token id 60000" in err[0] and "outside the vocabulary" in err[0], err
    # with the check skipped (data.verify = false: "use it as it is") a damaged id was a 53-line
    # IndexError traceback, or, as an input only, trained through in silence
    tokens = np.memmap(store / "tokens.bin", dtype=np.uint16, mode="r+")
    tokens[::50] = 60_000  # in every batch
    tokens.flush()
    del tokens
    unchecked = [
        "train",
        str(config),
        "--set",
        f"train.out_dir={tmp_path / 'r3'}",
        "--set",
        "data.verify=false",
    ]
    assert main(unchecked) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "reads token id 60000" in err[0] and "vocabulary of 257" in err[0], err
