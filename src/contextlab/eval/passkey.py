"""Passkey retrieval (Mohtashami & Jaggi 2023): a 5-digit key hidden in repeated filler.

The prompt is the original one: an instruction, the filler "The grass is green. The sky
is blue. ..." repeated to the target length, the sentence "The pass key is K. Remember
it. K is the pass key." at depth d% of the filler, more filler, and "What is the pass
key? The pass key is". The key sentence goes between two filler sentences, never inside one:
at the sentence boundary nearest d% of the filler's tokens (its start or the end of one of its
whole sentences: less than a sentence from the depth, at most 4 tokens with GPT-2's BPE). Lengths
are exact in the model's tokens (the parts are tokenized separately and the filler is cut to
fit each key's sentence; its last sentence may be cut before the question). A candidate set
is 1 + ``distractors`` random 5-digit keys; the prompt is built once with each of them as the
pass key (the same filler and depth), the others being the wrong candidates, so a model that
ignores the context scores 1/k. Scoring: the likelihood of the true key against the set's others, calibrated
by the same prompt without the key sentence; generated digits.

Default lengths: 1/4, 1/2 and all of the model's context, each less the tokens the answer adds
(a key is at most 6 tokens: a space and 5 digits; generation adds 3 more), so no default prompt
runs past the context; lengths too short for the instruction, key sentence and question are
left out. Longer prompts are measured only when ``--lengths`` asks for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

import contextlab.eval.progress as progress
import contextlab.eval.scoring as scoring
import contextlab.eval.tasks as tasks
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.base import EvalOutput, filler_ids
from contextlab.eval.results import text_hash

INTRO = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.\n\n"
)
# every sentence starts with its space, so the key sentence (which does too) fits between any two
FILLER = " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
QUESTION = "\n\nWhat is the pass key? The pass key is"
KEY_TOKENS = 6  # the most tokens a key " 12345" takes (a space and 5 digits, one byte each)
EXTRA_NEW = 3  # tokens generated past the key


def _needle(key: str) -> str:
    return f" The pass key is {key}. Remember it. {key} is the pass key."


@dataclass
class Options:
    lengths: list[int] = opt(
        [],
        "prompt lengths in tokens; empty = 1/4, 1/2 and 1 times the model's context, each less the tokens "
        "of the answer (so no prompt runs past the context; lengths too short for the prompt are left out)",
    )
    depths: list[float] = opt([0.0, 50.0, 100.0], "depth of the key sentence in percent of the filler")
    samples: int = opt(4, "candidate sets per (length, depth) cell, each asked once per key of the set")
    distractors: int = opt(4, "random wrong keys scored against the true one (likelihood)")
    scoring: Literal["likelihood", "generate", "both"] = opt("both", "how the answer is scored")
    seed: int = opt(0, "seed of the keys")


def lengths_for(adapter, o: Options) -> tuple[list[int], int, int]:
    """(the prompt lengths: --lengths or the defaults of the module docstring, the tokens the answer
    adds to the longest forward pass, the shortest prompt: instruction, key sentence, question and a
    little filler)."""
    room = tasks.answer_room(KEY_TOKENS, o.scoring, KEY_TOKENS + EXTRA_NEW)
    enc = adapter.encode
    shortest = len(enc(INTRO)) + len(enc(_needle("99999"))) + len(enc(QUESTION)) + 16
    return tasks.prompt_lengths("passkey", adapter.context, o.lengths, room, shortest), room, shortest


def build(adapter, o: Options, data: str | None) -> tuple[list[tasks.Sample], dict]:
    if o.distractors < 1:
        raise UserError("passkey needs --distractors >= 1")
    lengths, room, shortest = lengths_for(adapter, o)
    rng = np.random.default_rng(o.seed)
    samples: list[tasks.Sample] = []
    for L in lengths:
        for d in o.depths:
            for _ in range(o.samples):
                keys = [
                    str(k) for k in rng.choice(np.arange(10000, 100000), 1 + o.distractors, replace=False)
                ]
                samples += _key_set(adapter, keys, L, d, len(samples) // len(keys))
    tasks.check_longest(
        adapter,
        samples,
        o.scoring,
        f"the longest passkey prompt ({max(lengths):,} tokens) with its answer",
        tasks.lengths_fix("passkey", adapter.context, room, shortest),
    )
    return samples, {"filler_hash": text_hash(INTRO + FILLER + QUESTION), "lengths": lengths}


def _key_set(adapter, keys: list[str], L: int, d: float, group: int) -> list[tasks.Sample]:
    """One prompt per key of the set, the same filler around it; the control has no key sentence."""
    enc = adapter.encode
    intro, question = enc(INTRO), enc(QUESTION)
    needles = [enc(_needle(k)) for k in keys]
    n_fill = L - len(intro) - max(len(n) for n in needles) - len(question)
    if n_fill < 0:
        raise UserError(f"passkey length {L} is too short for the prompt; use longer --lengths")
    fill = filler_ids(adapter, FILLER, n_fill)
    cut = sentence_boundary(adapter, fill, d / 100 * n_fill)
    control = intro + fill + question
    out = []
    for key, needle, cands in zip(keys, needles, tasks.rotations([enc(" " + k) for k in keys])):
        # a key sentence that tokenizes shorter than the set's longest gets as many more filler tokens
        # (the filler's continuation, after the key), so every prompt is exactly L tokens
        more = filler_ids(adapter, FILLER, L - len(intro) - len(needle) - len(question))
        ids = intro + more[:cut] + needle + more[cut:] + question
        out.append(tasks.Sample(ids, key, cands, (d, L), len(cands[0]) + EXTRA_NEW, {}, control, group))
    return out


def sentence_boundary(adapter, fill: list[int], target: float) -> int:
    """The token offset in ``fill`` nearest ``target`` (the earlier of two as near) at which a sentence
    may go: its start, or just past a token that ends one of its sentences (holds a period)."""
    piece = {t: adapter.tokenizer.decode([t]) for t in set(fill)}
    ends = [0] + [k + 1 for k, t in enumerate(fill) if "." in piece[t]]
    return min(ends, key=lambda b: (abs(b - target), b))


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    samples, info = build(adapter, options, data)
    progress.announce(
        "passkey",
        {
            "lengths": info["lengths"],
            "depths": options.depths,
            "key sets per cell": options.samples,
            "keys per set": 1 + options.distractors,
            "prompts": len(samples),
            "scoring": options.scoring,
            "note": tasks.shorter(adapter, options.lengths, "--lengths"),
        },
    )
    rows = scoring.score_samples(adapter, samples, options.scoring, desc="passkey")
    res = tasks.summarize(rows, 1 + options.distractors)
    res["samples"] = tasks.sample_rows(rows, samples)
    plot = tasks.depth_by_length(res, options.depths, info["lengths"], "key", f"passkey: {adapter.info.id}")
    return EvalOutput(res, info, arrays=tasks.sample_arrays(rows), plot=plot)
