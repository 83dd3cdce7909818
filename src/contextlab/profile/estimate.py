"""How long a profile will take on this machine: a few timed forward passes of each model
(``measure_rates``) turned into seconds by each step's counted work (``plan.Step.seconds``), said
before the battery runs and driving its progress bar.

Trade-off: nine short forward passes per model (seconds) against an estimate that is rough
(``benchmarks/profile_estimate.py`` measures it within 1.3x of the steps' time); a long one names a
shorter ``--context`` that would fit.
"""

from __future__ import annotations

import functools
import time

from contextlab.profile.plan import MIN_CONTEXT, Rates

PROBE_SHORT, PROBE_LONG = 512, 4096  # tokens per row of the forward passes timed for the estimate
LONG_ESTIMATE = 20 * 60  # past this estimate (seconds), the opening lines name a context that fits
SHORT_ENOUGH = 5 * 60  # ... one whose estimate is at most this


def measure_rates(adapter, context: int) -> Rates:
    """Seconds per token through ``adapter``'s model, at two lengths, and per row of its output layer
    on this machine: two rows of ``PROBE_SHORT`` and of ``PROBE_LONG`` tokens (each at most the context)
    scored at their last position only, then the long ones at every position (after a short warm-up).
    The two lengths give the per-token time's growth with length (attention), the difference of the
    last two the output layer's, each the median of three timings. Nine forward passes of the
    battery's hundreds; a model read at 32,768 tokens is mostly attention, which a rate measured at
    one short length missed sevenfold."""
    import torch

    def timed(fn, ids) -> float:  # the median of three: one timing on a shared machine strayed 1.5x
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn(ids)
            times.append(time.perf_counter() - t0)
        return sorted(times)[1]

    g = torch.Generator().manual_seed(0)
    short, long = min(context, PROBE_SHORT), min(context, PROBE_LONG)
    ids = torch.randint(0, min(adapter.vocab_size, 256), (2, long + 1), generator=g)
    adapter.last_token_logprobs(ids[:, :17])  # warm-up: first-call costs are not the model's rate
    at_short = timed(adapter.last_token_logprobs, ids[:, : short + 1]) / (2 * short)
    at_long = timed(adapter.last_token_logprobs, ids) / (2 * long)
    every = timed(adapter.token_logprobs, ids) / (2 * long)
    per_length = max(0.0, (at_long - at_short) / (long - short)) if long > short else 0.0
    return Rates(
        base=max(0.0, at_short - per_length * short),
        per_length=per_length,
        row=max(0.0, every - at_long),
        refit=refit_seconds(),
    )


@functools.cache
def refit_seconds() -> float:
    """One bootstrap refit of the Bayes-risk fit on this machine (``bayes_fit.refit_seconds``), timed
    once per process: a fit's thousand of them took minutes after its forward passes, uncounted."""
    from contextlab.eval.bayes_fit import refit_seconds as timed

    return timed()


def pairing_seconds(refit: float) -> float:
    """The pairing of two profiled models: ``contextlab compare`` of each evaluation, whose cost is the
    bootstrap refitting both models' Bayes-risk fits (the other comparisons are numpy sums)."""
    from contextlab.eval.bayes_fit import FIT_RESAMPLES

    return 2 * FIT_RESAMPLES * refit


def duration(seconds: float) -> str:
    """A rough duration: 40 s, 3 min, 2.5 h."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def estimate_line(estimate: float, context: int, pair: bool = False, pairing: float = 0.0) -> str:
    """The estimate said before the battery runs, and for a long one the context that would fit
    ``SHORT_ENOUGH`` (the work of every step grows about linearly with the context, so the estimate is
    scaled by the ratio of contexts: rough, as the estimate is). With ``pair`` it says that the pairing
    (bootstraps of every evaluation: ``pairing`` seconds, when known) and the report come after (a pair
    profile said 3 min and took 6)."""
    if pair and pairing:
        after = f"; then about {duration(pairing)} pairing the two models, and the report"
    else:
        after = "; the pairing of the two models and the report come after it" if pair else ""
    line = (
        f"estimated time on this machine: about {duration(estimate)} for the evaluations (from a timed "
        f"forward pass and a timed refit; rough{after})"
    )
    if estimate <= LONG_ESTIMATE:
        return line
    shorter = context // 2
    while shorter > MIN_CONTEXT and estimate * shorter / context > SHORT_ENOUGH:
        shorter //= 2
    if shorter < MIN_CONTEXT:
        return line
    return f"{line}; --context {shorter:,} would take about {duration(estimate * shorter / context)}"
