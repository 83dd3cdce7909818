"""Evaluations: how well a model uses its context, on contextlab runs and any local HF causal LM.

Each evaluation is a plain function ``run(adapter, options, data) -> EvalOutput`` in its own
module, listed in ``EVALS``; its typed options dataclass is in ``OPTIONS``. ``load_model``
(``adapter.py``) turns a run directory or a Hugging Face folder into the adapter every
evaluation uses, and ``evaluate`` (``base.py``) runs one and writes ``eval/<name>.json``
plus its plot. This package imports ``contextlab.models`` and ``contextlab.data`` only,
never the trainer.
"""

from __future__ import annotations

from contextlab.eval import bayes_fit, contextwise, icl, kv, needle, passkey, ppl, vartrack, visible
from contextlab.eval.adapter import ModelAdapter, load_model
from contextlab.eval.base import EvalOutput, evaluate

EVALS = {
    "ppl": ppl.run,  # perplexity and bits per byte, rolling windows with a stride
    "contextwise": contextwise.run,  # loss by position, best-context loss, 2^i buckets
    "bayes-fit": bayes_fit.run,  # last-token loss vs visible context, fitted C0 + C / l^gamma
    "niah": needle.run,  # needle in a haystack, lengths x depths
    "kv": kv.run,  # lost-in-the-middle key-value retrieval, accuracy by gold position
    "passkey": passkey.run,  # passkey retrieval in filler text
    "vartrack": vartrack.run,  # RULER-like variable tracking
    "icl": icl.run,  # TREC many-shot in-context classification
    "visible": visible.run,  # any of the above vs visible context
}

OPTIONS = {
    "ppl": ppl.Options,
    "contextwise": contextwise.Options,
    "bayes-fit": bayes_fit.Options,
    "niah": needle.Options,
    "kv": kv.Options,
    "passkey": passkey.Options,
    "vartrack": vartrack.Options,
    "icl": icl.Options,
    "visible": visible.Options,
}

__all__ = ["EVALS", "OPTIONS", "EvalOutput", "ModelAdapter", "evaluate", "load_model"]
