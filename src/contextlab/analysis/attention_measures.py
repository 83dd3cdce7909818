"""The numbers of ``analyze attention``, from the per-row arrays ``attention.collect`` keeps.

Definitions (docs/evaluations.md says the same):

* attention received by source position j: R[j] = sum over queries i >= j of a[i, j], the
  weights averaged over heads, then over rows and over the chosen layers. It is not divided by
  the number of queries that can see j (T - j): the seed (ContextLM, Figure 6) plots attention
  per input token without a stated normalisation, and the plain sum is what such figures show.
  Early tokens therefore receive more (more queries see them); ``received_per_query`` is R[j] /
  (T - j), the mean weight a query that can see j gives it. Percent changes between two models
  on the same tokens are the same under both definitions (the divisor is shared).
* percent change (model A against B, the reference): 100 (R_A - R_B) / R_B per position, and
  per chunk of w positions on the chunk sums (w = the ContextLM's chunk size), and per offset
  within a chunk (j mod w).
* mass by distance: for each query, the weight on keys at distance i - j in [0], [1], [2, 3],
  [4, 7], ...; it sums to 1 per query; averaged over queries, heads and rows, per layer.
  Queries near the start cannot reach far buckets: that is part of what a layer at this
  context can do, and the same for both models.
* mean distance (sum over j of a[i, j] (i - j), averaged over queries) per layer, with the
  A - B difference and a 95% t interval over documents (rows of one document are one cluster).
* entropy of each query's weights (nats), averaged over queries, heads and rows.

Trade-off: every number is a mean of the per-row arrays, so a result can be recomputed
from the saved .npy files without the models.
"""

from __future__ import annotations

import numpy as np

import contextlab.eval.paired_stats as cs


def distance_buckets(T: int) -> list[tuple[int, int]]:
    """(from, to) distances of the buckets [0], [1], [2, 3], [4, 7], ... covering 0..T-1."""
    out = [(0, 0)]
    i = 0
    while 2**i <= T - 1:
        out.append((2**i, min(2 ** (i + 1) - 1, T - 1)))
        i += 1
    return out


def percent(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """100 (a - b) / b elementwise (NaN where b is 0)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b != 0, 100.0 * (a - b) / np.where(b != 0, b, 1.0), np.nan)


def chunk_sums(x: np.ndarray, w: int) -> np.ndarray:
    """(..., T) -> (..., ceil(T / w)): sums over positions [k w, (k + 1) w); the last chunk may be partial."""
    T = x.shape[-1]
    pad = (-T) % w
    padded = np.concatenate([x, np.zeros(x.shape[:-1] + (pad,))], axis=-1) if pad else x
    return padded.reshape(x.shape[:-1] + (-1, w)).sum(-1)


def offset_sums(x: np.ndarray, w: int) -> np.ndarray:
    """(..., T) -> (..., w): sums over positions j with j mod w = o, for each offset o."""
    return np.stack([x[..., o::w].sum(-1) for o in range(w)], axis=-1)


def summarise(arrays: dict, layers: list[int]) -> dict:
    """One model's measures: per layer, and averaged over ``layers`` (the decoder's for a ContextLM)."""
    received = arrays["received"]  # (N, L, T)
    T = received.shape[-1]
    mean_r = received[:, layers].mean((0, 1))  # (T,)
    buckets = arrays["buckets"].mean(0)  # (L, n_buckets)
    return {
        "buckets": [{"from": lo, "to": hi} for lo, hi in distance_buckets(T)],
        "n_layers": received.shape[1],
        "layers_averaged": layers,
        "mass_by_distance": buckets.tolist(),
        "mass_by_distance_averaged": buckets[layers].mean(0).tolist(),
        "mean_distance": arrays["distance"].mean(0).tolist(),
        "mean_distance_averaged": float(arrays["distance"][:, layers].mean()),
        "entropy": arrays["entropy"].mean(0).tolist(),
        "received": mean_r.tolist(),
        "received_per_query": (mean_r / (T - np.arange(T))).tolist(),
        "received_first_token": float(mean_r[0]),
    }


def _paired(a: np.ndarray, b: np.ndarray, docs: np.ndarray) -> dict:
    """Mean of a - b over rows (N,), with a 95% t interval over documents."""
    return cs.cluster_t(*cs.per_cluster(a - b, docs))


def compare(a: dict, b: dict, layers_a: list[int], layers_b: list[int], w: int, docs: np.ndarray) -> dict:
    """A against B (the reference) on the same rows; per layer only when both have as many layers."""
    ra = a["received"][:, layers_a].mean(1)  # (N, T) each row averaged over the layers
    rb = b["received"][:, layers_b].mean(1)
    ma, mb = ra.mean(0), rb.mean(0)  # (T,)
    out = {
        "reference": "b",
        "chunk": w,
        "percent_by_position": percent(ma, mb).tolist(),
        "percent_by_chunk": percent(chunk_sums(ma, w), chunk_sums(mb, w)).tolist(),
        "percent_by_offset_in_chunk": percent(offset_sums(ma, w), offset_sums(mb, w)).tolist(),
        "percent_first_token": float(percent(ma[0], mb[0])),
        "percent_rest": float(percent(ma[1:].sum(), mb[1:].sum())),
        "mean_distance_diff": _paired(
            a["distance"][:, layers_a].mean(1), b["distance"][:, layers_b].mean(1), docs
        ),
        "entropy_diff": _paired(a["entropy"][:, layers_a].mean(1), b["entropy"][:, layers_b].mean(1), docs),
        "token_abs_percent_median": float(np.nanmedian(np.abs(percent(ra, rb)))),
    }
    if a["received"].shape[1] == b["received"].shape[1]:
        L = a["received"].shape[1]
        out["per_layer"] = {
            "mean_distance_diff": [_paired(a["distance"][:, k], b["distance"][:, k], docs) for k in range(L)],
            "mass_by_distance_diff": (a["buckets"].mean(0) - b["buckets"].mean(0)).tolist(),  # (L, n_b)
            "percent_by_chunk": [
                percent(
                    chunk_sums(a["received"][:, k].mean(0), w), chunk_sums(b["received"][:, k].mean(0), w)
                ).tolist()
                for k in range(L)
            ],
        }
    return out


def by_token(received: np.ndarray, tokens: np.ndarray, min_count: int) -> dict[int, tuple[float, int]]:
    """Mean attention per query that can see it, per token id, positions 1.. (position 0 is a sink
    whatever its token): {id: (mean of R[j] / (T - j), count)}. received (N, T) averaged over
    layers; tokens (N, T); ids seen fewer than ``min_count`` times are left out."""
    T = received.shape[1]
    per_query = (received / (T - np.arange(T)))[:, 1:].ravel()
    ids = tokens[:, 1:].ravel().astype(np.int64)
    sums = np.bincount(ids, weights=per_query)
    counts = np.bincount(ids)
    return {int(t): (float(sums[t] / counts[t]), int(counts[t])) for t in np.flatnonzero(counts >= min_count)}


def token_moves(ra: np.ndarray, rb: np.ndarray, tokens: np.ndarray, decode, top: int, min_count: int) -> dict:
    """The token ids whose attention per query moves most, A against B (received (N, T) each, averaged
    over layers): the ``top`` gains and losses in percent, over ids seen at least ``min_count`` times."""
    ta, tb = by_token(ra, tokens, min_count), by_token(rb, tokens, min_count)
    rows = [
        {
            "id": t,
            "text": decode([t]),
            "count": n,
            "a": va,
            "b": tb[t][0],
            "percent": float(percent(va, tb[t][0])),
        }
        for t, (va, n) in ta.items()
    ]
    rows.sort(key=lambda r: r["percent"])
    return {"min_count": min_count, "n_tokens": len(rows), "gains": rows[::-1][:top], "losses": rows[:top]}


def sample_section(samples: dict, layers: dict, w: int, ids: list[int], decode, n: int) -> dict:
    """The seed's per-token figure for one row: received per token (first n tokens) for each model,
    percent change per token and per chunk. samples: label -> (L, T, T) head-averaged weights."""
    per_layer = {k: s.sum(1) for k, s in samples.items()}  # label -> (L, T): sum over the queries
    received = {k: r[layers[k]].mean(0) for k, r in per_layer.items()}  # label -> (T,)
    out = {
        "ids": ids[:n],
        "tokens": [decode([t]) for t in ids[:n]],
        "received": {k: v[:n].tolist() for k, v in received.items()},
        "received_per_layer": {k: r[:, :n].tolist() for k, r in per_layer.items()},
        "chunk": w,
    }
    if len(received) == 2:
        ra, rb = received.values()
        out["percent_by_token"] = percent(ra[:n], rb[:n]).tolist()
        out["percent_by_chunk"] = percent(chunk_sums(ra[:n], w), chunk_sums(rb[:n], w)).tolist()
    return out


def headline(results: dict) -> dict:
    """The few numbers a reader looks at first: how far each model looks, and what moved."""
    out = {}
    for k, part in results["models"].items():
        blocks = part["blocks"]
        mass = blocks["mass_by_distance_averaged"]
        out[k] = {
            "mean_distance": blocks["mean_distance_averaged"],
            "mass_at_distance_0": mass[0],
            "mass_at_distance_1": mass[1] if len(mass) > 1 else 0.0,
            "mass_beyond_16": float(sum(m for m, b in zip(mass, results["buckets"]) if b["from"] >= 16)),
            "entropy": float(np.mean([blocks["entropy"][i] for i in blocks["layers_averaged"]])),
            "received_first_token_share": blocks["received_first_token"] / results["length"],
        }
    comp = results.get("comparison")
    if comp:
        out["a_vs_b"] = {
            "percent_first_token": comp["percent_first_token"],
            "percent_rest": comp["percent_rest"],
            "mean_distance_diff": comp["mean_distance_diff"]["diff"],
            "mean_distance_diff_interval95": comp["mean_distance_diff"]["interval95"],
            "entropy_diff": comp["entropy_diff"]["diff"],
            "entropy_diff_interval95": comp["entropy_diff"]["interval95"],
            "token_abs_percent_median": comp["token_abs_percent_median"],
        }
    return out
