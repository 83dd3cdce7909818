"""Paired comparison of two models' infilling results (``contextlab compare`` on ``infill`` results).

Both results hold the same spans (document, start line) of the same held-out files. For every
span kind (single-line, multi-line) and every pair of prompt modes, the loss of the true middle
A - B (nats per token) and the exact-match difference are computed span by span. Spans of one
file are not independent, so files are the clusters: a t interval for the loss (as ``ppl``)
and a bootstrap for exact match (0/1 outcomes, as the retrieval tasks). The left-to-right loss
of the same files, when both results have it, is paired token by token.

Which modes pair: each mode both models were scored in, and, when one model has no FIM
sentinels (a CLM model, scored left to right from the prefix alone, ``l2r``), each FIM mode of
the other against that ``l2r``: the FIM paper's question, "does a FIM model infill better than
a left-to-right model can". Trade-off: tokens per span are those of A's tokenizer; compare
refuses results of different data, and two tokenizers never share a store.
"""

from __future__ import annotations

import numpy as np

import contextlab.eval.paired_stats as cs

KINDS = ("single", "multi")


def mode_pairs(modes_a: list[str], modes_b: list[str]) -> list[tuple[str, str]]:
    """(mode of A, mode of B) pairs: the shared modes, then FIM modes against the other's l2r."""
    pairs = [(m, m) for m in modes_a if m in modes_b]
    if "l2r" in modes_b:
        pairs += [(m, "l2r") for m in modes_a if m not in modes_b]
    if "l2r" in modes_a:
        pairs += [("l2r", m) for m in modes_b if m not in modes_a]
    return pairs


def infill(a, b, o) -> dict:
    """Per span kind and mode pair: middle loss and exact-match differences; the left-to-right loss."""
    ra, rb = a.doc["results"], b.doc["results"]
    pairs = mode_pairs(ra["modes"], rb["modes"])
    rows, lines = [], []
    for kind in KINDS:
        keys = (f"doc_{kind}", f"tokens_{kind}")
        base = a.arrays("infill", keys)
        if not len(base[keys[0]]):
            continue
        for ma, mb in pairs:
            xa = a.arrays("infill", (f"ll_{kind}_{ma}", f"correct_{kind}_{ma}"))
            xb = b.arrays("infill", (f"ll_{kind}_{mb}", f"correct_{kind}_{mb}"))
            row = _pair(kind, ma, mb, base[keys[0]], base[keys[1]], xa, xb, o)
            rows.append(row)
            lines.append(
                f"infill {kind}-line middle loss A[{ma}] - B[{mb}] = {cs.interval_text(row['loss'])} "
                f"nats/token over {row['loss']['n_clusters']} files ({row['n']} spans; exact match "
                f"A {row['exact_match']['a']:.2f}, B {row['exact_match']['b']:.2f}, "
                f"A - B {cs.interval_text(row['exact_match'], 2)})"
            )
    results = {"unit": "span", "cluster": "file", "pairs": rows}
    lm = _lm(a, b)
    if lm is not None:
        results["lm"] = lm
        n = lm["n_clusters"]
        lines.append(f"infill left-to-right loss A - B = {cs.interval_text(lm)} nats/token over {n} files")
    return {"lines": lines, "results": results}


def _pair(kind, ma, mb, docs, tokens, xa, xb, o) -> dict:
    nll_a, nll_b = -xa[f"ll_{kind}_{ma}"], -xb[f"ll_{kind}_{mb}"]  # (spans,) summed over the middle
    sums, _ = cs.per_cluster(nll_a - nll_b, docs)
    counts, _ = cs.per_cluster(tokens.astype(np.float64), docs)
    loss = {
        **cs.cluster_t(sums, counts),
        "a": float(nll_a.sum() / tokens.sum()),
        "b": float(nll_b.sum() / tokens.sum()),
    }
    ca, cb = xa[f"correct_{kind}_{ma}"].astype(np.float64), xb[f"correct_{kind}_{mb}"].astype(np.float64)
    em_sums, em_counts = cs.per_cluster(ca - cb, docs)
    em = cs.cluster_bootstrap(em_sums, em_counts, o.resamples, o.seed)
    em |= {"a": float(ca.mean()), "b": float(cb.mean()), "mcnemar": cs.mcnemar(ca, cb)}
    return {"kind": kind, "mode_a": ma, "mode_b": mb, "n": len(docs), "loss": loss, "exact_match": em}


def _lm(a, b) -> dict | None:
    """The left-to-right loss of the same files, token by token, files as clusters (None if absent)."""
    keys = ("lm_token_losses", "lm_doc_offsets")
    if not all(k in (s.doc.get("arrays") or {}) for s in (a, b) for k in keys):
        return None
    xa, xb = a.arrays("infill", keys), b.arrays("infill", keys)
    offsets = xa["lm_doc_offsets"]
    diff = xa["lm_token_losses"].astype(np.float64) - xb["lm_token_losses"].astype(np.float64)
    sums = np.add.reduceat(diff, offsets[:-1])
    out = cs.cluster_t(sums, np.diff(offsets).astype(np.float64))
    return out | {"a": a.doc["results"]["lm"]["loss"], "b": b.doc["results"]["lm"]["loss"]}
