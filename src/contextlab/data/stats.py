"""Statistics of a token store: counts, length percentiles, a length histogram (PNG).

``contextlab data info`` prints these. The long-document table answers the first question
of any context-length study: how many documents (and tokens) are there at least L tokens
long, for L = 2^k? Without such documents a long training context has nothing to learn.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from contextlab.data.store import TokenStore


def store_summary(store: TokenStore) -> dict:
    lens = store.lengths()
    meta = store.meta
    summary = {
        "path": str(store.path),
        "n_docs": store.n_docs,
        "n_tokens": store.n_tokens,
        "tokenizer": {k: meta["tokenizer"].get(k) for k in ("name", "kind", "vocab_size", "hash")},
        "dtype": meta["dtype"],
        "source": meta.get("source", {}),
        "source_stats": meta.get("source_stats", {}),
        "filters": meta.get("filters", {}),
        "length_percentiles": {},
        "long_documents": [],
    }
    if len(lens):
        qs = [0, 10, 50, 90, 99, 100]
        summary["length_percentiles"] = {f"p{q}": int(v) for q, v in zip(qs, np.percentile(lens, qs))}
        summary["mean_length"] = float(lens.mean())
        k = 4
        while (1 << k) <= lens.max():
            L = 1 << k
            long = lens >= L
            summary["long_documents"].append(
                {"min_len": L, "docs": int(long.sum()), "tokens_cut_to_len": int(long.sum()) * L}
            )
            k += 1
    domains = {}
    try:
        for row in store.iter_docs_meta():
            d = row.get("domain", "")
            domains[d] = domains.get(d, 0) + 1
    except Exception:  # metadata is optional for the summary
        domains = {}
    summary["n_domains"] = len(domains)
    summary["top_domains"] = sorted(domains.items(), key=lambda kv: -kv[1])[:10]
    return summary


def format_summary(s: dict) -> str:
    tok = s["tokenizer"]
    lines = [
        f"store      {s['path']}",
        f"documents  {s['n_docs']:,}    tokens {s['n_tokens']:,}    dtype {s['dtype']}",
        f"tokenizer  {tok['name']} ({tok['kind']}, vocab {tok['vocab_size']:,}, "
        f"hash {str(tok['hash'])[:12]})",
        f"source     {s['source'].get('kind', '?')} {s['source'].get('path', '')}"
        + (f" (split {s['source']['split']})" if s["source"].get("split") else ""),
    ]
    if s.get("length_percentiles"):
        p = s["length_percentiles"]
        lines.append(
            "doc length " + "  ".join(f"{k} {v:,}" for k, v in p.items()) + f"  mean {s['mean_length']:,.0f}"
        )
    stats = {
        k: v
        for k, v in {**s.get("source_stats", {}), **s.get("filters", {})}.items()
        if isinstance(v, (int, float))
        and v
        and k.startswith(("skipped", "undecodable", "latin1", "gutenberg"))
    }
    if stats:
        lines.append("skipped    " + "  ".join(f"{k}={v:,}" for k, v in stats.items()))
    if s.get("n_domains"):
        top = ", ".join(f"{d or '(root)'} {n}" for d, n in s["top_domains"][:5])
        lines.append(f"domains    {s['n_domains']:,} (largest: {top})")
    if s.get("long_documents"):
        lines.append("long documents (LongCrawl64 view: documents >= L tokens, cut to L):")
        for row in s["long_documents"]:
            lines.append(
                f"  L={row['min_len']:>8,}  docs {row['docs']:>10,}  tokens {row['tokens_cut_to_len']:>14,}"
            )
    return "\n".join(lines)


def plot_length_histogram(store: TokenStore, out: str | Path) -> Path:
    """Histogram of document lengths on log-spaced bins, written as a PNG (atomically)."""
    from contextlab.figures import pyplot, save_png

    plt = pyplot()
    lens = store.lengths()
    lens = lens[lens > 0]
    fig, ax = plt.subplots(figsize=(7, 4))
    if len(lens):
        bins = np.logspace(0, np.log10(max(lens.max(), 2)) + 0.05, 50)
        ax.hist(lens, bins=bins, color="#3b6ea8", edgecolor="white", linewidth=0.4)
        ax.set_xscale("log")
        ax.axvline(
            np.median(lens),
            color="#c0392b",
            linestyle="--",
            linewidth=1,
            label=f"median {int(np.median(lens)):,} tokens",
        )
        ax.legend()
    ax.set_xlabel("document length (tokens, log scale)")
    ax.set_ylabel("documents")
    ax.set_title(f"{store.path.name}: {store.n_docs:,} documents, {store.n_tokens:,} tokens")
    return save_png(fig, out, dpi=120)
