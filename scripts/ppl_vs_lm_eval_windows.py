"""How far ``contextlab eval ppl`` (stride = context) is from lm-eval's rolling windows, per cause.

    python scripts/ppl_vs_lm_eval_windows.py RUN STORE --context 256 [--max-docs N]

Scores every document of STORE twice with the same model: with ``contextlab.eval.ppl`` (disjoint
windows of W tokens, the first token not scored) and with lm-eval's ``loglikelihood_rolling``
windows re-implemented here on the same adapter (``get_rolling_token_windows`` with
``context_len = 1`` followed by ``make_disjoint_window``: the first token scored after a prefix
token, windows shifted by one, the last partial window given a full context). This is a
re-implementation of lm-eval's windowing, not lm-eval itself (which is not a dependency): it
explains the size of each difference, it does not certify lm-eval's number. Prints one JSON
object: both perplexities, their relative difference, the part from the tokens both score
(window shift and last window) and the mean loss of the first tokens (lm-eval only).
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from contextlab.data.store import TokenStore
from contextlab.eval import ppl
from contextlab.eval.adapter import load_model


def lm_eval_windows(n: int, window: int) -> list[tuple[int, int, int]]:
    """(input start, first target, end) of lm-eval's disjoint windows over n tokens: window w feeds
    tokens input start .. end - 2 (input start -1 = the prefix token) and scores first .. end - 1."""
    first = min(window, n)
    out, predicted = [(-1, 0, first)], first
    while predicted < n:
        end = predicted + min(n - predicted, window)
        out.append((max(end - window - 1, 0), predicted, end))
        predicted = end
    return out


def lm_eval_losses(adapter, doc: np.ndarray, window: int, prefix: int) -> np.ndarray:
    """Loss of tokens 0 .. n-1 of ``doc`` as lm-eval's windows score them, float64 (n,)."""
    out = np.zeros(len(doc))
    for start, lo, hi in lm_eval_windows(len(doc), window):
        inputs = doc[max(start, 0) : hi - 1]
        seq = np.concatenate([[prefix], inputs, doc[hi - 1 : hi]]) if start < 0 else doc[start:hi]
        lp = adapter.token_logprobs(seq.astype(np.int64)).cpu().numpy()[0]  # scores seq[1:]
        out[lo:hi] = -lp[-(hi - lo) :]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run", help="a contextlab run directory or a Hugging Face model folder")
    p.add_argument("store", help="a token store made with the model's tokenizer")
    p.add_argument("--context", type=int, required=True, help="tokens per window W")
    p.add_argument("--max-docs", type=int, default=0, help="the first N documents; 0 = all")
    args = p.parse_args()
    adapter, store = load_model(args.run, batch_size=8), TokenStore(args.store)
    prefix = store.tokenizer_spec.get("eot_id")
    n = min(store.n_docs, args.max_docs) if args.max_docs else store.n_docs
    docs = [np.asarray(store.doc(i), dtype=np.int64) for i in range(n)]
    docs = [d for d in docs if len(d) >= 2]
    ours = np.concatenate(ppl.document_losses(adapter, docs, args.context, args.context)).astype(np.float64)
    theirs = [lm_eval_losses(adapter, d, args.context, prefix) for d in docs]
    both = np.concatenate([x[1:] for x in theirs])  # the tokens both protocols score
    everything = np.concatenate(theirs)
    print(
        json.dumps(
            {
                "documents": len(docs),
                "context": args.context,
                "ppl": math.exp(ours.mean()),
                "ppl_lm_eval_windows": math.exp(everything.mean()),
                "relative_difference": math.exp(everything.mean() - ours.mean()) - 1,
                "relative_difference_same_tokens": math.exp(both.mean() - ours.mean()) - 1,
                "first_token_mean_loss": float(np.mean([x[0] for x in theirs])),
            }
        )
    )


if __name__ == "__main__":
    main()
