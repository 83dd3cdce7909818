"""Variable tracking (RULER-like): follow chains of assignments hidden in filler text.

``n_chains`` chains of ``hops`` assignments each: "VAR ABCDE = 12345." then "VAR FGHIJ = VAR
ABCDE." and so on, the statements spread in order at random places of a repeated filler,
exactly the length asked in the model's tokens. The chains form a balanced candidate set: the
same text is asked about each chain in turn ("every variable assigned the value V" for each
chain's V), the asked chain's names being the true candidate and the other chains' names the
wrong ones (the same form, so chance is 1/n_chains and a model that ignores the text scores
exactly that on average). Scoring: the likelihood of the asked chain's names against the
others, calibrated by the same prompt without the asked chain's statements; generated text
containing all names of the chain (in order).

Default length: the model's context less the tokens the answer adds (the chain's names, at most
6 tokens each, and 4 more when generating), so the default prompt never runs past the context.
Longer prompts are measured only when ``--lengths`` asks for them.

Default hops: 3, fewer (down to 1) when a prompt of the default length (or the shortest --lengths)
cannot hold the statements of 3 with their question and a filler token between statements (a 255-token
byte-level model holds not even the question); the settings line's note says so and the result records
``hops``. An explicit ``--hops`` that does not fit is one line, as is a context too short for 1 hop.
"""

from __future__ import annotations

import dataclasses
import string
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

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
INTRO = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
NAME_TOKENS = 6  # the most tokens a name " ABCDE" takes (a space and 5 letters, one byte each)
EXTRA_NEW = 4  # tokens generated past the answer
HOPS = 3  # the default hops per chain (fewer when the prompt length cannot hold them)


@dataclass
class Options:
    lengths: list[int] = opt(
        [],
        "prompt lengths in tokens; empty = the model's context less the tokens of the answer (so no prompt "
        "runs past the context)",
    )
    n_chains: int = opt(2, "chains per prompt; each is asked about once, the others being the distractors")
    hops: int = opt(
        0,
        f"assignments per chain after the first; 0 = {HOPS}, or as many as fit (down to 1) when the prompt "
        f"length cannot hold the statements of {HOPS}",
    )
    samples: int = opt(8, "texts per length, each asked once per chain")
    scoring: Literal["likelihood", "generate", "both"] = opt("both", "how the answer is scored")
    seed: int = opt(0, "seed of names, values and positions")


def chains(rng, n_chains: int, hops: int) -> tuple[list[list[str]], list[str]]:
    names: set[str] = set()
    while len(names) < n_chains * (hops + 1):
        names.add("".join(rng.choice(list(string.ascii_uppercase), 5)))
    names_l = sorted(names)
    rng.shuffle(names_l)
    values = [str(v) for v in rng.choice(np.arange(10000, 100000), n_chains, replace=False)]
    return [names_l[i * (hops + 1) : (i + 1) * (hops + 1)] for i in range(n_chains)], values


class _TooShort(Exception):
    """A prompt length that cannot hold the statements (with a filler token before each) and the question."""

    def __init__(self, length: int, statements: int, needed: int):
        super().__init__(length, statements, needed)
        self.length, self.statements, self.needed = length, statements, needed


def build(adapter, o: Options, data: str | None) -> tuple[list[tasks.Sample], dict]:
    if o.n_chains < 1 or o.hops < 0:
        raise UserError(
            "variable tracking needs n_chains >= 1 and hops >= 1 (or 0: fitted; n_chains >= 2 for a chance "
            "level)"
        )
    for hops in [o.hops] if o.hops else range(HOPS, 0, -1):
        try:
            samples, lengths, room = _built(adapter, o, hops)
            break
        except _TooShort as short:
            if o.hops or hops == 1:
                raise _too_short(adapter, o, short) from None
    tasks.check_longest(
        adapter,
        samples,
        o.scoring,
        f"the longest vartrack prompt ({max(lengths):,} tokens) with its answer",
        tasks.lengths_fix("vartrack", adapter.context, room, _shortest(adapter, o, hops)),
    )
    return samples, {"filler_hash": text_hash(INTRO + FILLER), "lengths": lengths, "hops": hops}


def _shortest(adapter, o: Options, hops: int) -> int:
    """The shortest prompt of chains of ``hops`` (no filler beyond a token per statement), read off a
    set built at one token, which is always too short."""
    try:
        _chain_set(adapter, np.random.default_rng(o.seed), dataclasses.replace(o, hops=hops), 1, 0)
    except _TooShort as short:
        return short.needed
    return 1


def _built(adapter, o: Options, hops: int) -> tuple[list[tasks.Sample], list[int], int]:
    """(the samples of chains of ``hops``, their lengths, the tokens the answer adds); ``_TooShort`` when a
    length cannot hold them."""
    o = dataclasses.replace(o, hops=hops)
    answer = NAME_TOKENS * (hops + 1)
    room = tasks.answer_room(answer, o.scoring, answer + EXTRA_NEW)
    lengths = o.lengths or [adapter.context - room]
    rng = np.random.default_rng(o.seed)
    samples: list[tasks.Sample] = []
    for L in lengths:
        for _ in range(o.samples):
            samples += _chain_set(adapter, rng, o, L, len(samples) // o.n_chains)
    return samples, lengths, room


def _too_short(adapter, o: Options, short: _TooShort) -> UserError:
    """The one line of a prompt length too short for the statements: an explicit --hops names it; fitted
    hops down to 1 name the context (or --lengths) and the length that holds them."""
    L, n = short.length, short.statements
    if o.hops:
        return UserError(
            f"variable tracking length {L} is too short for {n} statements; use longer --lengths or fewer "
            "--hops (or leave --hops out: the default fits the length)"
        )
    fewer = " or fewer --n-chains" if o.n_chains > 2 else ""
    if o.lengths:
        return UserError(
            f"variable tracking length {L} is too short for even {n} statements ({o.n_chains} chains of 1 "
            f"hop: {short.needed:,} tokens at least); use longer --lengths{fewer}"
        )
    room = tasks.answer_room(2 * NAME_TOKENS, o.scoring, 2 * NAME_TOKENS + EXTRA_NEW)
    return UserError(
        f"vartrack: the model's context ({adapter.context:,} tokens) is too short for variable tracking: "
        f"even {o.n_chains} chains of 1 hop ({n} statements) need a prompt of {short.needed:,} tokens at "
        f"least, and {room} of its answer; pass --lengths {short.needed} to run it past the context (the "
        f"model then extrapolates){fewer.replace(' or', ', or use')}"
    )


def _question(o: Options, value: str) -> str:
    return (
        f"\n\nQuestion: Find all variables that are assigned the value {value} in the text "
        f"above. Answer: According to the chain(s) of variable assignment in the text above, "
        f"{o.hops + 1} variables are assigned the value {value}, they are:"
    )


def _chain_set(adapter, rng, o: Options, L: int, group: int) -> list[tasks.Sample]:
    """One text of interleaved chains in filler, asked once about each chain (its control: the text
    without that chain's statements)."""
    enc = adapter.encode
    chain, values = chains(rng, o.n_chains, o.hops)
    statements = []  # chain-major: chain c's statements are [c * (hops + 1), (c + 1) * (hops + 1))
    for names, v in zip(chain, values):
        statements.append(enc(f" VAR {names[0]} = {v}. "))
        statements += [enc(f" VAR {names[h]} = VAR {names[h - 1]}. ") for h in range(1, o.hops + 1)]
    order = np.arange(len(statements)).reshape(o.n_chains, o.hops + 1).T.ravel()  # interleave, in order
    questions, intro = [enc(_question(o, v)) for v in values], enc(INTRO)
    n_fill = L - len(intro) - max(len(q) for q in questions) - sum(len(s) for s in statements)
    if n_fill < len(statements):
        raise _TooShort(L, len(statements), L - n_fill + len(statements))
    fill = filler_ids(adapter, FILLER, n_fill)
    cuts = np.sort(rng.choice(np.arange(n_fill + 1), len(statements), replace=True))
    answers = [" " + " ".join(names) for names in chain]
    out = []
    for c, cands in enumerate(tasks.rotations([enc(a) for a in answers])):
        ids, control, prev = list(intro), list(intro), 0
        for cut, s in zip(cuts, order):
            ids += fill[prev:cut] + statements[s]
            control += fill[prev:cut] + (statements[s] if s // (o.hops + 1) != c else [])
            prev = cut
        # a question that tokenizes shorter than the longest gets as many more filler tokens (the filler's
        # continuation, at the end), so every prompt is exactly L tokens
        end = filler_ids(adapter, FILLER, n_fill + len(max(questions, key=len)) - len(questions[c]))[prev:]
        ids += end + questions[c]
        control += end + questions[c]
        max_new = len(cands[0]) + EXTRA_NEW
        out.append(tasks.Sample(ids, answers[c].strip(), cands, (L,), max_new, {}, control, group))
    return out


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    samples, info = build(adapter, options, data)
    hops = info["hops"]
    where = (
        f"a prompt of --lengths {min(options.lengths):,}"
        if options.lengths
        else f"a prompt that fits the model's {adapter.context:,}-token context with its answer"
    )
    progress.announce(
        "vartrack",
        {
            "lengths": info["lengths"],
            "chains": options.n_chains,
            "hops": hops,
            "texts per length": options.samples,
            "prompts": len(samples),
            "scoring": options.scoring,
            "note": (
                f"{hops} hop{'s' if hops > 1 else ''}, not {HOPS}: {where} cannot hold the statements of "
                f"{HOPS} hops and the question (--hops sets it)"
                if hops < HOPS and not options.hops
                else None
            ),
        },
    )
    rows = scoring.score_samples(adapter, samples, options.scoring, desc="vartrack")
    res = tasks.summarize(rows, options.n_chains)
    res["samples"] = tasks.sample_rows(rows, samples)
    _key, cell_key = tasks.headline_metric(res["summary"])

    def plot(path):
        from contextlab.result_plots import lines_png

        return lines_png(
            {adapter.info.id: (info["lengths"], [c[cell_key] for c in res["by_cell"]])},
            path,
            xlabel="context length (tokens)",
            ylabel=cell_key,
            title="variable tracking",
            logx=True,
            chance=res["summary"].get("chance"),
            bands={adapter.info.id: [c[tasks.interval_key(cell_key)] for c in res["by_cell"]]},
        )

    return EvalOutput(res, info, arrays=tasks.sample_arrays(rows), plot=plot)
