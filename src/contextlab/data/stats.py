"""Statistics of a token store: counts, length percentiles, a length histogram (PNG).

``contextlab data info`` prints these. The long-document table answers the first question
of any context-length study: how many documents (and tokens) are there at least L tokens
long, for L = 2^k? Without such documents a long training context has nothing to learn.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from contextlab.data.store import TokenStore

CR_SHARE = 0.001  # carriage-return tokens past this share of a store: its text has CRLF line ends


def carriage_return_share(store: TokenStore) -> float:
    """The share of a store's tokens that hold a carriage return (CRLF line ends; 0 for LF text), read
    on 64 evenly spaced blocks of 256K tokens at most, so a store of billions costs a few reads."""
    if not store.n_tokens:
        return 0.0
    tok = store.tokenizer()
    ids = {i for text in ("\r", "\r\n", "\r\n\r\n", " \r\n", ".\r\n") for i in tok.encode(text)}
    ids = [i for i in ids if "\r" in tok.decode([i])]
    if not ids:
        return 0.0
    block = 1 << 18
    starts = np.unique(np.linspace(0, max(0, store.n_tokens - block), 64).astype(np.int64))
    blocks = [store.tokens[s : s + block] for s in starts] if store.n_tokens > 64 * block else [store.tokens]
    return sum(int(np.isin(b, ids).sum()) for b in blocks) / sum(len(b) for b in blocks)


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
    domains, latin1 = {}, []
    try:
        for row in store.iter_docs_meta():
            d = row.get("domain", "")
            domains[d] = domains.get(d, 0) + 1
            if row.get("encoding") == "latin-1" and row.get("path") not in latin1:
                latin1.append(row.get("path"))
    except Exception:  # metadata is optional for the summary
        domains, latin1 = {}, []
    summary["latin1_paths"] = latin1
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
    lines += _left_out_and_changed(s)
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


ENCODING_EFFECT = {  # what --encoding did with what was not UTF-8
    "replace": "kept, the bad bytes stored as U+FFFD",
    "skip": "left out, named in skipped.jsonl",
    "latin-1": "kept, decoded as Latin-1",
}
TOKEN_FILTERS = {"skipped_short": "fewer_than_min_tokens", "skipped_long": "more_than_max_tokens"}


def latin1_line(paths: list[str], shown: int = 5) -> str:
    """The files read as Latin-1, named (``encoding`` in docs.jsonl): bytes of another encoding
    (Windows-1252 quotes, Big5 punctuation) read so are mojibake, and only a reader can tell."""
    more = f" and {len(paths) - shown:,} more" if len(paths) > shown else ""
    return (
        f"latin-1    {', '.join(paths[:shown])}{more} (documents with encoding latin-1 in docs.jsonl; if "
        "they are another encoding, convert them to UTF-8 first, e.g. iconv -f cp1252 -t utf-8)"
    )


def _left_out_and_changed(s: dict) -> list[str]:
    """The summary's lines on what the ingest left out (``skipped``), what it could not decode and
    what it cut from documents it kept (Project Gutenberg headers): each count under its own label."""
    stats, filters, lines = s.get("source_stats", {}), s.get("filters", {}), []
    skipped = {k: v for k, v in stats.items() if k.startswith("skipped") and v}
    skipped.update({name: filters[k] for k, name in TOKEN_FILTERS.items() if filters.get(k)})
    if skipped:
        lines.append("skipped    " + "  ".join(f"{k}={v:,}" for k, v in skipped.items()))
    bad = {k: v for k, v in stats.items() if k.startswith(("undecodable", "latin1")) and v}
    if bad:
        policy = s.get("source", {}).get("options", {}).get("encoding")
        effect = f"  (--encoding {policy}: {ENCODING_EFFECT[policy]})" if policy in ENCODING_EFFECT else ""
        lines.append("not UTF-8  " + "  ".join(f"{k}={v:,}" for k, v in bad.items()) + effect)
    if named := s.get("latin1_paths"):
        lines.append(latin1_line(named))
    pattern = s.get("source", {}).get("options", {}).get("doc_start")
    if pattern is not None:
        lines.append(
            f"cut        doc_start_cut={stats.get('doc_start_cut', 0):,}  "
            f"doc_start_uncut={stats.get('doc_start_uncut', 0):,}  "
            f"(files cut into documents at the lines matching --doc-start {pattern!r}, and files left whole)"
        )
    if stats.get("gutenberg_stripped"):
        lines.append(
            f"stripped   gutenberg_stripped={stats['gutenberg_stripped']:,}  "
            "(Project Gutenberg header and footer cut; the documents are kept)"
        )
    return lines


def plot_length_histogram(store: TokenStore, out: str | Path) -> Path:
    """Histogram of document lengths on log-spaced bins, written as a PNG (atomically)."""
    from contextlab.figures import pyplot, save_png

    plt = pyplot()
    lens = store.lengths()
    lens = lens[lens > 0]
    fig, ax = plt.subplots(figsize=(7, 4))
    if len(lens):
        # from the shortest document, not from 1 token: a corpus of 2,600+ token documents left
        # 70% of the axis empty
        lo, hi = np.log10(lens.min()) - 0.05, np.log10(max(lens.max(), 2)) + 0.05
        bins = np.logspace(lo, max(hi, lo + 0.5), 50)
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
