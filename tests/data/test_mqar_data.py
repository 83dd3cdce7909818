"""MQAR data: exact token ids of a tiny store, the answer rule, the vocabulary, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contextlab.cli import main
from contextlab.data import mqar
from contextlab.data.store import TokenStore
from contextlab.data.tokenizers import load_saved_tokenizer
from contextlab.errors import UserError


def test_tiny_store_has_exact_ids_and_answers(tmp_path):
    cfg = mqar.MQARConfig(pairs=2, keys=3, values=4, docs=2, seed=0)  # keys 0..2, values 3..6, '_' 7
    store = TokenStore(mqar.write_mqar_store(cfg, tmp_path / "s", progress=False))
    assert [store.doc(i).tolist() for i in range(2)] == [[0, 3, 1, 6, 0, 3, 1, 6], [1, 3, 0, 5, 0, 5, 1, 3]]
    assert store.doc_meta(1) == {"id": 1, "distances": [2, 6]}  # key 0 at 2 asked at 4, key 1 at 0 at 6
    info = store.meta["mqar"]
    assert info["layout"] == {"key_ids": [0, 3], "value_ids": [3, 7], "fill": 7, "eot": 8}
    assert info["answer_rule"] == mqar.ANSWER_RULE and info["length"] == 8
    rows = np.stack([store.doc(i) for i in range(2)])
    assert mqar.answer_positions(rows, 3).astype(int).tolist() == [[0, 0, 0, 0, 0, 1, 0, 1]] * 2
    tok = load_saved_tokenizer(tmp_path / "s" / "tokenizer")
    assert tok.vocab_size == 9 and tok.decode(store.doc(0)) == "k0 v0 k1 v3 k0 v0 k1 v3"
    assert tok.encode("k2 v1 _") == [2, 4, 7] and tok.eot_id == 8
    again = TokenStore(mqar.write_mqar_store(cfg, tmp_path / "t", progress=False))
    assert np.array_equal(again.doc(1), store.doc(1))  # same seed, same ids


def test_filler_spreads_the_queries(tmp_path):
    cfg = mqar.MQARConfig(pairs=2, keys=3, values=4, queries=1, context=8, docs=2)
    store = TokenStore(mqar.write_mqar_store(cfg, tmp_path / "s", progress=False))
    assert [store.doc(i).tolist() for i in range(2)] == [[0, 3, 1, 6, 7, 0, 3, 7], [1, 3, 0, 5, 7, 7, 0, 5]]
    big = mqar.MQARConfig(pairs=8, keys=20, values=30, queries=5, context=64, docs=300)
    s = mqar.sample(big, 300, np.random.default_rng(0))
    rows = mqar.to_tokens(s, big)
    back = mqar.parse_rows(rows, big)
    assert all(np.array_equal(getattr(s, f), getattr(back, f)) for f in ("keys", "values", "asked", "slots"))
    assert (np.diff(s.slots, axis=1) >= 2).all() and s.slots.min() >= 16 and s.slots.max() <= 62
    assert mqar.answer_positions(rows, 20).sum(1).tolist() == [5] * 300  # exactly the queries' answers
    for r in rows:  # keys and values distinct within a row
        assert len(set(r[0:16:2])) == 8 and len(set(r[1:16:2])) == 8


def test_bad_configs_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="keys=4 and values=64 must both be >= pairs=8"):
        mqar.MQARConfig(pairs=8, keys=4)
    with pytest.raises(ValueError, match="context=10"):
        mqar.MQARConfig(pairs=4, context=10)
    assert (
        main(["data", "synthetic", "mqar", "--out", str(tmp_path / "x"), "--pairs", "9", "--keys", "8"]) == 2
    )
    with pytest.raises(UserError, match="holds no MQAR data"):
        mqar.mqar_of_store(type("S", (), {"meta": {}, "path": "p"})())


def test_cli_writes_the_store_and_documents_every_option(tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["data", "synthetic", "mqar", "--out", str(out), "--pairs", "3", "--docs", "5", "--no-progress"]
    assert main(args) == 0
    assert "key_ids = [0, 64]" in capsys.readouterr().out
    assert json.loads((out / "mqar.json").read_text())["config"]["pairs"] == 3
    assert TokenStore(out).n_docs == 5 and TokenStore(out).doc(0).size == 12
    with pytest.raises(SystemExit):
        main(["data", "synthetic", "mqar", "--help"])
    text = capsys.readouterr().out
    for flag in ("--pairs", "--keys", "--values", "--queries", "--context", "--docs", "--seed"):
        assert flag in text
    assert "--n-bits" not in text  # the parity options stay with parity
