"""An evaluation read on the token store the run trained on says so: one note on stderr and
``training_store: true`` in the result's data, and neither on a store of other text."""

from __future__ import annotations

import json

from contextlab.cli import main
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.train.trainer import train
from tests.conftest import shakespeare
from tests.train.test_moved_data import config as tiny_config  # a 1-layer byte model, tail validation


def test_eval_on_the_training_store_says_so(tmp_path, capsys):
    for name, text in (("train", shakespeare(20_000)), ("other", shakespeare(40_000)[20_000:])):
        (tmp_path / f"{name}.txt").write_text(text)
        ingest(tmp_path / f"{name}.txt", tmp_path / name, IngestConfig(tokenizer="byte"), progress=False)
    train(tiny_config(str(tmp_path / "train"), str(tmp_path / "run"), 2))
    capsys.readouterr()

    def ppl(store: str) -> tuple[str, dict]:
        out = tmp_path / f"eval-{store}"
        args = ["eval", "ppl", "--model", str(tmp_path / "run"), "--data", str(tmp_path / store)]
        assert main([*args, "--out", str(out), "--no-progress"]) == 0
        return capsys.readouterr().err, json.loads((out / "ppl.json").read_text())["data"]

    err, data = ppl("train")
    assert f"note: {tmp_path / 'train'} is the token store {tmp_path / 'run'} trained on" in err
    assert data["training_store"] is True
    err, data = ppl("other")
    assert "trained on" not in err and "training_store" not in data
    hf = tmp_path / "hf"  # a Hugging Face export knows its run by config.json
    assert main(["export", str(tmp_path / "run"), "--out", str(hf), "--no-progress"]) == 0
    out = tmp_path / "eval-hf"
    args = ["eval", "ppl", "--model", str(hf), "--data", str(tmp_path / "train"), "--out", str(out)]
    assert main([*args, "--no-progress"]) == 0
    assert f"is the token store {hf} trained on" in capsys.readouterr().err
    assert json.loads((out / "ppl.json").read_text())["data"]["training_store"] is True


def test_eval_on_text_of_other_line_ends_than_training_says_so(tmp_path, capsys):
    """A model trained on Gutenberg's CRLF books read the same books with LF at +0.67 nats (228.7 to
    446.5 perplexity), and nothing said the line ends differed."""
    text = shakespeare(30_000)
    parts = {"train": text[:20_000].replace("\n", "\r\n"), "crlf": text[20_000:].replace("\n", "\r\n")}
    parts["lf"] = text[20_000:]
    for name, body in parts.items():
        (tmp_path / f"{name}.txt").write_bytes(body.encode())
        ingest(tmp_path / f"{name}.txt", tmp_path / name, IngestConfig(tokenizer="byte"), progress=False)
    train(tiny_config(str(tmp_path / "train"), str(tmp_path / "run"), 2))
    capsys.readouterr()

    def err_of(store: str) -> str:
        args = ["eval", "ppl", "--model", str(tmp_path / "run"), "--data", str(tmp_path / store)]
        assert main([*args, "--out", str(tmp_path / f"e-{store}"), "--no-progress"]) == 0
        return capsys.readouterr().err

    said = err_of("lf")
    share = parts["train"].count("\r") / len(parts["train"])
    assert (
        f"note: {tmp_path / 'run'} trained on text with CRLF line ends ({share:.1%} of its tokens hold "
        f"carriage returns) and {tmp_path / 'lf'} has LF line ends: the loss here is partly of line ends"
    ) in " ".join(said.split())
    assert "line ends" not in err_of("crlf")  # the same line ends: nothing to say
