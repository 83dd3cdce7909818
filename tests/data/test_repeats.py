"""The positive control's training text: every inserted copy repeats its span exactly, within the
promised distance, and spans never break each other."""

from __future__ import annotations

import random

import pytest

from contextlab.data.repeats import RepeatOptions, repetition_documents, with_repeats, word_pool
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


def test_word_pool_blocks_are_whole_frequent_words():
    """With ``word_pool`` the random blocks are drawn from the texts' most frequent words (the last
    one may be cut at the span's length), so a BPE tokenizer sees one token per word."""
    texts = [shakespeare(60_000)]
    pool = word_pool(texts, 200)
    assert len(pool) == 200 and len(set(pool)) == 200
    assert pool[0] in {"the", "and"} and all(w.isalpha() and w.islower() and len(w) >= 3 for w in pool)
    o = RepeatOptions(doc_chars=1500, min_repeats=4, max_repeats=6, max_distance=400, word_pool=200)
    words = [
        w
        for text, repeats in repetition_documents(texts, o)
        for r in repeats
        if r.random_words
        for w in text[r.first : r.first + r.length].split()[:-1]
    ]
    assert len(words) > 200 and set(words) <= set(pool)
    assert len(set(words)) > 100  # drawn across the pool, not a few words


def test_log_distance_puts_most_copies_near_their_first_occurrence():
    texts = [shakespeare(60_000)]
    gaps = {}
    for log in (False, True):
        o = RepeatOptions(doc_chars=3000, min_repeats=1, max_repeats=1, max_distance=2000, log_distance=log)
        gaps[log] = sorted(r.copy - r.first for _, repeats in repetition_documents(texts, o) for r in repeats)
    median = {log: g[len(g) // 2] for log, g in gaps.items()}
    assert len(gaps[True]) >= 15 and max(gaps[True]) > 900  # far copies still occur
    assert median[True] < 0.6 * median[False]
