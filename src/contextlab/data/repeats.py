"""Text in which earlier spans recur: the training data of the retrieval positive control.

A model scores above chance on needle, key-value and passkey retrieval only if it copies from its
context. ``with_repeats`` takes a piece of plain text and inserts copies at random points, each up
to ``max_distance`` characters after its first occurrence (a later insertion between the two can
widen that by a span): an earlier span of the text itself, or
a block of random "words" (letters and digits, the strongest copying signal: nothing but the
context predicts it) written twice. None of the evaluations' prompt formats (needle sentences,
JSON key-value pairs, pass keys) is used: the model learns to copy, not the tasks.
``repetition_documents`` cuts texts into documents and repeats in each; every repeat is returned
with the character offsets of both occurrences, so the loss on copied spans can be measured
against the loss on first-seen text. Trade-off: distances are in characters, which are tokens
for the byte tokenizer the positive control uses and about a quarter of that many BPE tokens.
"""

from __future__ import annotations

import random
import re
import string
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from contextlab.config import opt
from contextlab.errors import UserError

_ALPHABET = string.ascii_lowercase + string.digits


@dataclass
class RepeatOptions:
    doc_chars: int = opt(2000, "characters of source text per document (before the copies are added)")
    min_repeats: int = opt(2, "fewest copies inserted per document")
    max_repeats: int = opt(5, "most copies inserted per document")
    random_fraction: float = opt(0.5, "share of the copies that are blocks of random words (else text spans)")
    min_span: int = opt(12, "shortest copied span in characters")
    max_span: int = opt(80, "longest copied span in characters")
    max_distance: int = opt(450, "most characters between a span's first occurrence and its copy")
    seed: int = opt(0, "seed of the positions, spans and random words")
    log_distance: bool = opt(
        False,
        "draw each copy's distance log-uniformly (most copies near their first occurrence, some up to "
        "max_distance: near copies teach copying fast, far ones teach it across the context); else uniformly",
    )
    word_pool: int = opt(
        0,
        "draw the random blocks' words from the texts' N most frequent words (whole words are single "
        "tokens of a BPE vocabulary, so one token identifies the span); 0 = random letters and digits",
    )

    def __post_init__(self):
        if not 0 < self.min_span <= self.max_span < self.max_distance < self.doc_chars:
            raise UserError(
                "repeat options need 0 < min_span <= max_span < max_distance < doc_chars; "
                f"got {self.min_span}, {self.max_span}, {self.max_distance}, {self.doc_chars}"
            )
        if not 0 <= self.min_repeats <= self.max_repeats:
            raise UserError("repeat options need 0 <= min_repeats <= max_repeats")


@dataclass(frozen=True)
class Repeat:
    first: int  # character offset of the first occurrence in the document
    copy: int  # character offset of the copy (after the first occurrence, about max_distance at most)
    length: int  # characters of the span
    random_words: bool  # a block of random words (else a span of the text)


def random_words(rng: random.Random, length: int, pool: list[str] | None = None) -> str:
    """About ``length`` characters of random words separated by spaces: drawn from ``pool``, or
    lowercase letters and digits (2 to 9 of them) when there is none."""
    words, n = [], 0
    while n < length:
        w = rng.choice(pool) if pool else "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(2, 9)))
        words.append(w)
        n += len(w) + 1
    return " ".join(words)[:length].strip()


def with_repeats(
    text: str, rng: random.Random, o: RepeatOptions, pool: list[str] | None = None
) -> tuple[str, list[Repeat]]:
    """``text`` with copies inserted (see the module docstring), and where every repeat lies.
    Insertions go between words and never inside an earlier repeat, so every span stays whole."""
    repeats: list[Repeat] = []
    for _ in range(rng.randint(o.min_repeats, o.max_repeats)):
        length = rng.randint(o.min_span, o.max_span)
        is_random = rng.random() < o.random_fraction
        if is_random:
            span = random_words(rng, length, pool)
            first = _free(text, rng.randint(0, max(0, len(text) - o.max_distance)), repeats)
            text, repeats = _insert(text, first, span, repeats)
        else:
            first = _free(text, rng.randint(0, max(0, len(text) - o.max_distance - length)), repeats)
            span = text[first : first + length].rstrip()
            if any(first < r.first + r.length and r.first < first + len(span) for r in repeats) or any(
                first < r.copy + r.length and r.copy < first + len(span) for r in repeats
            ):
                continue  # the span would overlap an earlier repeat: skip this one
        gap = _gap(rng, len(span) + 1, o.max_distance - len(span), o.log_distance)
        copy = _free(text, min(first + gap, len(text)), repeats)
        text, repeats = _insert(text, copy, span, repeats)
        repeats.append(Repeat(first, copy, len(span), is_random))
    return text, repeats


def _gap(rng: random.Random, lo: int, hi: int, log: bool) -> int:
    """A distance in [lo, hi]: uniform, or log-uniform when ``log``."""
    if not log or lo >= hi:
        return rng.randint(lo, hi)
    return min(hi, int(lo * (hi / lo) ** rng.random()))


def _insert(text: str, at: int, span: str, repeats: list[Repeat]) -> tuple[str, list[Repeat]]:
    """``span`` and a space inserted at ``at``; the repeats' offsets at or after it moved."""
    n = len(span) + 1

    def move(x: int) -> int:
        return x + n if x >= at else x

    moved = [Repeat(move(r.first), move(r.copy), r.length, r.random_words) for r in repeats]
    return text[:at] + span + " " + text[at:], moved


def _free(text: str, i: int, repeats: list[Repeat]) -> int:
    """The first position at or after ``i`` that starts a word (or ends the text) and lies
    outside every repeat's two occurrences."""
    while True:
        j = i
        while 0 < j < len(text) and text[j - 1] != " ":
            j += 1
        for r in repeats:
            for start in (r.first, r.copy):
                if start < j < start + r.length:
                    j = start + r.length
        if j == i:
            return min(i, len(text))
        i = j


def word_pool(texts: Iterable[str], n: int) -> list[str]:
    """The ``n`` most frequent lowercase words (letters only, 3 or more) of ``texts``, most frequent first."""
    counts = Counter(w for text in texts for w in re.findall(r"[a-z]{3,}", text.lower()))
    return [w for w, _ in counts.most_common(n)]


def repetition_documents(
    texts: Sequence[str], o: RepeatOptions, pool: list[str] | None = None
) -> Iterator[tuple[str, list[Repeat]]]:
    """Documents of ``o.doc_chars`` characters cut from ``texts`` (whitespace runs made one space),
    each with its copies inserted; random blocks draw from ``pool`` (default: ``word_pool(texts,
    o.word_pool)`` when ``o.word_pool``, else letters and digits)."""
    rng = random.Random(o.seed)
    if pool is None and o.word_pool:
        pool = word_pool(texts, o.word_pool)
    for text in texts:
        flat = " ".join(text.split())
        for a in range(0, len(flat) - o.doc_chars + 1, o.doc_chars):
            yield with_repeats(flat[a : a + o.doc_chars], rng, o, pool)
