"""Perplexity and bits per byte with rolling windows and a configurable stride.

Every document is scored on its own (no context crosses a document boundary). A window
of ``window`` tokens is run at starts 0, stride, 2*stride, ...; the input
``tokens[s : s + window]`` predicts tokens s+1 .. s+window and each token is counted in
the first window that predicts it, so with stride < window every token after the first
window keeps at least ``window - stride`` tokens of context ("sliding window"
perplexity). With stride == window the inputs are disjoint and consecutive windows
overlap by exactly the one token that is the last target of one window and the first
input of the next. That is the case lm-eval's ``loglikelihood_rolling`` computes (it only
offers this case, see its issue #1565), but not its number: an independent comparison
measured a 1.7e-4 relative perplexity difference, from three causes. (1) lm-eval also scores
each document's first token, conditioned on a prefix token (BOS, else end-of-text); we do not. (2) Its
windows are shifted by one: its first window predicts tokens 0..W-1 from prefix, 0..W-2, window
k predicts kW..(k+1)W-1 from tokens kW-1..(k+1)W-2; ours predicts kW+1..(k+1)W from kW..(k+1)W-1.
(3) Its last, partial window (r targets) is fed the W tokens before its last target, so
they see W-r+1..W tokens of context; ours starts at the boundary, so they see 1..r. Its bits
per byte also count the first token's bytes. lm-eval is not a dependency, so no test
compares the two; compare lm-eval's numbers with lm-eval's. A smaller stride gives a lower,
truer perplexity at a cost of about window/stride times the compute.

The first token of each document has no context and is never scored. Bits per byte
divide the total negative log-likelihood (in bits) by the UTF-8 bytes of the scored text
(the document minus its first token), so models with different tokenizers compare.
Windows of equal length are batched; the per-token losses are returned in document
order (and saved beside the JSON).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

import contextlab.eval.heldout as heldout
import contextlab.eval.progress as progress
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.base import EvalOutput, open_store


@dataclass
class Options:
    RENAMED: ClassVar[dict[str, str]] = {"window": "context"}

    context: int = opt(0, "tokens the model sees per window (the context); 0 = the model's context")
    stride: int = opt(
        0, "tokens between window starts (<= context); 0 = context (disjoint windows; not lm-eval's numbers)"
    )
    max_docs: int = opt(0, "score at most this many documents (the first ones); 0 = all")
    max_tokens: int = opt(0, "cut every document to this many tokens; 0 = no cut")
    split: Literal["all", "run"] = opt("all", heldout.SPLIT_HELP)
    heldout_of: str = heldout.of_option()


def scored_bytes(tokenizer, doc) -> int:
    """Bytes of the scored text of ``doc``: every token but the first, counted token by token where the
    tokenizer knows each token's bytes (a piece cut at --max-tokens may end inside a character, which
    decodes to U+FFFD's 3 bytes: a byte model's bits per byte was not its bits per token), else as
    the decoded text's bytes less the first token's."""
    counted = tokenizer.token_bytes(doc[1:])
    if counted is not None:
        return counted
    return len(tokenizer.decode(doc).encode("utf-8")) - len(tokenizer.decode(doc[:1]).encode("utf-8"))


def windows(n: int, window: int, stride: int) -> list[tuple[int, int, int]]:
    """(input start, input end, first new target) for a document of n tokens; targets are 1..n-1."""
    out, done = [], 0  # done = last target already scored
    s = 0
    while done < n - 1:
        e = min(s + window, n - 1)  # the input predicts tokens s+1 .. e
        out.append((s, e, max(done + 1, s + 1)))
        done = e
        s += stride
    return out


def document_losses(
    adapter, docs: list[np.ndarray], window: int, stride: int, desc: str = "ppl"
) -> list[np.ndarray]:
    """Per-token losses (nats) of tokens 1..n-1 of each document, float32 (``desc`` labels the bar)."""
    items = []  # (doc index, s, e, first target)
    for d, tokens in enumerate(docs):
        items += [(d, s, e, f) for s, e, f in windows(len(tokens), window, stride)]
    losses = [np.zeros(max(len(t) - 1, 0), np.float32) for t in docs]
    items.sort(key=lambda it: it[1] - it[2])  # windows of equal length batch together
    B = adapter.batch_size
    i = 0
    bar = progress.bar(total=len(items), desc=desc, unit="window")
    while i < len(items):
        length = items[i][2] - items[i][1] + 1  # input tokens s..e inclusive of the last predicted
        batch = [it for it in items[i : i + B] if it[2] - it[1] + 1 == length]
        i += len(batch)
        ids = np.stack(
            [docs[d][s : e + 1].astype(np.int64) for d, s, e, _ in batch]
        )  # (b, length): forward length-1
        lp = adapter.token_logprobs(ids).cpu().numpy()  # (b, length-1): lp[:, j] scores token s+j+1
        for r, (d, s, e, f) in enumerate(batch):
            losses[d][f - 1 : e] = -lp[r, f - s - 1 :]
        bar.update(len(batch))
    bar.close()
    return losses


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    store = open_store(data, adapter, "ppl", split=options.split)
    view, held = heldout.documents(store, adapter.info.path, options.split, of=options.heldout_of)
    if options.context < 0 or options.stride < 0 or options.max_tokens < 0 or options.max_docs < 0:
        bad = next(k for k in ("context", "stride", "max_tokens", "max_docs") if getattr(options, k) < 0)
        flag = "--" + bad.replace("_", "-")
        raise UserError(f"ppl {flag} must be 0 (the default) or more, got {getattr(options, bad)}")
    window = options.context or adapter.context
    stride = options.stride or window
    if not 0 < stride <= window:
        raise UserError(f"stride {stride} must be between 1 and the context ({window}); lower --stride")
    adapter.check_length(window, "ppl's window", "lower --context (0 = the model's context)")
    n = min(len(view), options.max_docs) if options.max_docs else len(view)
    docs = [np.asarray(view.doc(i)) for i in range(n)]
    if options.max_tokens:
        docs = [d[: options.max_tokens] for d in docs]
    kept = [i for i, d in enumerate(docs) if len(d) >= 2]
    docs = [docs[i] for i in kept]
    doc_ids = np.asarray(view.indices, dtype=np.int64)[kept]  # the store's: pieces of one document share it
    n_documents = len(np.unique(doc_ids))
    if not docs:
        raise UserError(
            f"no document of {data}{' held out by the run' if held else ''} has 2 tokens or more; "
            "ingest longer documents"
        )
    n_windows = sum(len(windows(len(d), window, stride)) for d in docs)
    progress.announce(
        "ppl",
        {
            "context": window,
            "stride": stride,
            "documents": n_documents,
            "pieces": len(docs) if len(docs) != n_documents else None,
            "windows": n_windows,
            "data": store.path,
            "split": heldout.announced(held),
        },
    )
    losses = document_losses(adapter, docs, window, stride)
    flat = np.concatenate(losses)
    nll = float(flat.astype(np.float64).sum())
    n_bytes = sum(scored_bytes(adapter.tokenizer, d) for d in docs)
    mean = nll / len(flat)
    results = {
        "summary": {
            "loss": mean,
            "perplexity": math.exp(mean),
            "bits_per_byte": nll / math.log(2) / n_bytes,
            "bits_per_token": mean / math.log(2),
        },
        "context": window,
        "stride": stride,
        "n_documents": n_documents,
        **({"n_pieces": len(docs)} if len(docs) != n_documents else {}),
        "n_tokens_scored": len(flat),
        "n_bytes_scored": int(n_bytes),
        "forward_tokens": int(sum(e - s for d in docs for s, e, _ in windows(len(d), window, stride))),
    }
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in losses])]).astype(np.int64)
    return EvalOutput(
        results,
        {"store": str(store.path), "hash": store.hash, "texts_scored": len(docs), **held},  # docs or pieces
        arrays={"token_losses": flat, "doc_offsets": offsets, "doc_ids": doc_ids},
        plot=None,
    )
