"""The profile's steps: which evaluations, with which options, fitted to a context and a budget.

Every length comes from the context C the profile measures (the model's, or the smaller of
two models' so that their results pair): contextwise scores pieces of C + 1 tokens (every
context length 1..C), the visible-context curve goes 1, 2, 4, ... below C and then C itself,
the needle and passkey prompts follow the tasks' own default rule at C (C/4, C/2 and C less
what the answer adds, none shorter than the task's fixed text), and key-value prompts hold as
many pairs as fit in C. Nothing runs past the context. Prompt
tasks are scored by likelihood only (the true answer against distractors, with the
calibration prompt): generation would cost more than the rest of the battery together.

Each step carries an estimate of its work (``cost``: token-forwards, weighted by what each
kind of forward was measured to cost on a CPU), which the runner's progress bar uses for its
time estimate; only the proportions matter. contextwise takes consecutive pieces of long
documents (``pieces_per_doc = 0``) so that a few long texts still give its sample count.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from contextlab.errors import UserError

KV_ANSWER_ROOM = 24  # tokens kept free after a key-value prompt for the longest candidate value
MIN_CONTEXT = 64  # below this the prompt tasks have no room for a haystack


@dataclass(frozen=True)
class Budget:
    """Sample counts of one budget (``contextlab.profile.BUDGETS``)."""

    contextwise_docs: int  # pieces scored by contextwise
    targets: int  # target tokens of the visible-context curve
    depths: tuple[float, ...]  # needle and passkey depths (percent)
    haystacks: int  # needle haystacks per (length, depth) cell
    passkey_sets: int  # passkey candidate sets per cell
    kv_examples: int  # key-value examples
    kv_positions: int  # positions of the queried pair
    attention_rows: int  # rows of the attention analysis


@dataclass
class Step:
    """One evaluation of the battery for one model (or, for ``attention`` with two, the pair)."""

    name: str  # the evaluation (``contextlab.eval.EVALS`` key) or "attention"
    options: Any  # its options dataclass, every default resolved
    data: str | None  # what it reads
    cost: float  # estimated token-forwards (proportions only)
    skip: str = ""  # why it does not run ("" = it runs)


def fitted_lengths(lengths_for, adapter, options, context: int) -> list[int]:
    """A prompt task's own default rule (``tasks.default_lengths``: C/4, C/2 and C less what the answer
    adds, none shorter than the task's fixed text) applied at ``context`` rather than the model's;
    ``lengths_for`` is the task's (``needle.lengths_for``, ``passkey.lengths_for``)."""
    from contextlab.eval import tasks

    _, room, shortest = lengths_for(adapter, dataclasses.replace(options, lengths=[context]))
    return tasks.default_lengths(context, tasks.DEFAULT_FRACTIONS, room, shortest)


def kv_positions(n_pairs: int, count: int) -> list[int]:
    """``count`` positions spread evenly from the first pair to the last."""
    if n_pairs <= 1 or count <= 1:
        return [0]
    return sorted({round(i * (n_pairs - 1) / (count - 1)) for i in range(count)})


def build(
    context: int,
    budget: Budget,
    adapter,
    *,
    store: str,
    haystack: str | None,
    kv_file: str | None,
    kv_pairs: int,
    attention: str,
    longest_doc: int = 0,
) -> list[Step]:
    """The battery for context ``context`` and the model ``adapter`` (whose tokenizer decides how long
    the prompt tasks' fixed text and answers are); ``attention`` is "" when it can run, else why not.
    ``longest_doc``: the tokens of the store's longest document (0: not known); the steps that read
    the store skip, saying why and what to do, when no document is as long as they read."""
    from contextlab.analysis import attention as att
    from contextlab.eval import bayes_fit, contextwise, kv, needle, passkey

    if context < MIN_CONTEXT:
        raise UserError(f"the model's context is {context} tokens; profile needs at least {MIN_CONTEXT}")
    C, b = context, budget
    visible = bayes_fit.default_lengths(C)
    niah_opts = needle.Options(depths=list(b.depths), samples=b.haystacks, scoring="likelihood")
    niah_opts.lengths = niah_lengths = fitted_lengths(needle.lengths_for, adapter, niah_opts, C)
    pk_opts = passkey.Options(depths=list(b.depths), samples=b.passkey_sets, scoring="likelihood")
    pk_opts.lengths = pk_lengths = fitted_lengths(passkey.lengths_for, adapter, pk_opts, C)
    cells = len(b.depths)
    kv_opts = kv.Options(
        n_examples=b.kv_examples,
        n_pairs=kv_pairs,
        positions=kv_positions(kv_pairs, b.kv_positions),
        distractors=max(1, min(4, kv_pairs - 1)),
        scoring="likelihood",
    )
    kv_skip = "" if kv_pairs >= 2 else f"the context ({C} tokens) holds fewer than 2 key-value pairs"
    return [
        Step(
            "contextwise",
            contextwise.Options(length=C + 1, max_docs=b.contextwise_docs, pieces_per_doc=0),
            store,
            b.contextwise_docs * (C + 1),
            skip=_too_short(longest_doc, C + 1, C),
        ),
        Step(
            "bayes-fit",
            bayes_fit.Options(lengths=visible, samples=b.targets),
            store,
            0.35 * b.targets * sum(visible),  # short rows: cheap per token
            skip=_too_short(longest_doc, C + 1, C),  # a target with C tokens before it
        ),
        Step(
            "niah",
            niah_opts,
            haystack,
            1.6 * sum(niah_lengths) * cells * b.haystacks * 5 * 2,  # 5 rotations, each with its control
            skip=_no_room("niah", niah_lengths, C),
        ),
        Step(
            "passkey",
            pk_opts,
            None,
            sum(pk_lengths) * cells * b.passkey_sets * 5 * 2,
            skip=_no_room("passkey", pk_lengths, C),
        ),
        Step(
            "kv",
            kv_opts,
            kv_file,
            0.15 * C * b.kv_examples * len(kv_opts.positions) * (kv_opts.distractors + 1) * 2,
            skip=kv_skip,
        ),
        Step(
            "attention",
            att.Options(rows=b.attention_rows, length=C),
            store,
            b.attention_rows * C * 4,  # the weights are recomputed per layer in fp32
            skip=attention or _too_short(longest_doc, C, C),
        ),
    ]


def _no_room(task: str, lengths: list[int], context: int) -> str:
    return (
        ""
        if lengths
        else f"the context ({context} tokens) leaves no room for a {task} prompt with its answer"
    )


def _too_short(longest: int, need: int, context: int) -> str:
    """Why a step that reads ``need`` tokens of one document cannot run on data whose longest document
    has ``longest`` ("" when it can, or when ``longest`` is not known)."""
    if not longest or longest >= need:
        return ""
    fits = longest - 1  # the longest context every data step can read
    fix = (
        f"measure at --context {fits:,} or give data of longer documents"
        if fits >= MIN_CONTEXT
        else f"give data with documents of at least {MIN_CONTEXT + 1} tokens (the shortest context measured)"
    )
    return (
        f"the data's longest document has {longest:,} tokens and this step reads {need:,} of one document "
        f"at context {context:,}: {fix}"
    )
