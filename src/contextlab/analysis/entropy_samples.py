"""What the entropy analysis reads: for each visible context length l, the hidden states of N samples
and the loss of the token that follows, under one of two protocols.

* ``collect_text``: N target tokens at random positions (>= the largest l) of a token store's
  documents, the same targets for every l; the model sees the l tokens right before the target
  (the left is cut off, as in ``bayes-fit``), and the feature is taken at a position counted from
  the end of what it sees.
* ``collect_parity``: a store written by ``contextlab data synthetic parity`` (one task per row,
  unbiased bits). The model sees the task token and the l nearest bits, the farther bits shown as
  ``'?'`` as in training; the loss is the answer's, beside the exact Bayes risk at l, each
  sample's task (for the task-weighted loss) and the Bayes predictor's loss on the same samples.

``text_contexts`` / ``parity_contexts`` are the lengths measured when none are given. Trade-off:
the feature and the loss come from the adapter's ``features_and_last_logprob`` (one trunk pass for
a contextlab model, two forwards for a Hugging Face one), so any causal LM can be read, and the
measures (``entropy.analyze``) never see a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from contextlab import bars
from contextlab.errors import UserError


class Reading(Protocol):
    """What a collector is told to read (``entropy.Options`` is one): the measures' own options stay
    with the measures, so this module needs nothing of them."""

    contexts: list[int]  # visible context lengths l
    samples: int  # samples N per length, the same at every l
    layer: int  # which layer's hidden state
    position: int  # which token's, counted from the end of the visible input
    seed: int  # of the sampled targets / rows


@dataclass
class Collected:
    contexts: list[int]
    features: list[np.ndarray]  # per context: (N, C) float32
    losses: np.ndarray  # (n_contexts, N) nats
    bayes: list[float] | None  # exact Bayes risk per context (parity) or None
    info: dict
    bayes_losses: np.ndarray | None = None  # (n_contexts, N): the Bayes predictor's loss on the same samples
    strata: np.ndarray | None = None  # (N,) each sample's task (parity)
    strata_weights: np.ndarray | None = None  # (n_tasks,) each task's exact frequency


def _rows_per_batch(adapter, length: int) -> int:
    return max(adapter.batch_size, adapter.batch_size * adapter.context // max(length, 1))


def _forward(adapter, ids: np.ndarray, layer: int, position: int) -> tuple[np.ndarray, np.ndarray]:
    """ids (N, T+1): (features (N, C) at ``position`` of the first T tokens, loss (N,) of the last token)."""
    feats, losses = [], []
    rows = _rows_per_batch(adapter, ids.shape[1])
    for a in range(0, len(ids), rows):
        f, lp = adapter.features_and_last_logprob(ids[a : a + rows], layer, position)  # (b, C), (b,)
        feats.append(f.cpu().numpy())
        losses.append(-lp.double().cpu().numpy())  # (b,)
    return np.concatenate(feats), np.concatenate(losses)


def text_contexts(context: int) -> list[int]:
    """The fitted visible lengths of the text protocol: 8, 16, 32, ... below ``context``, then
    ``context`` itself (256 -> 8, 16, ..., 128, 256); a context under 32 gets C/4, C/2 and C."""
    ladder = [2**i for i in range(3, context.bit_length()) if 2**i < context] + [context]
    if len(ladder) >= 3:
        return ladder
    return sorted({max(1, context // 4), max(1, context // 2), context})


def parity_contexts(n_bits: int) -> list[int]:
    """The fitted visible-bit counts of the parity protocol: 9 evenly from 0 to ``n_bits``."""
    return sorted({round(n_bits * i / 8) for i in range(9)})


def _check_contexts(adapter, contexts: list[int], extra: int, what: str) -> list[int]:
    ctxs = sorted({int(c) for c in contexts})
    if not ctxs:
        raise UserError("give the context lengths to measure, e.g. --contexts 8,16,32,64")
    if ctxs[0] < 1:
        raise UserError(f"context lengths must be >= 1, got {ctxs[0]}")
    if ctxs[-1] + extra > adapter.context:
        raise UserError(
            f"context {ctxs[-1]} ({what}) needs {ctxs[-1] + extra} tokens but {adapter.info.id} supports "
            f"at most {adapter.context}; choose shorter --contexts"
        )
    return ctxs


def _check_position(position: int, length: int) -> None:
    if not -length <= position < 0:
        raise UserError(
            f"--position {position} must lie in -{length}..-1 (counted from the end of the visible "
            f"input of {length} tokens)"
        )


def collect_text(adapter, store, o: Reading, progress: bool = True) -> Collected:
    from contextlab.eval.bayes_fit import sample_targets

    ctxs = _check_contexts(adapter, o.contexts, 0, "visible tokens")
    _check_position(o.position, ctxs[0])
    targets = sample_targets(store, o.samples, ctxs[-1], o.seed, "--contexts")
    feats, losses = [], np.zeros((len(ctxs), len(targets)))
    for i, l in enumerate(bars.bar(ctxs, desc="entropy: contexts", disable=None if progress else True)):
        ids = np.stack(
            [np.asarray(store.doc(d)[t - l : t + 1], dtype=np.int64) for d, t in targets]
        )  # (N, l+1)
        f, losses[i] = _forward(adapter, ids, o.layer, o.position)
        feats.append(f)
    ids = getattr(store, "indices", None)  # a view: its pieces of one document count it once
    documents = {int(ids[d]) if ids is not None else d for d, _ in targets}
    positions = int(np.maximum(np.asarray(store.lengths()) - ctxs[-1], 0).sum())  # what targets draw from
    info = {"protocol": "text", "n_documents": len(documents), "distinct_targets": len(set(targets))}
    return Collected(ctxs, feats, losses, None, {**info, "target_positions": positions})


def parity_store(store):
    """(ParityConfig, tasks) of a parity store written for measuring, else a UserError."""
    from contextlab.data import synthetic as syn

    found = syn.parity_of_store(store)
    if found is None:
        raise UserError(
            f"{store.path} is not a synthetic parity store; use --protocol text, or write one with "
            "`contextlab data synthetic parity`"
        )
    cfg, tasks = found
    if cfg.queries != 1 or cfg.bias_fraction > 0:
        raise UserError(
            f"{store.path} is a parity training store (queries={cfg.queries}, bias_fraction="
            f"{cfg.bias_fraction}); measure on a store written with queries=1 and bias_fraction=0"
        )
    return cfg, tasks


def _unmasked_samples(store, n_bits: int, o: Reading) -> np.ndarray:
    """``o.samples`` samples with every bit visible, drawn with ``o.seed``: (N, n_bits + 2) ids."""
    visible = np.array([m["visible"] for m in store.docs_meta()])
    full = np.flatnonzero(visible == n_bits)  # samples with nothing masked
    if len(full) < o.samples:
        raise UserError(
            f"{store.path} has {len(full)} unmasked samples but --samples is {o.samples}; write a store "
            "with more samples and --mask-fraction 0, or lower --samples"
        )
    pick = np.sort(np.random.default_rng(o.seed).choice(full, size=o.samples, replace=False))
    return np.stack([np.asarray(store.doc(int(d)), dtype=np.int64) for d in pick])


def collect_parity(adapter, store, o: Reading, progress: bool = True) -> Collected:
    from contextlab.data import synthetic as syn

    cfg, tasks = parity_store(store)
    L = cfg.n_bits
    ctxs = sorted({int(c) for c in o.contexts})
    if not ctxs or ctxs[0] < 0 or ctxs[-1] > L:
        raise UserError(f"parity contexts are visible bits in 0..{L}; got {o.contexts}")
    _check_contexts(adapter, [L], 1, "all bits + the task token")
    _check_position(o.position, L + 1)
    docs = _unmasked_samples(store, L, o)  # (N, L + 2)
    feats, losses = [], np.zeros((len(ctxs), len(docs)))
    for i, l in enumerate(bars.bar(ctxs, desc="entropy: contexts", disable=None if progress else True)):
        f, losses[i] = _forward(adapter, syn.mask_tokens(docs, L, l), o.layer, o.position)
        feats.append(f)
    far = tasks.far[docs[:, L] - syn.TASK_BASE]  # (N,) the far bit of each sample's task
    bayes_losses = np.stack([np.where(far > l, np.log(2.0), 0.0) for l in ctxs])  # (n_contexts, N)
    return Collected(
        ctxs,
        feats,
        losses,
        syn.bayes_risk_curve(tasks, ctxs),
        {"protocol": "parity", "n_bits": L, "n_tasks": cfg.n_tasks},
        bayes_losses,
        docs[:, L] - syn.TASK_BASE,
        np.asarray(tasks.freq, dtype=np.float64),
    )
