"""A needle's haystack the model trained on is said: its passages are looked for, verbatim as token
ids, in the stores the run (or the run an export was made from) trained on. A user's run trained on
Gutenberg was asked to search the package's Gutenberg books with no word of it."""

from __future__ import annotations

import numpy as np

from contextlab.cli import main
from contextlab.data.ingest import IngestConfig, ingest
from contextlab.eval import seen
from contextlab.eval.adapter import load_model
from contextlab.train.trainer import train
from tests.conftest import shakespeare
from tests.train.test_moved_data import config as tiny_config  # a 1-layer byte model


def test_a_haystack_in_the_training_store_is_found_and_other_text_is_not(tmp_path):
    text = shakespeare(60_000)
    (tmp_path / "train.txt").write_text(text[:30_000])
    ingest(tmp_path / "train.txt", tmp_path / "train", IngestConfig(tokenizer="byte"), progress=False)
    train(tiny_config(str(tmp_path / "train"), str(tmp_path / "run"), 2))
    adapter = load_model(tmp_path / "run")
    found = seen.haystack_in_training(adapter, text[:30_000])
    assert found == {"store": str(tmp_path / "train"), "probes": seen.PROBES, "found": seen.PROBES}
    assert seen.haystack_in_training(adapter, text[30_000:]) is None  # the same play, unseen lines
    note = seen.haystack_note(found)
    assert note.startswith(
        f"8 of 8 passages of the haystack (16 tokens each) occur verbatim in {tmp_path / 'train'}"
    )
    hf = tmp_path / "hf"  # an export knows its run
    assert main(["export", str(tmp_path / "run"), "--out", str(hf), "--no-progress"]) == 0
    assert seen.haystack_in_training(load_model(hf), text[:30_000])["found"] == seen.PROBES


def test_occurs_reads_across_blocks_and_only_up_to_its_limit(monkeypatch):
    monkeypatch.setattr(seen, "BLOCK", 10)
    tokens = np.arange(100) % 37
    probe = np.arange(8, 14)  # tokens 8..13 straddle the block boundary at 10
    assert seen.occurs(tokens, probe)
    assert not seen.occurs(tokens, probe, limit=12)  # it ends at 13
    assert not seen.occurs(tokens, np.array([5, 4]))


def test_niah_on_a_haystack_the_run_trained_on_says_so(tmp_path, capsys):
    import json

    hay = tmp_path / "hay"
    hay.mkdir()
    (hay / "play.txt").write_text(shakespeare(30_000))
    ingest(hay, tmp_path / "train", IngestConfig(tokenizer="byte"), progress=False)
    cfg = tiny_config(str(tmp_path / "train"), str(tmp_path / "run"), 2)
    cfg.train.context, cfg.train.tokens_per_step = 512, 1024
    train(cfg)
    capsys.readouterr()
    args = ["eval", "niah", "--model", str(tmp_path / "run"), "--data", str(hay), "--lengths", "400"]
    assert (
        main([*args, "--depths", "50", "--samples", "1", "--out", str(tmp_path / "e"), "--no-progress"]) == 0
    )
    err = capsys.readouterr().err
    assert (
        f"note: 8 of 8 passages of the haystack (16 tokens each) occur verbatim in {tmp_path / 'train'}"
        in err
    )
    doc = json.loads((tmp_path / "e" / "niah.json").read_text())
    assert doc["data"]["haystack_in_training"]["found"] == 8
    assert any("occur verbatim" in line for line in doc["results"]["text"])
