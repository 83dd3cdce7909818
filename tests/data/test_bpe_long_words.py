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


def test_a_binary_file_under_a_text_name_is_named_as_what_it_is(tmp_path):
    """A Parquet file named .jsonl was 'not valid UTF-8 ... use --encoding replace', which led only
    to 'not valid JSON'."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq
    import pytest

    from contextlab.data.ingest import IngestConfig, ingest
    from contextlab.errors import UserError

    for name, write, said in (
        ("rows.jsonl", lambda p: pq.write_table(pa.table({"text": ["a b c"] * 3}), p), "is a Parquet file"),
        ("notes.jsonl", lambda p: p.write_bytes(gzip.compress(b'{"text": "a"}')), "is gzip-compressed"),
    ):
        src = tmp_path / name.split(".")[0]
        src.mkdir()
        write(src / name)
        with pytest.raises(
            UserError, match=f"{said} \\(by its first bytes\\), not text; give it the extension"
        ):
            ingest(src, tmp_path / f"{name}.store", IngestConfig(tokenizer="byte"), progress=False)
