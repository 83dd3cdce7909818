"""The profile's steps: which evaluations, with which options, fitted to a context and a budget.

Every length comes from the context C the profile measures (the model's, or the smaller of
two models' so that their results pair): contextwise scores pieces of C + 1 tokens (every
context length 1..C), the visible-context curve goes 1, 2, 4, ... up to C, the needle and
passkey prompts are C/4, C/2 and C tokens less the room their question and answer need, and
key-value prompts hold as many pairs as fit in C. Nothing runs past the context. Prompt
tasks are scored by likelihood only (the true answer against distractors, with the
calibration prompt): generation would cost more than the rest of the battery together.

Each step carries an estimate of its work (``cost``: token-forwards, weighted by what each
kind of forward was measured to cost on a CPU), which the runner's progress bar uses for its
time estimate; only the proportions matter. contextwise takes consecutive pieces of long
documents (``pieces_per_doc = 0``) so that a few long texts still give its sample count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contextlab.errors import UserError

NEEDLE_ROOM = 32  # tokens kept free above a needle prompt for its answer (the runner checks exactly)
PASSKEY_ROOM = 8  # the same for passkey
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


def prompt_lengths(context: int, room: int) -> list[int]:
    """C/4, C/2 and C, less ``room`` tokens each at the top, sorted and distinct."""
    top = context - room
    return sorted({max(16, context // 4), max(16, context // 2), top})


def kv_positions(n_pairs: int, count: int) -> list[int]:
    """``count`` positions spread evenly from the first pair to the last."""
    if n_pairs <= 1 or count <= 1:
        return [0]
    return sorted({round(i * (n_pairs - 1) / (count - 1)) for i in range(count)})


def build(
    context: int,
    budget: Budget,
    *,
    store: str,
    haystack: str | None,
    kv_file: str | None,
    kv_pairs: int,
    attention: str,
) -> list[Step]:
    """The battery for context ``context``; ``attention`` is "" when it can run, else why not."""
    from contextlab.analysis import attention as att
    from contextlab.eval import bayes_fit, contextwise, kv, needle, passkey

    if context < MIN_CONTEXT:
        raise UserError(f"the model's context is {context} tokens; profile needs at least {MIN_CONTEXT}")
    C, b = context, budget
    visible = bayes_fit.default_lengths(C)
    niah_lengths = prompt_lengths(C, NEEDLE_ROOM)
    pk_lengths = prompt_lengths(C, PASSKEY_ROOM)
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
        ),
        Step(
            "bayes-fit",
            bayes_fit.Options(lengths=visible, samples=b.targets),
            store,
            0.35 * b.targets * sum(visible),  # short rows: cheap per token
        ),
        Step(
            "niah",
            needle.Options(
                lengths=niah_lengths, depths=list(b.depths), samples=b.haystacks, scoring="likelihood"
            ),
            haystack,
            1.6 * sum(niah_lengths) * cells * b.haystacks * 5 * 2,  # 5 rotations, each with its control
        ),
        Step(
            "passkey",
            passkey.Options(
                lengths=pk_lengths, depths=list(b.depths), samples=b.passkey_sets, scoring="likelihood"
            ),
            None,
            sum(pk_lengths) * cells * b.passkey_sets * 5 * 2,
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
            skip=attention,
        ),
    ]
