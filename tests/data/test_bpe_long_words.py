"""BPE training on a run of characters without whitespace: its time grew with the square of the run (a
line of 2,000,000 characters trained for hours and ignored Ctrl-C); runs are cut for training only."""

from __future__ import annotations

from contextlab.data.hf_tokenizer import LONGEST_WORD, _short_words, train_bpe


def test_long_runs_are_cut_for_training_and_encoded_whole():
    cut = next(_short_words(["x" * 3000]))
    assert cut.split("\n") == ["x" * LONGEST_WORD, "x" * LONGEST_WORD, "x" * (3000 - 2 * LONGEST_WORD)]
    assert next(_short_words(["a few words " * 500])) == "a few words " * 500  # prose as it is
    line = "ACGT" * 75_000  # 300,000 characters without a space (a DNA sequence)
    tok = train_bpe(["some prose to learn from " * 200, line], 400)
    ids = tok.encode(line)
    assert tok.decode(ids) == line and len(ids) < len(line) / 2  # merges were learned from it
