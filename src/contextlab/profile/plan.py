"""The profile's steps: which evaluations, with which options, fitted to a context and a budget.

Every length comes from the context C the profile measures (the model's, or the smaller of
two models' so that their results pair): contextwise scores pieces of C + 1 tokens (every
context length 1..C), the visible-context curve goes 1, 2, 4, ... below C and then C itself,
the needle and passkey prompts follow the tasks' own default rule at C (C/4, C/2 and C less
what the answer adds, none shorter than the task's fixed text), and key-value prompts hold as
many pairs as fit in C. Nothing runs past the context. Prompt
tasks are scored by likelihood only (the true answer against distractors, with the
calibration prompt): generation would cost more than the rest of the battery together.

Each step carries an estimate of its work in two parts, ``tokens`` (token positions through the
model's layers) and ``rows`` (positions through its output layer, which for a 50k vocabulary costs
ten to twenty times a layer's token), counted from its settings; the runner times one forward pass
of the model on this machine (``Rates``) and turns them into seconds, said before the battery runs
and used by the progress bar. Prompt tasks run one prompt at a time, which the probe's batch of two
does not: their tokens are weighted by ``PROMPT_FACTOR``; every step adds ``STEP_OVERHEAD`` for its
prompts, result file and plots, and bayes-fit its bootstrap's refits (timed once on this machine).
``benchmarks/profile_estimate.py`` sets the estimate against the
steps' time (four architectures, a 50k vocabulary, contexts 1,024 to 8,192: within 1.3x).

contextwise takes consecutive pieces of long documents (``pieces_per_doc = 0``) so that a few long
texts still give its sample count.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from contextlab.errors import UserError

KV_ANSWER_ROOM = 24  # tokens kept free after a key-value prompt for the longest candidate value
PROMPT_FACTOR = 2.5  # a prompt task's token, run one prompt at a time, against the probe's (measured 2.0-3.2)
STEP_OVERHEAD = 0.4  # seconds a step spends besides forward passes: its prompts, result file and plots
ROTATIONS = 5  # the prompts of one candidate set: each value once the answer (the tasks' default pool)
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
    tokens: float  # estimated token positions through the model's layers
    rows: float  # estimated positions through its output layer
    skip: str = ""  # why it does not run ("" = it runs)
    length: float = 0.0  # the sequence length most of its tokens are read at (attention grows with it)
    refits: int = 0  # bootstrap refits of a fit after the forward passes (bayes-fit)

    def seconds(self, rates: Rates) -> float:
        """The estimated time of this step on the machine ``rates`` was measured on."""
        work = self.tokens * rates.token(self.length) + self.rows * rates.row
        return STEP_OVERHEAD + work + self.refits * rates.refit


@dataclass(frozen=True)
class Rates:
    """Seconds per token position through a model's layers, ``base + per_length * L`` for sequences of L
    tokens (attention reads every earlier position), and per position through its output layer;
    measured on this machine (``estimate.measure_rates``)."""

    base: float
    per_length: float
    row: float
    refit: float = 0.0  # seconds of one bootstrap refit of the Bayes-risk fit (``bayes_fit.refit_seconds``)

    def token(self, length: float) -> float:
        return self.base + self.per_length * length


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
    doc_lengths=None,
    split: str = "all",
    heldout_of: str = "",
    encoding: str = "strict",
) -> list[Step]:
    """The battery for context ``context`` and the model ``adapter`` (whose tokenizer decides how long
    the prompt tasks' fixed text and answers are); ``attention`` is "" when it can run, else why not.
    ``doc_lengths``: the tokens of each document the store's steps read (None: not known); those steps
    skip, saying why and what to do, when no document is as long as they read, and are estimated at
    the pieces the documents hold when that is fewer than the budget's. ``split``:
    the ``--split`` of every step that reads the store, and ``heldout_of`` the run whose held-out part
    it reads (empty: the model's own). ``encoding``: how the needle reads a text haystack's files
    (the profile's --encoding)."""
    from contextlab.analysis import attention as att
    from contextlab.eval import bayes_fit, contextwise, kv, needle, passkey

    if context < MIN_CONTEXT:
        raise UserError(f"the model's context is {context} tokens; profile needs at least {MIN_CONTEXT}")
    C, b = context, budget
    visible = bayes_fit.default_lengths(C)
    niah_opts = needle.Options(
        depths=list(b.depths), samples=b.haystacks, scoring="likelihood", encoding=encoding
    )
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
    answer = {  # tokens of a candidate answer, each a row of the output layer per prompt
        "niah": max(len(adapter.encode(" " + v)) for v in niah_opts.answers),
        "passkey": len(adapter.encode(" 68351")),
        "kv": len(adapter.encode('"9f2b6c1e-41d7-4c3a-8e55-2a7d0b9c4f13"')),
    }

    def prompts(lengths: list[int], per_cell: int, answer: int) -> tuple[float, float]:
        """(tokens, rows) of a prompt task: every prompt of a candidate set and its calibration prompt,
        each continued by every candidate."""
        per_length = cells * per_cell * (ROTATIONS + 1)
        return PROMPT_FACTOR * sum(lengths) * per_length, len(lengths) * per_length * ROTATIONS * answer

    niah_work = prompts(niah_lengths, b.haystacks, answer["niah"])
    pk_work = prompts(pk_lengths, b.passkey_sets, answer["passkey"])
    kv_prompts = b.kv_examples * len(kv_opts.positions) * (kv_opts.distractors + 1)
    lengths = np.asarray(doc_lengths if doc_lengths is not None else [], dtype=np.int64)
    longest = int(lengths.max()) if len(lengths) else 0
    N, rows = b.contextwise_docs, b.attention_rows
    if doc_lengths is not None:  # a small store (a run's held-out part) holds fewer pieces than the budget's
        N = min(N, int((lengths // (C + 1)).sum()))
        rows = min(rows, int((lengths >= C).sum()))
    return [
        Step(
            "contextwise",
            contextwise.Options(
                length=C + 1,
                max_docs=b.contextwise_docs,
                pieces_per_doc=0,
                split=split,
                heldout_of=heldout_of,
            ),
            store,
            1.4 * N * C,  # the pieces, and two-token rows for the best-context window's (a fifth) targets
            1.2 * N * C,
            skip=_too_short(longest, C + 1, C),
            length=C,
        ),
        Step(
            "bayes-fit",
            bayes_fit.Options(lengths=visible, samples=b.targets, split=split, heldout_of=heldout_of),
            store,
            b.targets * sum(v + 1 for v in visible),
            b.targets * len(visible),  # only the target's row
            skip=_too_short(longest, C + 1, C),  # a target with C tokens before it
            length=0.75 * C,  # half its tokens are in the rows of C, a quarter in those of C/2, ...
            refits=bayes_fit.FIT_RESAMPLES,  # solved together: well under a second
        ),
        Step(
            "niah",
            niah_opts,
            haystack,
            *niah_work,
            skip=_no_room("niah", niah_lengths, C),
            length=_mean(niah_lengths),
        ),
        Step(
            "passkey",
            pk_opts,
            None,
            *pk_work,
            skip=_no_room("passkey", pk_lengths, C),
            length=_mean(pk_lengths),
        ),
        Step(
            "kv",
            kv_opts,
            kv_file,
            PROMPT_FACTOR * C * kv_prompts,
            kv_prompts * ROTATIONS * answer["kv"],
            skip=kv_skip,
            length=C,
        ),
        Step(
            "attention",
            att.Options(rows=b.attention_rows, length=C, split=split, heldout_of=heldout_of),
            store,
            rows * C * 4,  # the weights are recomputed per layer in fp32
            0.0,
            skip=attention or _too_short(longest, C, C),
            length=C,
        ),
    ]


def _mean(lengths: list[int]) -> float:
    return sum(lengths) / len(lengths) if lengths else 0.0


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
