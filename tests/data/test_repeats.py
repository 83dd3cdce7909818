"""The positive control's training text: every inserted copy repeats its span exactly, within the
promised distance, and spans never break each other."""

from __future__ import annotations

import random

import pytest

from contextlab.data.repeats import RepeatOptions, repetition_documents, with_repeats
from contextlab.errors import UserError
from tests.conftest import shakespeare


def test_every_copy_repeats_its_span_whole_and_near():
    o = RepeatOptions(doc_chars=1500, min_repeats=3, max_repeats=6, max_distance=400)
    docs = list(repetition_documents([shakespeare(60_000)], o))
    assert len(docs) == 60_000 // 1500 - 1 or len(docs) == 60_000 // 1500
    n_random = n_text = 0
    for text, repeats in docs:
        assert 0 < len(repeats) <= 6
        for r in repeats:
            first, copy = text[r.first : r.first + r.length], text[r.copy : r.copy + r.length]
            assert first == copy and len(first) == r.length >= 1
            assert (
                r.first + r.length < r.copy <= r.first + o.max_distance + 120
            )  # word boundaries move it a little
            assert r.copy == 0 or text[r.copy - 1] == " "  # copies start a word
            n_random += r.random_words
            n_text += not r.random_words
    assert n_random > 20 and n_text > 20


def test_random_words_appear_only_where_inserted():
    text, repeats = with_repeats(
        "the cat sat on the mat " * 40, random.Random(1), RepeatOptions(doc_chars=900)
    )
    for r in (r for r in repeats if r.random_words):
        span = text[r.first : r.first + r.length]
        assert text.count(span) == 2  # its first occurrence and its copy, nowhere else


def test_bad_options_are_one_line():
    with pytest.raises(UserError, match="min_span <= max_span < max_distance < doc_chars"):
        RepeatOptions(max_span=500, max_distance=450)
