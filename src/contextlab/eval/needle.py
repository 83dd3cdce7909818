"""Needle in a haystack: a fact hidden at depth d% of a long text, asked about at the end.

Haystack: plain text files (``--data``: a folder of .txt or one file; public-domain
books by default, or the Paul Graham essays of the original test), read in name order,
CRLF normalised. For every context length L and depth d, the haystack is cut to the
tokens left after the needle and the question, and the needle sentence is inserted at
the last sentence boundary at or before d% of the haystack tokens, so it never splits a
sentence and lands within one sentence of the requested depth. Samples of one cell start
at different sentences of the haystack.

The prompt ends in the first words of the answer ("Answer: The best thing to do in San
Francisco is"), which makes base models answer in-line. Scoring (``tasks.score_samples``):
greedy generation matched exactly or as a substring, and the likelihood of the true
answer against distractor answers of the same form; the heatmap shows accuracy by depth
(rows) and length (columns).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import contextlab.eval.tasks as tasks
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.base import EvalOutput
from contextlab.eval.results import text_hash

NEEDLE = "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day."
QUESTION = "What is the best thing to do in San Francisco?"
ANSWER_PREFIX = "The best thing to do in San Francisco is"
ANSWER = "eat a sandwich and sit in Dolores Park on a sunny day."
DISTRACTORS = [
    "visit the Golden Gate Bridge and walk across it at sunset.",
    "ride a cable car up the hill and look out over the bay.",
    "take a ferry to Alcatraz Island on a cold and foggy morning.",
    "walk through Chinatown and eat dumplings late in the evening.",
]
SENTENCE_END = re.compile(r"""[.!?]["'”’)\]]*(?=\s)""")


@dataclass
class Options:
    lengths: list[int] = opt(
        [], "prompt lengths in tokens; empty = 1/4, 1/2, 1 and 2 (RoPE) times the model's context"
    )
    depths: list[float] = opt([0.0, 25.0, 50.0, 75.0, 100.0], "needle depths in percent of the haystack")
    samples: int = opt(2, "haystacks per (length, depth) cell, each starting at a different sentence")
    needle: str = opt(NEEDLE, "the sentence to hide")
    question: str = opt(QUESTION, "the question asked after the haystack")
    answer_prefix: str = opt(ANSWER_PREFIX, "the start of the answer, written into the prompt")
    answer: str = opt(ANSWER, "the answer the model must produce after answer_prefix")
    distractors: list[str] = opt(DISTRACTORS, "wrong answers for likelihood scoring (separate with commas)")
    scoring: Literal["likelihood", "generate", "both"] = opt("both", "how the answer is scored")
    max_new_tokens: int = opt(0, "tokens to generate; 0 = the answer's length + 4")


def read_haystack(data: str | Path) -> str:
    p = Path(data)
    files = sorted(p.glob("*.txt")) if p.is_dir() else [p]
    if not files:
        raise UserError(
            f"no .txt files in {p}; pass --data a folder of text files "
            "(e.g. ../shared/data/paul_graham_essays)"
        )
    text = "\n\n".join(f.read_bytes().decode("utf-8", errors="replace").replace("\r\n", "\n") for f in files)
    return re.sub(r"[ \t]+", " ", text)


def sentence_boundaries(text: str) -> list[int]:
    """Character offsets just after every sentence end (before the following whitespace)."""
    return [m.end() for m in SENTENCE_END.finditer(text)]


def insert_needle(hay: str, needle: str, target_char: int) -> tuple[str, int]:
    """Insert ``needle`` at the last sentence boundary at or before target_char: (text, insert offset)."""
    b = 0
    for end in sentence_boundaries(hay):
        if end > target_char:
            break
        b = end
    if b == 0:
        return needle + " " + hay.lstrip(), 0
    return hay[:b] + " " + needle + hay[b:], b


def build_prompt(adapter, hay: str, length: int, depth: float, o: Options) -> tuple[list[int], dict]:
    """Prompt ids of about ``length`` tokens with the needle at ``depth`` percent of the haystack."""
    tok = adapter.tokenizer
    tail = tok.encode("\n\nQuestion: " + o.question + "\nAnswer: " + o.answer_prefix)
    budget = length - len(tok.encode(" " + o.needle)) - len(tail)
    if budget < 8:
        raise UserError(f"length {length} leaves no room for a haystack; use longer --lengths")
    hay_ids = tok.encode(hay[: budget * 12])[:budget]
    if len(hay_ids) < budget:
        raise UserError(f"the haystack is too short for {length} tokens; give more text in --data")
    hay_text = tok.decode(hay_ids)
    target = len(tok.decode(hay_ids[: int(round(depth / 100 * len(hay_ids)))]))
    text, at = insert_needle(hay_text, o.needle, target)
    before = tok.encode(text[:at]) if at else []
    rest = tok.encode(text[at:])
    ids = (before + rest)[: length - len(tail)] + tail
    return ids, {"insert_char": at, "target_char": target, "depth_tokens": len(before) / max(len(hay_ids), 1)}


def build(adapter, o: Options, data: str | None) -> tuple[list[tasks.Sample], dict]:
    if not data:
        raise UserError(
            "niah needs a haystack: pass --data a folder of .txt files (public-domain books, or "
            "../shared/data/paul_graham_essays)"
        )
    hay = read_haystack(data)
    ctx = adapter.context
    lengths = o.lengths or [ctx // 4, ctx // 2, ctx] + ([2 * ctx] if adapter.info.extends_beyond else [])
    for L in lengths:
        adapter.check_length(L + 32, f"needle length {L}")
    starts = [0] + sentence_boundaries(hay[:200_000])[::97][1:]
    tok = adapter.tokenizer
    true = tok.encode(" " + o.answer)
    cands = [true] + [tok.encode(" " + d) for d in o.distractors]
    samples = []
    for L in lengths:
        for d in o.depths:
            for k in range(o.samples):
                start = starts[k % len(starts)]
                ids, meta = build_prompt(adapter, hay[start:].lstrip(), L, d, o)
                samples.append(
                    tasks.Sample(
                        ids,
                        o.answer,
                        cands,
                        cell=(d, L),
                        max_new=o.max_new_tokens or len(true) + 4,
                        meta=meta,
                    )
                )
    info = {"haystack": str(data), "hash": text_hash(hay), "haystack_chars": len(hay), "lengths": lengths}
    return samples, info


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    samples, info = build(adapter, options, data)
    rows = tasks.score_samples(adapter, samples, options.scoring)
    res = tasks.summarize(rows, 1 + len(options.distractors))
    res["samples"] = [{**r, **s.meta} for r, s in zip(rows, samples)]
    lengths, depths = info["lengths"], options.depths
    _key, cell_key = tasks.headline_metric(res["summary"])
    res["heatmap"] = {
        "metric": cell_key,
        "rows_depth": depths,
        "cols_length": lengths,
        "values": tasks.table(res["by_cell"], cell_key, depths, lengths),
    }

    def plot(path):
        from contextlab.eval.plots import heatmap_png

        return heatmap_png(
            res["heatmap"]["values"],
            depths,
            lengths,
            path,
            row_label="needle depth (%)",
            col_label="context length (tokens)",
            title=f"needle in a haystack ({cell_key}): {adapter.info.id}",
        )

    return EvalOutput(res, info, plot=plot)
