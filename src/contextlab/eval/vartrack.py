"""Variable tracking (RULER-like): follow chains of assignments hidden in filler text.

``n_chains`` chains of ``hops`` assignments each: "VAR ABCDE = 12345." then "VAR FGHIJ =
VAR ABCDE." and so on, the statements spread in order at random places of a repeated
filler. The chains form a balanced candidate set: the same text is asked about each
chain in turn ("every variable assigned the value V" for each chain's V), the asked
chain's names being the true candidate and the other chains' names the wrong ones (the
same form, so chance is 1/n_chains and a model that ignores the text scores exactly that
on average). Scoring: the likelihood of the asked chain's names against the others,
calibrated by the same prompt without the asked chain's statements; generated text
containing all names of the chain (in order).

Default length: the model's context less the tokens the answer adds (the chain's names, at most
6 tokens each, and 4 more when generating), so the default prompt never runs past the context.
Longer prompts are measured only when ``--lengths`` asks for them.
"""

from __future__ import annotations

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
from contextlab.eval.passkey import FILLER
from contextlab.eval.results import text_hash

INTRO = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
NAME_TOKENS = 6  # the most tokens a name " ABCDE" takes (a space and 5 letters, one byte each)
EXTRA_NEW = 4  # tokens generated past the answer


@dataclass
class Options:
    lengths: list[int] = opt(
        [],
        "prompt lengths in tokens; empty = the model's context less the tokens of the answer (so no prompt "
        "runs past the context)",
    )
    n_chains: int = opt(2, "chains per prompt; each is asked about once, the others being the distractors")
    hops: int = opt(3, "assignments per chain after the first")
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


def build(adapter, o: Options, data: str | None) -> tuple[list[tasks.Sample], dict]:
    if o.n_chains < 1 or o.hops < 1:
        raise UserError(
            "variable tracking needs n_chains >= 1 and hops >= 1 (n_chains >= 2 for a chance level)"
        )
    answer = NAME_TOKENS * (o.hops + 1)
    room = tasks.answer_room(answer, o.scoring, answer + EXTRA_NEW)
    lengths = o.lengths or [adapter.context - room]
    rng = np.random.default_rng(o.seed)
    samples: list[tasks.Sample] = []
    for L in lengths:
        for _ in range(o.samples):
            samples += _chain_set(adapter, rng, o, L, len(samples) // o.n_chains)
    tasks.check_longest(
        adapter,
        samples,
        o.scoring,
        f"the longest vartrack prompt ({max(lengths):,} tokens) with its answer",
        tasks.lengths_fix("vartrack", adapter.context, room),
    )
    return samples, {"filler_hash": text_hash(INTRO + FILLER), "lengths": lengths}


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
        raise UserError(
            f"variable tracking length {L} is too short for {len(statements)} statements; "
            "use longer --lengths or fewer --hops"
        )
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
        ids += fill[prev:] + questions[c]
        control += fill[prev:] + questions[c]
        max_new = len(cands[0]) + EXTRA_NEW
        out.append(tasks.Sample(ids, answers[c].strip(), cands, (L,), max_new, {}, control, group))
    return out


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    samples, info = build(adapter, options, data)
    progress.announce(
        "vartrack",
        {
            "lengths": info["lengths"],
            "chains": options.n_chains,
            "hops": options.hops,
            "texts per length": options.samples,
            "prompts": len(samples),
            "scoring": options.scoring,
        },
    )
    rows = scoring.score_samples(adapter, samples, options.scoring, desc="vartrack")
    res = tasks.summarize(rows, options.n_chains)
    res["samples"] = tasks.sample_rows(rows, samples)
    _key, cell_key = tasks.headline_metric(res["summary"])

    def plot(path):
        from contextlab.eval.plots import lines_png

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
