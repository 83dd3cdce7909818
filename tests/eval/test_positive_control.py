"""The positive controls: models that read their context must score high on every retrieval task
that retrieval can solve, through the same adapter and scoring as any checkpoint.

``CopyLM`` (the in-context copier) at >= 500 samples per task, with bytes and with GPT-2's BPE;
the tasks a pure copier cannot solve by construction (key-value asked by a question, variable
tracking, ICL) stay near chance, and key-value asked with the key restated as written (an
associative recall of one pair) is solved. scripts/positive_control_table.py prints the same
table at longer prompts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from contextlab.data.tokenizers import ByteTokenizer, load_tokenizer
from contextlab.eval import contextwise, controls, visible
from tests.conftest import GPT2_DIR, REPO

FIXTURES = REPO / "tests" / "fixtures"


def test_the_copier_predicts_the_token_after_the_most_recent_longest_match():
    row = np.array([1, 2, 3, 9, 1, 2, 3, 4, 5, 2, 3])
    #               t: 0  1  2  3  4  5  6  7  8  9 10
    got = controls.CopyLM.predictions(row)[0]
    assert got.tolist() == [-1, -1, -1, -1, 2, 3, 9, -1, -1, 3, 4]
    both = controls.CopyLM.predictions(np.stack([row, row[::-1]]))  # rows of a batch do not mix
    assert (
        both[0].tolist() == got.tolist()
        and both[1].tolist() == controls.CopyLM.predictions(row[::-1])[0].tolist()
    )
    # t=6 (suffix 1 2 3) matches t=2 by three tokens: 9 followed it; t=10 (suffix 2 3) matches both
    # t=2 and t=6 by two tokens (5 2 3 vs 1 2 3 and 9 1 2 3 differ before): the most recent, 4


def test_the_copier_assigns_its_probability_and_spreads_the_rest():
    model = controls.CopyLM(10, p=0.9)
    logp = torch.log_softmax(model(torch.tensor([[1, 2, 1]])).logits, -1)[0]
    assert torch.allclose(logp[0].exp(), torch.full((10,), 0.1))  # nothing before: uniform
    assert logp[2, 2].exp().item() == pytest.approx(0.9)  # after "1" came "2"
    assert logp[2, 5].exp().item() == pytest.approx(0.1 / 9)


@pytest.fixture(scope="module")
def byte_table(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("copy")
    tok = ByteTokenizer()
    adapter = controls.control_adapter(controls.CopyLM(tok.vocab_size, context=1 << 16), tok, "copy")
    options = controls.copy_options(320)  # >= 500 samples each: the table; 50-64 here
    options["niah"].samples = options["passkey"].samples = 2
    options["kv"].sets = options["kv_recall"].sets = 4
    options["vartrack"].samples = 13
    data = controls.fixture_data(FIXTURES, tmp)
    names = ("niah", "passkey", "kv", "kv_recall", "vartrack")
    return {r["task"]: r for r in controls.control_table(adapter, data, options, names)}


@pytest.mark.parametrize("task", ["niah", "passkey", "kv_recall"])
def test_the_copier_solves_needle_passkey_and_recall_at_byte_level(byte_table, task):
    row = byte_table[task]
    assert row["n"] >= 50
    assert row["accuracy"] >= 0.95 and row["ci95"][0] >= 0.9, row["accuracy"]


@pytest.mark.parametrize("task", ["kv", "vartrack"])
def test_what_a_copier_cannot_solve_stays_near_chance(byte_table, task):
    """kv asked by a question needs a lookup by key (the copier continues whatever its suffix
    matched); vartrack asks which variables hold a value, written before their names."""
    row = byte_table[task]
    assert row["ci95"][0] <= row["chance"] + 0.05 and row["accuracy"] < 0.4, row["accuracy"]


def test_the_copier_solves_needle_and_passkey_with_a_bpe(tmp_path):
    tok = load_tokenizer(f"gpt2:{GPT2_DIR}")
    adapter = controls.control_adapter(controls.CopyLM(tok.vocab_size, context=1 << 16), tok, "copy-bpe")
    options = controls.copy_options(256)  # a 50,257-id vocabulary: every position is 200x a byte's work
    options["niah"].samples = options["passkey"].samples = 1  # 25 prompts each: a test, not the table
    table = controls.control_table(
        adapter, controls.fixture_data(FIXTURES, tmp_path), options, ("niah", "passkey")
    )
    for row in table:
        assert row["accuracy"] == 1.0 and row["n"] == 25, row


def test_contextwise_and_visible_run_on_the_copier(byte_store):
    """The copier through the loss curve and the visible-context sweep. On plain text its loss is
    log V where nothing can be copied yet, and worse where it copies confidently and wrongly; the
    passkey is found only when the visible context holds it."""
    tok = ByteTokenizer()
    adapter = controls.control_adapter(controls.CopyLM(tok.vocab_size, context=128), tok, "copy")
    out = contextwise.run(adapter, contextwise.Options(length=129, max_docs=0), str(byte_store.path))
    curve = np.asarray(out.results["loss"])
    assert np.isfinite(curve).all() and curve[0] >= np.log(tok.vocab_size) - 0.1
    options = visible.Options(task="passkey", visible=[0.1, 1.0], length=256)
    points = visible.run(adapter, options, None).results["points"]
    assert points[-1]["likelihood_accuracy"] == 1.0 and points[0]["likelihood_accuracy"] < 0.5
