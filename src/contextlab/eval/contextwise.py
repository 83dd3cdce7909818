"""Contextwise loss: mean loss at every position, best-context loss, its true minimum, 2^i buckets.

The protocol of the compute-optimal-context study: take every document with at least L
tokens, or consecutive L-token pieces of long documents, score each piece from its own
start with no context from any other piece, and average the loss of the token at position
t over pieces. Which pieces (``pieces.sequences``): every qualifying document's first piece, then
every second piece, and so on, until ``max_docs`` pieces. By default (``pieces_per_doc``
unset) a document gives as many pieces as that round-robin asks of it, so a corpus of at
least ``max_docs`` long documents gives each its first piece (as one piece per document
always did) while a corpus of a few long documents (one Tiny Shakespeare or WikiText file)
still gives ``max_docs`` pieces instead of one; with ``max_docs = 0`` (all) the default is
one piece per document, and ``pieces_per_doc = 0`` takes every piece that fits. Trade-off:
pieces of one document are not independent samples, so the curve gets its sample count
but the intervals below still count documents. The curve is loss vs context length t (tokens
seen before the predicted token); L may exceed the training context (RoPE models), which
shows whether the model keeps improving beyond it. Summaries:

* best-context loss: the mean loss over the last 10% of the training context (the
  study's heuristic for models that do not generalise beyond their context), with a 95%
  interval over documents (``best_context_loss_interval95``);
* its true minimum over every evaluated position, beyond the training context too, and
  where it falls: the lowest mean over a window as wide as the best-context window
  (``min_window_loss``, comparable to the best-context loss) and the lowest single position
  (``min_loss``; the minimum of many noisy means is biased low, by about its stderr);
* SPLICE-style buckets (its Appendix E): positions grouped into [2^i, 2^(i+1)) and
  averaged, one number per octave of context;
* the context gain: the loss of the same target tokens with one visible token minus with the
  whole context before them, i.e. what reading the context is worth to the model. The
  targets are those of the best-context window (context lengths near the training context);
  each is also scored with only the one token before it (a batch of two-token sequences,
  cheap next to the main pass). The per-piece differences are averaged and given a 95%
  cluster-robust t interval over documents (``stats.context_gain``). The same quantity, on
  random targets, is what ``bayes-fit`` and ``visible`` report as context gain: one name, one
  meaning;
* whether the curve falls with position (``falls_with_position``), as a statistical
  statement about a different number, ``first_to_last_bucket``: each document's mean loss
  in the first bucket minus that in the last complete bucket, averaged over documents, with
  a 95% Student-t interval; the curve falls when the whole interval lies above 0 (a one-sided
  test at the 2.5% level). It is not the context gain: the first bucket's targets are the
  first tokens of documents (often boilerplate), not the late targets, and when the length
  runs past the training context the last bucket lies beyond it (``late_beyond_train_context``
  says so, and every bucket carries ``beyond_train_context``). Documents, not positions or
  pieces, are the unit: the losses of neighbouring positions (and of pieces of one document)
  are correlated, so pieces are averaged per document first and a test over positions would
  be overconfident. With fewer than two documents there is no interval, and then the claim
  is null, not false (``falls_with_position``, like the intervals), with a line of the
  results text saying why. A t interval rather than a bootstrap: deterministic and correct for few
  documents (the late-bucket means average many positions, so the differences are near
  normal). A monotone-decrease test was not chosen: it tests a stronger claim (lower at every
  step) that noise and the rise beyond the training context break, while the reader's
  question is whether late positions beat early ones.

The default length is the model's context (L = context + 1 tokens: every context length
1..context is scored); a longer ``--length`` measures beyond it (RoPE models), and then the
buckets past the training context are marked as such in the JSON, the plot and the tables.

Cost: each batch of documents goes through the model exactly once (one forward of L
tokens per document); per-position sums are accumulated in float64. Beside the JSON, each
piece's (document, start), its mean loss in every bucket and over the best-context window are
saved (a few numbers per piece), so that ``contextlab compare`` can pair two models piece by piece.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

import contextlab.eval.heldout as heldout
import contextlab.eval.progress as progress
import contextlab.eval.stats as stats
import contextlab.eval.tasks as tasks
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.base import EvalOutput, open_store
from contextlab.eval.pieces import cut_pieces, read_share


@dataclass
class Options:
    length: int = opt(
        0,
        "tokens per document L, scored at context lengths 1..L-1 (shorter documents are skipped); "
        "0 = the training context (--train-context, else the model's) + 1, every context length up to "
        "it; longer measures beyond the training context (RoPE models), and those buckets are marked "
        "beyond_train_context",
    )
    max_docs: int = opt(64, "pieces to average over (see --pieces-per-doc); 0 = all that qualify")
    pieces_per_doc: int | None = opt(
        None,
        "cut each long document into up to this many consecutive L-token pieces, each scored from its "
        "own start; 0 = as many as fit; unset = as many as --max-docs needs (every document's first "
        "piece, then second pieces, ...: a few long documents still give --max-docs pieces, many "
        "documents one each; with --max-docs 0, one per document)",
    )
    best_fraction: float = opt(
        0.1, "best-context loss = mean loss over this last fraction of the training context"
    )
    train_context: int = opt(0, "the training context for the best-context loss; 0 = the model's")
    split: Literal["all", "run"] = opt("all", heldout.SPLIT_HELP)
    heldout_of: str = heldout.of_option()


def position_losses(adapter, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """tokens (N, L) -> per-position (sum, sum of squares) of the loss over N documents, each
    (L-1,), float64."""
    s, s2, _ = scan(adapter, tokens, [])
    return s, s2


def scan(adapter, tokens: np.ndarray, ranges: list[tuple[int, int]]):
    """tokens (N, L) -> per-position (sum, sum of squares) of the loss, each (L-1,) float64, and
    every sequence's mean loss over the context lengths lo..hi of each of ``ranges``: (N, R)."""
    s = np.zeros(tokens.shape[1] - 1)
    s2 = np.zeros(tokens.shape[1] - 1)
    means = np.zeros((len(tokens), len(ranges)))
    starts = range(0, len(tokens), adapter.batch_size)
    for a in progress.bar(starts, desc="contextwise", unit="batch"):
        loss = -adapter.token_logprobs(tokens[a : a + adapter.batch_size]).double().cpu().numpy()  # (b, L-1)
        s += loss.sum(0)
        s2 += (loss * loss).sum(0)
        for j, (lo, hi) in enumerate(ranges):
            means[a : a + len(loss), j] = loss[:, lo - 1 : hi].mean(1)
    return s, s2, means


def buckets(curve: np.ndarray, train_context: int | None = None) -> list[dict]:
    """curve[t-1] = loss with t tokens of context -> mean loss over t in [2^i, 2^(i+1)); with
    ``train_context``, each bucket says whether any of its context lengths lies beyond it."""
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
                **({} if train_context is None else {"beyond_train_context": hi > train_context}),
            }
        )
        i += 1
    return out


def best_context_loss(curve: np.ndarray, train_context: int, fraction: float) -> dict:
    """Mean loss over context lengths t in (train_context*(1-fraction), train_context]."""
    top = min(train_context, len(curve))
    lo = max(1, int(math.floor(top * (1 - fraction))) + 1)
    return {"loss": float(curve[lo - 1 : top].mean()), "from": lo, "to": top}


def curve_minimum(curve: np.ndarray, sem: np.ndarray, train_context: int, width: int) -> dict:
    """The lowest mean over ``width`` consecutive positions and the lowest single position of the
    whole curve (curve[t-1] = loss at context length t), each with where it falls."""
    width = max(1, min(width, len(curve)))
    sums = np.concatenate([[0.0], np.cumsum(curve)])
    means = (sums[width:] - sums[:-width]) / width  # means[i]: context lengths i+1 .. i+width
    i, t = int(np.argmin(means)), int(np.argmin(curve)) + 1
    return {
        "window": {
            "loss": float(means[i]),
            "from": i + 1,
            "to": i + width,
            "inside_train_context": i + width <= train_context,
        },
        "position": {
            "loss": float(curve[t - 1]),
            "context": t,
            "stderr": float(sem[t - 1]),
            "inside_train_context": t <= train_context,
        },
    }


def one_token_losses(adapter, tokens: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """tokens (N, L) -> (N,) each piece's mean loss of the targets at context lengths lo..hi when the
    model sees only the one token before each: two-token sequences (x_{t-1}, x_t), in batches."""
    pairs = np.stack([tokens[:, t - 1 : t + 1] for t in range(lo, hi + 1)], axis=1)  # (N, W, 2)
    flat = pairs.reshape(-1, 2)  # (N*W, 2)
    out = np.empty(len(flat))
    step = max(1, adapter.batch_size) * 64  # two-token rows are cheap: many per forward
    for a in progress.bar(range(0, len(flat), step), desc="contextwise: one visible token", unit="batch"):
        out[a : a + step] = -adapter.last_token_logprobs(flat[a : a + step]).double().cpu().numpy()
    return out.reshape(len(tokens), -1).mean(1)  # (N,)


def _bucket_ranges(L: int) -> tuple[list[tuple[int, int]], int]:
    """The (from, to) context lengths of every bucket, and the index of the last complete one (the
    first bucket and that one are the early and late ranges of ``first_to_last_bucket``; a partial
    last bucket may hold a single position)."""
    bk = buckets(np.zeros(L - 1))  # the bucket bounds depend on L only
    last = max(i for i, b in enumerate(bk) if b["complete"])
    return [(b["from"], b["to"]) for b in bk], last


def resolved_length(adapter, options: Options) -> int:
    """The tokens per piece L: ``--length``, else the model's (or ``--train-context``) context + 1."""
    return options.length or (options.train_context or adapter.context) + 1


def check_options(o: Options) -> None:
    """One line for a value the measurement has no meaning for (``--length 1`` and ``--best-fraction 0``
    ended in a traceback; ``--max-docs -5`` dropped the last 5 pieces in silence, as a slice does)."""
    for flag, value in (("--max-docs", o.max_docs), ("--train-context", o.train_context)):
        if value < 0:
            raise UserError(f"contextwise {flag} must be 0 (the default) or more, got {value}")
    if o.pieces_per_doc is not None and o.pieces_per_doc < 0:
        raise UserError(
            f"contextwise --pieces-per-doc must be 0 (as many as fit) or more, got {o.pieces_per_doc}"
        )
    if o.length != 0 and o.length < 2:
        raise UserError(
            f"contextwise --length must be 0 (the default) or at least 2 (a token of context and its "
            f"target), got {o.length}"
        )
    if not 0 < o.best_fraction <= 1:
        raise UserError(
            f"contextwise --best-fraction must be in (0, 1] (the last share of the training context the "
            f"best-context loss averages), got {o.best_fraction:g}"
        )


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    check_options(options)
    store = open_store(data, adapter, "contextwise", split=options.split)
    view, held = heldout.documents(store, adapter.info.path, options.split, of=options.heldout_of)
    ctx = options.train_context or adapter.context
    L = resolved_length(adapter, options)
    adapter.check_length(L - 1, "each contextwise piece", fix="lower --length")
    pieces, tokens = cut_pieces(
        view,
        L,
        options.max_docs,
        options.pieces_per_doc,
        f"{store.path} held out by the run" if held else str(store.path),
    )
    n = len(tokens)
    progress.announce(
        "contextwise",
        {
            "length": L,
            "pieces": n,
            "reads": read_share(n * L, int(np.sum(view.lengths()))),
            "documents": len(set(heldout.in_store(view, pieces)[:, 0].tolist())),
            "train context": ctx,
            "beyond it": f"context lengths {ctx + 1}..{L - 1}" if ctx < L - 1 else None,
            "data": store.path,
            "split": heldout.announced(held),
            "note": tasks.shorter(adapter, options.length, "--length")
            or (f"the pieces are shorter than the {ctx:,}-token training context" if ctx > L - 1 else None),
        },
    )
    ranges, last = _bucket_ranges(L)
    best = best_context_loss(np.zeros(L - 1), ctx, options.best_fraction)  # its bounds depend on L only
    s, s2, means = scan(adapter, tokens, ranges + [(best["from"], best["to"])])  # means: (N, buckets + 1)
    curve = s / n
    sem = np.sqrt(np.maximum(s2 / n - curve**2, 0) / max(n - 1, 1))
    bk = buckets(curve, ctx)
    best = best_context_loss(curve, ctx, options.best_fraction)
    lowest = curve_minimum(curve, sem, ctx, best["to"] - best["from"] + 1)
    docs = heldout.in_store(view, pieces)[:, 0].tolist()  # the store's documents: pieces of one share it
    best["interval95"] = stats.mean_interval(means[:, -1], docs)  # over documents, as every interval here
    one = one_token_losses(adapter, tokens, best["from"], best["to"])  # (N,)
    # the same targets with 1 vs all tokens before them visible: their mean difference, so that the
    # gain is loss_one_token - loss_full_context and the quantity `compare` pairs
    gain = stats.context_gain(one, means[:, -1], docs)
    gain.update(
        targets=[best["from"], best["to"]],
        loss_one_token=float(one.mean()),
        loss_full_context=float(means[:, -1].mean()),
    )
    early, late = ranges[0], ranges[last]
    drop = stats.paired_t(means[:, 0], means[:, last], docs)
    drop.update(early=list(early), late=list(late), late_beyond_train_context=late[1] > ctx)
    results = {
        "summary": _summary(curve, bk, best, lowest, gain, drop, ctx),
        "length": L,
        "train_context": ctx,
        "n_sequences": n,
        "n_documents": len(set(docs)),
        "best_context": best,
        "minimum": lowest,
        "context_gain": gain,
        "first_to_last_bucket": drop,
        "buckets": bk,
        "context": list(range(1, L)),
        "loss": curve.tolist(),
        "stderr": sem.tolist(),
    }
    curves = {
        adapter.info.id: {
            **{k: results[k] for k in ("context", "loss", "minimum", "best_context", "stderr")},
            "train_context": ctx,
        }
    }
    plot = functools.partial(_plot, curves, smooth=_smooth(n))
    arrays = {  # per piece, what a paired comparison of two models needs (contextlab.compare.paired)
        "pieces": heldout.in_store(view, pieces),  # (N, 2): document, start token (in the store)
        "piece_bucket_loss": means[:, :-1],  # (N, buckets): each piece's mean loss in each bucket
        "piece_best_loss": means[:, -1],  # (N,): each piece's mean over the best-context window
        "piece_one_token_loss": one,  # (N,): the same targets with one visible token (gain = this - best)
    }
    if ctx > L - 1:  # the window is the last fraction of the scored lengths, not of the training context
        results.setdefault("text", []).append(_short_pieces(L, ctx, best))
    if drop["interval95"] is None:  # one document: no interval, so no claim either way
        scored = "the one piece scored comes" if n == 1 else f"all {n} pieces scored come"
        results["text"] = results.get("text", []) + [
            "falls_with_position and the 95% intervals are null: they are over documents (pieces of one "
            f"document share its text) and {scored} from one document; give a store of two or more "
            f"documents of at least {L} tokens"
        ]
    data = {"store": str(store.path), "hash": store.hash, "pieces": n, **held}
    return EvalOutput(results, data, arrays=arrays, plot=plot)


def _short_pieces(L: int, ctx: int, best: dict) -> str:
    """The line for pieces shorter than the training context: the best-context window moved down."""
    return (
        f"the pieces are {L:,} tokens, fewer than the model's {ctx:,}-token training context, so the "
        f"best-context window is context lengths {best['from']:,}..{best['to']:,}, not the last part of "
        f"its training context: this best-context loss reads the model at shorter contexts than its own "
        f"(compare it only with models read at the same --length)"
    )


def _summary(
    curve: np.ndarray, bk: list[dict], best: dict, lowest: dict, gain: dict, drop: dict, ctx: int
) -> dict:
    """The headline numbers, each name with one meaning (module docstring)."""
    last = [b for b in bk if b["complete"]][-1]
    interval = drop["interval95"]
    return {
        "best_context_loss": best["loss"],
        "best_context_loss_interval95": best["interval95"],
        "context_gain": gain["gain"],
        "context_gain_interval95": gain["interval95"],
        "min_window_loss": lowest["window"]["loss"],
        "min_window": [lowest["window"]["from"], lowest["window"]["to"]],
        "min_window_inside_train_context": lowest["window"]["inside_train_context"],
        "min_loss": lowest["position"]["loss"],
        "min_context": lowest["position"]["context"],
        "min_inside_train_context": lowest["position"]["inside_train_context"],
        "mean_loss": float(curve.mean()),
        "loss_first_bucket": bk[0]["loss"],
        "loss_last_full_bucket": last["loss"],
        "last_full_bucket": [last["from"], last["to"]],
        "last_full_bucket_beyond_train_context": last["to"] > ctx,
        "loss_beyond_train_context": float(curve[ctx:].mean()) if len(curve) > ctx else None,
        "first_to_last_bucket_drop": drop["gain"],
        "first_to_last_bucket_drop_interval95": interval,
        "falls_with_position": None if interval is None else interval[0] > 0,  # None: no interval, no claim
    }


def _plot(curves: dict, path, smooth: int):
    from contextlab.result_plots import contextwise_png

    return contextwise_png(curves, path, smooth=smooth)


def _smooth(n_docs: int) -> int:
    return 1 if n_docs >= 256 else 9  # few documents: the plot adds a centred mean over 9 positions


def combined_plot(result_files: list, out, labels: list[str] | None = None) -> None:
    """Several models' contextwise.json on one plot (log x), each labelled by its model's id or by
    ``labels`` (the quickstart's run names, not their paths)."""
    import json

    curves = {}
    for i, f in enumerate(result_files):
        doc = json.loads(open(f).read())
        r = doc["results"]
        curves[labels[i] if labels else doc["model"]["id"]] = {
            "context": r["context"],
            "loss": r["loss"],
            "train_context": r["train_context"],
            "minimum": r.get("minimum"),  # absent in results written before it
            "best_context": r.get("best_context"),
            "stderr": r.get("stderr"),
        }
    from contextlab.result_plots import contextwise_png

    contextwise_png(curves, out, smooth=9)
