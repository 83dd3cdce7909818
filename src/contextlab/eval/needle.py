"""Needle in a haystack: a fact hidden at depth d% of a long text, asked about at the end.

Haystack: plain text (``--data``: one file, or a folder read as ``data ingest`` reads it,
every text file at any depth in name order; public-domain books by default, or the Paul
Graham essays of the original test), CRLF normalised, through ingest's folder reader
(``data.sources``): the same rule for bytes that are not UTF-8 (``--encoding``: strict by
default, naming every such file; replace, skip or latin-1, counted in the result's data
record), binary files skipped, and two kinds of file left out and named there: those that
describe the corpus rather than belong to it (README, SOURCE, LICENSE, manifest, ...:
``source_globs.provenance_globs``) and files of records (``RECORD_GLOBS``: JSONL, CSV,
Parquet), whose text is fields, not prose. (Only top-level .txt files were read before:
WikiText's ``wiki.test.raw`` made a folder the profile's other steps read fine "no .txt files".)

For every context length L and depth d, the haystack is cut to the tokens left after the
longest needle and the question, and the needle sentence goes in
at d% of the haystack tokens: 0% before its first word, 100% after its last (right before
the question, as in the original test), and in between at the first of these that lies
within ``DEPTH_TOLERANCE`` (5% of the haystack's tokens) of the target: the last sentence
boundary at or before it, else the first one after it, else the whitespace nearest it
(text with no sentence end close by: a long first sentence, "wasteful.If" with no space),
else the target itself (a token boundary, in text with no whitespace at all). Trade-off: a
needle that may start mid-sentence rather than one that lands far from its depth (backing
up to the last sentence end, as the original test does, put the needles of short prompts
at 0% whatever their row said). Every sample records its actual depth (``depth_tokens``:
haystack tokens before the needle over all of them), every cell of ``by_cell`` the range
of its samples' depths (``depth_actual``), and ``depth_check`` the cells whose samples stray
more than the tolerance from their row's depth (a line of the results text says so; the
heatmap labels rows by the requested depth). Samples of one cell start at different
sentences of the haystack.

The needle is "<answer_prefix> <value>" with its value drawn from a pool (``answers``, by
default the original needle's and four of the same form): every haystack is asked once
with each value as the needle, the others being the wrong candidates, so a model that
ignores the context is right exactly 1/k of the time instead of always picking the value
it finds likelier a priori (the fixed needle scored below chance by construction). The
prompt ends in the first words of the answer ("Answer: The best thing to do in San
Francisco is"), which makes base models answer in-line. Scoring (``scoring.score_samples``):
the likelihood of the true value against the others, calibrated by the same haystack
without the needle; greedy generation matched exactly, as a substring and by keyword
recall. The heatmap shows accuracy by depth (rows) and length (columns).

Default lengths: 1/4, 1/2 and all of the model's context, each less the tokens the answer adds
(the longest value, and the generated tokens when generating), so no default prompt runs past
the context; lengths too short for the question and the needle are left out. Longer prompts
(a RoPE model extrapolating) are measured only when ``--lengths`` asks for them.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import contextlab.eval.progress as progress
import contextlab.eval.scoring as scoring
import contextlab.eval.tasks as tasks
from contextlab.config import opt
from contextlab.data.source_files import walk
from contextlab.data.source_globs import EXCLUDED, RECORD_GLOBS, globs_regex, prose_excludes, provenance_globs
from contextlab.errors import UserError, some
from contextlab.eval.base import PG_ESSAYS, EvalOutput, read_text_files, text_options
from contextlab.eval.results import text_hash
from contextlab.eval.seen import haystack_in_training, haystack_note

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
WORD_END = re.compile(r"(?<=\S)\s")  # the first whitespace character after a word
DEPTH_TOLERANCE = 0.05  # the farthest a needle may land from its depth, as a fraction of the haystack
PROVENANCE = globs_regex(provenance_globs())  # README, SOURCE, LICENSE, ...: not part of a haystack
RECORDS = globs_regex(RECORD_GLOBS)  # JSONL, CSV, Parquet: fields, not prose


@dataclass
class Options:
    lengths: list[int] = opt(
        [],
        "prompt lengths in tokens; empty = 1/4, 1/2 and 1 times the model's context, each less the tokens "
        "of the answer (so no prompt runs past the context; lengths too short for the question are left out)",
    )
    depths: list[float] = opt([0.0, 25.0, 50.0, 75.0, 100.0], "needle depths in percent of the haystack")
    samples: int = opt(
        2,
        "haystacks per (length, depth) cell, each starting at a different sentence and asked once per value",
    )
    question: str = opt(QUESTION, "the question asked after the haystack")
    answer_prefix: str = opt(ANSWER_PREFIX, "the needle's first words, also written into the prompt's answer")
    answers: list[str] = opt(
        [ANSWER, *DISTRACTORS],
        "the pool of needle values (separate with commas): every haystack is asked once with each "
        "as the needle, the others being the wrong candidates (chance = 1 / their number)",
    )
    scoring: Literal["likelihood", "generate", "both"] = opt("both", "how the answer is scored")
    encoding: Literal["strict", "replace", "skip", "latin-1"] = opt(
        "strict",
        "haystack bytes that are not UTF-8, as in data ingest: strict (stop, naming every such file), "
        "replace (U+FFFD), skip (the file), latin-1 (decode the file as Latin-1); all are counted",
    )
    max_new_tokens: int = opt(0, "tokens to generate; 0 = the answer's length + 4")


def _not_a_store(p: Path) -> None:
    """A token store or packed store given as the haystack: one line (its config.toml was read as the
    text, every other file being left out, and the needle hidden in it)."""
    from contextlab.data.packing.packed_store import is_packed_store
    from contextlab.data.store import is_store

    if is_store(p) or is_packed_store(p):
        kind = "a token store" if is_store(p) else "a packed store"
        raise UserError(
            f"--data {p} is {kind}, and the haystack is text the needle is hidden in: give the text it was "
            "made from (a file or a folder of files), or leave --data out for the books contextlab ships"
        )


def read_haystack(data: str | Path, encoding: str = "strict") -> tuple[str, dict]:
    """(the haystack text, what was read: files, the files left out and why, undecodable counts).

    The text files of a folder at any depth (or one file) through ingest's ``open_source``, so the
    encoding policy, hidden, binary and linked files are those of ``data ingest``; provenance files
    (``provenance_globs``) and files of records (``RECORD_GLOBS``) are left out and named; no
    Gutenberg stripping, no streaming of long files."""
    p = Path(data)
    folder = p.is_dir()
    _not_a_store(p)
    options = text_options([], prose_excludes() if folder else [], encoding)
    files, skipped = walk(p, options.include, options.exclude) if folder else ([(p.name, p)], [])
    excluded = [e["path"] for e in skipped if e["reason"] == EXCLUDED]
    provenance = [rel for rel in excluded if PROVENANCE.match(rel)]
    records = [rel for rel in excluded if RECORDS.match(rel) and rel not in provenance]
    if not files:
        links = [e["path"] for e in skipped if e["reason"] == "symlink out of the tree"]
        if links:  # a folder of links to the books elsewhere: the one thing to change is named
            are = "are links" if len(links) > 1 else "is a link"
            raise UserError(
                f"no text files in {p} to read: {some(links)} {are} to files outside it, which a haystack "
                "folder does not follow (as data ingest does not); copy the files into the folder"
            )
        why = [f"as provenance, not text: {some(provenance)}"] if provenance else []
        why += [f"as records, not prose: {some(records)}"] if records else []
        also = f" (left out {'; '.join(why)})" if why else ""
        raise UserError(f"no text files in {p}{also}; pass --data a folder of text files (e.g. {PG_ESSAYS})")
    docs, src, counts = read_text_files(
        p,
        options,
        "no prompt was built: pass --encoding latin-1 (files from before UTF-8), replace (U+FFFD, "
        "counted) or skip (leave them out)",
    )
    text = "\n\n".join(str(d.text).replace("\r\n", "\n") for d in docs)
    record = {
        "haystack_files": src.stats.documents,
        "left_out": [{"path": name, "reason": "provenance, not text"} for name in provenance]
        + [{"path": name, "reason": "records, not prose"} for name in records]
        + [e for e in src.skipped if e["reason"] != EXCLUDED],
        **counts,
    }
    return re.sub(r"[ \t]+", " ", text), record


def sentence_boundaries(text: str) -> list[int]:
    """Character offsets just after every sentence end (before the following whitespace)."""
    return [m.end() for m in SENTENCE_END.finditer(text)]


def insert_needle(
    hay: str, needle: str, target_char: int, window: tuple[int, int] | None = None
) -> tuple[str, int]:
    """Insert ``needle`` near ``target_char``: (text, insert offset). The offset is the last sentence
    boundary at or before the target (the text's start counts as one), else the first after it, else
    the whitespace nearest the target (ties: the earlier), else the target itself, each only inside
    ``window`` (the lowest and highest offsets allowed; default: ``DEPTH_TOLERANCE`` of the text either
    side). The needle goes in as " " + needle before the offset's character (first, then a space, at 0),
    so removing it gives ``hay`` back."""
    if window is None:
        slack = int(DEPTH_TOLERANCE * len(hay))
        window = (target_char - slack, target_char + slack)
    lo, hi = max(0, window[0]), min(len(hay), window[1])
    ends = [b for b in [0, *sentence_boundaries(hay)] if lo <= b <= hi]
    before, after = [b for b in ends if b <= target_char], [b for b in ends if b > target_char]
    if before or after:
        at = before[-1] if before else after[0]
    else:  # the first whitespace character after a word, nearest the target
        spaces = [m.start() for m in WORD_END.finditer(hay, lo, hi + 1)]
        at = min(spaces, key=lambda p: (abs(p - target_char), p)) if spaces else target_char
    if at == 0:
        return needle + " " + hay.lstrip(), 0
    return hay[:at] + " " + needle + hay[at:], at


def depth_check(samples: list[tasks.Sample], tolerance: float = DEPTH_TOLERANCE) -> dict:
    """The cells (depth %, length) whose samples' actual needle depths (``depth_tokens``, fractions of
    the haystack) stray more than ``tolerance`` from the cell's depth, each with its [lowest, highest]."""
    actual: dict[tuple, list[float]] = {}
    for s in samples:
        actual.setdefault(tuple(s.cell), []).append(s.meta["depth_tokens"])
    off = [
        {"cell": list(c), "depth_actual": [min(a), max(a)]}
        for c, a in sorted(actual.items())
        if max(abs(x - c[0] / 100) for x in a) > tolerance + 1e-9  # exactly at it is within (0.8 - 0.75)
    ]
    return {"tolerance": tolerance, "within_tolerance": not off, "cells_off": off}


def needle_sentence(o: Options, value: str) -> str:
    return f"{o.answer_prefix} {value}"


def _tail(adapter, o: Options) -> list[int]:
    """The question and the answer's first words that end every prompt."""
    return adapter.encode("\n\nQuestion: " + o.question + "\nAnswer: " + o.answer_prefix)


def _longest_needle(adapter, o: Options) -> int:
    return max(len(adapter.encode(" " + needle_sentence(o, v))) for v in o.answers)


def build_prompt(
    adapter, hay: str, length: int, depth: float, o: Options, value: str
) -> tuple[list[int], list[int], dict]:
    """(prompt ids of about ``length`` tokens with the needle of ``value`` at ``depth`` percent of the
    haystack, the same prompt without the needle, meta). The haystack is cut for the pool's longest
    needle, so the prompts of one haystack differ only in the needle's value."""
    tok = adapter.tokenizer
    tail = _tail(adapter, o)
    budget = length - _longest_needle(adapter, o) - len(tail)
    if budget < 8:
        raise UserError(f"length {length} leaves no room for a haystack; use longer --lengths")
    hay_ids = tok.encode(hay[: budget * 12])[:budget]
    if len(hay_ids) < budget:
        raise UserError(f"the haystack is too short for {length} tokens; give more text in --data")
    hay_text, n = tok.decode(hay_ids), len(hay_ids)
    t = int(round(depth / 100 * n))  # the needle's target: after t haystack tokens
    target = len(tok.decode(hay_ids[:t]))
    sentence = needle_sentence(o, value)
    if t >= n:  # 100%: after the whole haystack, right before the question
        text, at = hay_text + " " + sentence, len(hay_text)
    else:
        slack = int(DEPTH_TOLERANCE * n)  # tokens either side
        window = (len(tok.decode(hay_ids[: max(0, t - slack)])), len(tok.decode(hay_ids[: t + slack])))
        text, at = insert_needle(hay_text, sentence, target, window)
    keep = length - len(tail)
    before = [] if at == 0 else hay_ids if at >= len(hay_text) else tok.encode(hay_text[:at])
    ids = (before + tok.encode(text[at:]))[:keep] + tail
    control = (before + tok.encode(hay_text[at:] if at else hay_text.lstrip()))[:keep] + tail
    return ids, control, {"insert_char": at, "target_char": target, "depth_tokens": len(before) / n}


def lengths_for(adapter, o: Options) -> tuple[list[int], int, int]:
    """(the prompt lengths: --lengths or the defaults of the module docstring, the tokens the answer
    adds to the longest forward pass, the shortest prompt that holds the question and the needle)."""
    pool = [adapter.encode(" " + v) for v in o.answers]
    longest = max(len(c) for c in pool)
    room = tasks.answer_room(longest, o.scoring, o.max_new_tokens or longest + 4)
    shortest = len(_tail(adapter, o)) + _longest_needle(adapter, o) + 8  # 8: build_prompt's least haystack
    return tasks.prompt_lengths("niah", adapter.context, o.lengths, room, shortest), room, shortest


def build(adapter, o: Options, data: str | None) -> tuple[list[tasks.Sample], dict]:
    if not data:
        raise UserError(
            f"niah needs a haystack: pass --data a folder of text files (public-domain books, or {PG_ESSAYS})"
        )
    if len(o.answers) < 2 or len(set(o.answers)) < len(o.answers):
        raise UserError("niah needs at least two different --answers (the pool of needle values)")
    hay, read = read_haystack(data, o.encoding)
    lengths, room, shortest = lengths_for(adapter, o)
    starts = [0] + sentence_boundaries(hay[:200_000])[::97][1:]
    pool = [adapter.encode(" " + v) for v in o.answers]
    samples: list[tasks.Sample] = []
    for L in lengths:
        for d in o.depths:
            for k in range(o.samples):
                group = len(samples) // len(pool)
                hay_k = hay[starts[k % len(starts)] :].lstrip()
                for j, cands in enumerate(tasks.rotations(pool)):
                    ids, control, meta = build_prompt(adapter, hay_k, L, d, o, o.answers[j])
                    max_new = o.max_new_tokens or len(cands[0]) + 4
                    meta["value"] = j
                    samples.append(
                        tasks.Sample(ids, o.answers[j], cands, (d, L), max_new, meta, control, group)
                    )
    tasks.check_longest(
        adapter,
        samples,
        o.scoring,
        f"the longest niah prompt ({max(lengths):,} tokens) with its answer",
        tasks.lengths_fix("niah", adapter.context, room, shortest),
    )
    info = {
        "haystack": str(data),
        "hash": text_hash(hay),
        "haystack_chars": len(hay),
        "lengths": lengths,
        **read,
    }
    used = hay[: starts[min(o.samples, len(starts)) - 1] + 8 * max(lengths)]  # what the prompts read, about
    seen = haystack_in_training(adapter, used)
    if seen:
        info["haystack_in_training"] = seen
    return samples, info


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    samples, info = build(adapter, options, data)
    progress.announce(
        "niah",
        {
            "lengths": info["lengths"],
            "depths": options.depths,
            "haystacks per cell": options.samples,
            "needle values": len(options.answers),
            "prompts": len(samples),
            "scoring": options.scoring,
            "haystack": info["haystack"],
            "note": tasks.shorter(adapter, options.lengths, "--lengths"),
        },
    )
    if info.get("haystack_in_training"):
        print(f"note: {haystack_note(info['haystack_in_training'])}", file=sys.stderr)
    rows = scoring.score_samples(adapter, samples, options.scoring, desc="niah")
    res = tasks.summarize(rows, len(options.answers))
    if info.get("haystack_in_training"):
        res["text"].append(haystack_note(info["haystack_in_training"]))
    res["samples"] = tasks.sample_rows(rows, samples)
    res["depth_check"] = check = depth_check(samples)
    for cell in res["by_cell"]:
        depths = [s.meta["depth_tokens"] for s in samples if list(s.cell) == cell["cell"]]
        cell["depth_actual"] = [min(depths), max(depths)]
    if check["cells_off"]:
        res["text"].append(
            f"needle depth: in {len(check['cells_off'])} of {len(res['by_cell'])} cells the needle lies more "
            f"than {check['tolerance']:.0%} of the haystack from its row's depth (depth_check); "
            "their heatmap rows are labelled by the requested depth, not where the needle is"
        )
    title = f"needle in a haystack: {adapter.info.id}"
    # a needle value shorter than the pool's longest leaves its prompt that many tokens short (a user read
    # "102" on the axis over prompts of 99 tokens on average)
    plot = tasks.depth_by_length(
        res, options.depths, info["lengths"], "needle", title, col_label="prompt length (tokens, at most)"
    )
    return EvalOutput(res, info, arrays=tasks.sample_arrays(rows), plot=plot)
