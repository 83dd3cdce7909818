"""The needle lands at its row's depth in short prompts whatever the haystack's sentences, and a
cell whose needles stray is named in the result.

A user's trial found needles of 100-token prompts at depth 0 in every row: the needle went to the
last sentence end before the target, and to the start when none came before it (a long first
sentence, "wasteful.If" with no space). Depths are measured here in the GPT-2 tokens of the
prompt, independently of the module's own ``depth_tokens``."""

from __future__ import annotations

import pytest

from contextlab.data.tokenizers import ByteTokenizer, load_tokenizer
from contextlab.eval import controls, needle
from tests.conftest import GPT2_DIR
from tests.eval.conftest import tiny_llama_adapter

NO_SENTENCES = " ".join(
    ["the quick brown fox jumps over a lazy dog while the river runs past old stone walls"] * 180
)
LONG_FIRST = NO_SENTENCES[:4000] + ". " + " ".join(f"Short sentence {i}." for i in range(300))
NO_SPACE_AFTER = " ".join(f"It was wasteful.If so then item {i} is gone" for i in range(400))
DEPTHS = [0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 100.0]


@pytest.fixture(scope="module")
def bpe_adapter():
    tok = load_tokenizer(f"gpt2:{GPT2_DIR}")
    return controls.control_adapter(controls.CopyLM(tok.vocab_size, context=1 << 12), tok, "copy-bpe")


def needle_start(ids: list[int], needle_ids: list[int]) -> int:
    """The index in ``ids`` of the needle's first token (its first word may lack the space: depth 0)."""
    rest = needle_ids[1:]
    starts = [i for i in range(len(ids) - len(rest) + 1) if ids[i : i + len(rest)] == rest]
    assert len(starts) == 1
    return starts[0] - 1


@pytest.mark.parametrize("hay", [NO_SENTENCES, LONG_FIRST, NO_SPACE_AFTER], ids=["none", "long", "glued"])
@pytest.mark.parametrize("length", [100, 228, 484])
def test_the_needle_lies_within_tolerance_of_every_depth(bpe_adapter, hay, length):
    o = needle.Options()
    tok = bpe_adapter.tokenizer
    tail = tok.encode("\n\nQuestion: " + o.question + "\nAnswer: " + o.answer_prefix)
    for depth in DEPTHS:
        for value in (o.answers[0], o.answers[3]):  # the shortest and the longest value
            ids, control, meta = needle.build_prompt(bpe_adapter, hay, length, depth, o, value)
            sentence = needle.needle_sentence(o, value)
            needle_ids = tok.encode(" " + sentence)
            start = needle_start(ids, needle_ids)
            hay_tokens = len(ids) - len(tail) - len(needle_ids)  # the haystack's tokens in the prompt
            assert ids[-len(tail) :] == tail and len(ids) <= length
            assert abs(start / hay_tokens - depth / 100) <= needle.DEPTH_TOLERANCE, (depth, start, hay_tokens)
            assert abs(meta["depth_tokens"] - start / hay_tokens) < 0.02  # the recorded depth is where it is
            text = tok.decode(ids[: -len(tail)])
            if depth == 0:  # before the haystack's first word
                assert start == 0 and text.startswith(sentence + " ")
            if depth == 100:  # after its last, right before the question
                assert start == hay_tokens and text.endswith(" " + sentence)
                assert ids[start:] == needle_ids + tail
            assert tok.decode(control[: -len(tail)]) == text.replace(" " + sentence, "", 1).replace(
                sentence + " ", "", 1
            )  # the control is the same haystack without the needle


def test_insertion_prefers_a_sentence_end_then_whitespace_then_the_target():
    hay = "One two three. Four five six seven eight nine ten eleven twelve"
    # offsets: the sentence ends at 14 (after the "."); spaces after words at 3, 7, 19, 24, 28, 34, 40, 45
    assert needle.insert_needle(hay, "N.", 20, (10, 30)) == (
        hay[:14] + " N." + hay[14:],
        14,
    )  # the end before
    assert needle.insert_needle(hay, "N.", 10, (5, 20))[1] == 14  # none before in the window: the end after
    # no sentence end inside the window: the whitespace nearest the target (ties: the earlier)
    assert needle.insert_needle(hay, "N.", 37, (30, 45)) == (hay[:34] + " N." + hay[34:], 34)
    assert needle.insert_needle(hay, "N.", 38, (30, 45))[1] == 40
    glued = "abcdefghijklmnopqrstuvwxyz"  # no whitespace at all: the target itself
    assert needle.insert_needle(glued, "N.", 10, (5, 15)) == ("abcdefghij N.klmnopqrstuvwxyz", 10)
    assert needle.insert_needle(hay, "N.", 2, (0, 5)) == ("N. " + hay, 0)  # the start counts as a boundary
    # without a window: DEPTH_TOLERANCE of the text either side (here 3 characters: no end, a space)
    assert needle.insert_needle(hay, "N.", 37) == (hay[:34] + " N." + hay[34:], 34)


def test_a_cell_whose_needles_stray_is_named_in_the_result(tmp_path, monkeypatch):
    (tmp_path / "hay.txt").write_text(NO_SENTENCES)
    adapter = tiny_llama_adapter(context=256)
    assert isinstance(adapter.tokenizer, ByteTokenizer)
    o = needle.Options(
        lengths=[160],
        depths=[0.0, 50.0, 100.0],
        samples=1,
        question="Which color?",
        answer_prefix="The color is",
        answers=["red.", "blue."],
        scoring="likelihood",
    )
    res = needle.run(adapter, o, str(tmp_path)).results
    assert res["depth_check"] == {"tolerance": 0.05, "within_tolerance": True, "cells_off": []}
    assert not any("needle depth" in line for line in res["text"])
    actual = {tuple(c["cell"]): c["depth_actual"] for c in res["by_cell"]}
    assert actual[(0.0, 160)] == [0.0, 0.0] and actual[(100.0, 160)] == [1.0, 1.0]
    assert abs(actual[(50.0, 160)][0] - 0.5) <= 0.05 and actual[(50.0, 160)][0] == actual[(50.0, 160)][1]

    # the old placement (no sentence end before the target: the start) is caught, not labelled 50%
    monkeypatch.setattr(needle, "insert_needle", lambda hay, s, target, window=None: (s + " " + hay, 0))
    res = needle.run(adapter, o, str(tmp_path)).results
    assert res["depth_check"] == {
        "tolerance": 0.05,
        "within_tolerance": False,
        "cells_off": [{"cell": [50.0, 160], "depth_actual": [0.0, 0.0]}],
    }
    assert res["text"][-1] == (
        "needle depth: in 1 of 3 cells the needle lies more than 5% of the haystack from its row's depth "
        "(depth_check); their heatmap rows are labelled by the requested depth, not where the needle is"
    )


def test_a_needle_exactly_at_the_tolerance_is_within_it():
    """0.80 for a 75% row is 0.05 off, which floating point makes 0.050000000000000044: still within (the
    quickstart's 128-token cell was flagged for it)."""
    from contextlab.eval import needle, tasks

    samples = [tasks.Sample([1], "a", [[1]], (75.0, 128), 1, {"depth_tokens": d}) for d in (0.76, 0.8)]
    assert needle.depth_check(samples)["within_tolerance"]
    samples.append(tasks.Sample([1], "a", [[1]], (75.0, 128), 1, {"depth_tokens": 0.81}))
    assert needle.depth_check(samples)["cells_off"] == [{"cell": [75.0, 128], "depth_actual": [0.76, 0.81]}]
