"""Contextwise loss: mean loss at every position, best-context loss, 2^i position buckets.

The protocol of the compute-optimal-context study: take every document with at least L
tokens (or, with ``pieces_per_doc``, consecutive L-token pieces of long documents), score
each from its own start with no context from any other document, and average the loss of
the token at position t over documents. The curve is loss vs context length t (tokens
seen before the predicted token); L may exceed the training context (RoPE models), which
shows whether the model keeps improving beyond it. Two summaries:

* best-context loss: the mean loss over the last 10% of the training context (the
  study's heuristic for models that do not generalise beyond their context);
* SPLICE-style buckets (its Appendix E): positions grouped into [2^i, 2^(i+1)) and
  averaged, one number per octave of context.

Cost: each batch of documents goes through the model exactly once (one forward of L
tokens per document); per-position sums are accumulated in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.base import EvalOutput, open_store


@dataclass
class Options:
    length: int = opt(
        0,
        "tokens per document L, scored at context lengths 1..L-1 (shorter documents are skipped); "
        "0 = 2x the model's context for RoPE models, else the context + 1",
    )
    max_docs: int = opt(64, "documents (or pieces) to average over; 0 = all that qualify")
    pieces_per_doc: int = opt(
        1,
        "cut each long document into up to this many consecutive L-token pieces, each "
        "scored from its own start; 0 = as many as fit",
    )
    best_fraction: float = opt(
        0.1, "best-context loss = mean loss over this last fraction of the training context"
    )
    train_context: int = opt(0, "the training context for the best-context loss; 0 = the model's")


def sequences(store, length: int, max_docs: int, pieces_per_doc: int) -> list[tuple[int, int]]:
    """(document, start) of the L-token pieces to score: first pieces of every document, then second pieces...

    Round-robin over documents, so that ``max_docs`` pieces come from as many documents as possible.
    """
    lengths = store.lengths()
    docs = np.flatnonzero(lengths >= length)
    n_pieces = {int(d): int(lengths[d] // length) for d in docs}
    if pieces_per_doc:
        n_pieces = {d: min(n, pieces_per_doc) for d, n in n_pieces.items()}
    out = [
        (d, k * length) for k in range(max(n_pieces.values(), default=0)) for d in n_pieces if k < n_pieces[d]
    ]
    return out[:max_docs] if max_docs else out


def position_losses(adapter, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """tokens (N, L) -> per-position (sum, sum of squares) of the loss over N documents, each
    (L-1,), float64."""
    s = np.zeros(tokens.shape[1] - 1)
    s2 = np.zeros(tokens.shape[1] - 1)
    for a in range(0, len(tokens), adapter.batch_size):
        loss = -adapter.token_logprobs(tokens[a : a + adapter.batch_size]).double().cpu().numpy()  # (b, L-1)
        s += loss.sum(0)
        s2 += (loss * loss).sum(0)
    return s, s2


def buckets(curve: np.ndarray) -> list[dict]:
    """curve[t-1] = loss with t tokens of context -> mean loss over t in [2^i, 2^(i+1))."""
    out, i = [], 0
    n = len(curve)
    while 2**i <= n:
        lo, hi = 2**i, min(2 ** (i + 1) - 1, n)
        mean = float(curve[lo - 1 : hi].mean())
        out.append(
            {
                "from": lo,
                "to": hi,
                "loss": mean,
                "perplexity": math.exp(mean),
                "complete": hi == 2 ** (i + 1) - 1,
            }
        )
        i += 1
    return out


def best_context_loss(curve: np.ndarray, train_context: int, fraction: float) -> dict:
    """Mean loss over context lengths t in (train_context*(1-fraction), train_context]."""
    top = min(train_context, len(curve))
    lo = max(1, int(math.floor(top * (1 - fraction))) + 1)
    return {"loss": float(curve[lo - 1 : top].mean()), "from": lo, "to": top}


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    store = open_store(data, adapter, "contextwise")
    ctx = options.train_context or adapter.context
    L = options.length or (2 * ctx if adapter.info.extends_beyond else ctx + 1)
    adapter.check_length(L - 1, "the documents")
    pieces = sequences(store, L, options.max_docs, options.pieces_per_doc)
    if not pieces:
        raise UserError(
            f"no document of {store.path} has {L} tokens (longest: {int(store.lengths().max())}); "
            "lower --length"
        )
    tokens = np.stack([np.asarray(store.doc(d)[s : s + L], dtype=np.int64) for d, s in pieces])  # (N, L)
    s, s2 = position_losses(adapter, tokens)
    n = len(tokens)
    curve = s / n
    sem = np.sqrt(np.maximum(s2 / n - curve**2, 0) / max(n - 1, 1))
    bk = buckets(curve)
    best = best_context_loss(curve, ctx, options.best_fraction)
    beyond = float(curve[ctx:].mean()) if len(curve) > ctx else None
    last = [b for b in bk if b["complete"]][-1]  # a partial last bucket may hold a single position
    summary = {
        "best_context_loss": best["loss"],
        "mean_loss": float(curve.mean()),
        "loss_first_bucket": bk[0]["loss"],
        "loss_last_full_bucket": last["loss"],
        "last_full_bucket": [last["from"], last["to"]],
        "loss_beyond_train_context": beyond,
        "falls_with_position": bool(last["loss"] < bk[0]["loss"]),
    }
    results = {
        "summary": summary,
        "length": L,
        "train_context": ctx,
        "n_sequences": n,
        "n_documents": len({d for d, _ in pieces}),
        "best_context": best,
        "buckets": bk,
        "context": list(range(1, L)),
        "loss": curve.tolist(),
        "stderr": sem.tolist(),
    }
    label = adapter.info.id

    def plot(path):
        from contextlab.eval.plots import contextwise_png

        return contextwise_png(
            {label: {"context": results["context"], "loss": results["loss"], "train_context": ctx}},
            path,
            smooth=_smooth(n),
        )

    return EvalOutput(results, {"store": str(store.path), "hash": store.hash, "pieces": n}, plot=plot)


def _smooth(n_docs: int) -> int:
    return 1 if n_docs >= 256 else 9  # few documents: average 9 neighbouring positions in the plot


def combined_plot(result_files: list, out) -> None:
    """Several models' contextwise.json on one plot (log x)."""
    import json

    curves = {}
    for f in result_files:
        doc = json.loads(open(f).read())
        r = doc["results"]
        curves[doc["model"]["id"]] = {
            "context": r["context"],
            "loss": r["loss"],
            "train_context": r["train_context"],
        }
    from contextlab.eval.plots import contextwise_png

    contextwise_png(curves, out, smooth=9)
