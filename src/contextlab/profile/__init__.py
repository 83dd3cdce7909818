"""``contextlab profile``: how one model (or two, paired) uses its context, in one command.

The battery: ``contextwise`` (loss by position, best-context loss, context gain), the
visible-context curve (``bayes-fit``: the same targets seen through 1, 2, 4, ... tokens),
needle and passkey heatmaps, key-value retrieval, and attention by distance. ``plan.py``
derives every length and sample count from the model's context and a budget (``BUDGETS``),
so no prompt runs past the context; ``data.py`` prepares what the steps read (the token
store, ingested from text with each model's tokenizer, and the key-value file);
``estimate.py`` times a few forward passes and says how long the battery will take;
``runner.py`` runs the steps under one progress bar, records each in ``OUT/profile.json``
(``manifest.py``) as it finishes (a killed profile resumes where it stopped), pairs two
models with ``contextlab compare`` and writes the report; ``headline.py`` turns the result
files into the page's first table.

Trade-off: the battery is made of the ordinary evaluations, run with explicit options and
written as ordinary result files, rather than a fused pass that shares forwards between
them: each number means what it means everywhere else in contextlab, each step can be
rerun alone with the command line its result records, and resuming is per step.
"""

from __future__ import annotations

from contextlab.profile.plan import Budget

BUDGETS: dict[str, Budget] = {
    # quick: under 5 minutes for a 2 x 128 model at 512 positions on 2 CPU cores
    "quick": Budget(
        contextwise_docs=32,
        targets=128,
        depths=(0.0, 50.0, 100.0),
        haystacks=1,
        passkey_sets=1,
        kv_examples=3,
        kv_positions=3,
        attention_rows=16,
    ),
    "standard": Budget(
        contextwise_docs=64,
        targets=512,
        depths=(0.0, 25.0, 50.0, 75.0, 100.0),
        haystacks=2,
        passkey_sets=2,
        kv_examples=5,
        kv_positions=5,
        attention_rows=64,
    ),
    "full": Budget(
        contextwise_docs=256,
        targets=2048,
        depths=tuple(float(d) for d in range(0, 101, 10)),
        haystacks=4,
        passkey_sets=4,
        kv_examples=20,
        kv_positions=5,
        attention_rows=256,
    ),
}
