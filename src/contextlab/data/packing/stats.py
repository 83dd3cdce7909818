"""Diagnostics of a packed store (``contextlab data pack-stats``), with a plot.

* documents per sequence (distinct documents, pieces of one document counted once);
* mean retrieval similarity of neighbours: the similarity recorded for every entry that a
  retriever brought in (bm25: score / self-score; dense: cosine; repo: 1 / (1 + tree steps));
* fraction of sequences with >= 2 related documents: sequences holding at least one
  retrieved entry (it and the document that retrieved it); 0 for ep / ep-domain by design;
* domains and directories spanned per sequence (``docs_meta()`` "domain" and the parent
  folder of "path"): how many repositories/books a sequence mixes;
* Zipf coefficient of token frequencies (seed Table 9, "burstiness"): per sequence, the
  token counts sorted in decreasing order are fitted as log f = c - s log r by least
  squares over all ranks; s is averaged over (a seeded sample of) sequences, with its
  standard deviation. Lower s = flatter distribution = burstier sequences. Sequences
  shorter than context + 1 tokens are left out so every fit sees the same number of tokens.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import numpy as np

from contextlab.data.packing.methods import retrieving_methods
from contextlab.data.packing.packed_store import PackedStore
from contextlab.figures import pyplot, save_png


def zipf_coefficient(tokens: np.ndarray) -> float:
    """Least-squares slope s of log(count) vs log(rank) of the token counts of ``tokens``.

    NaN when ``tokens`` holds fewer than 2 distinct types.
    """
    _, counts = np.unique(np.asarray(tokens), return_counts=True)
    if len(counts) < 2:
        return float("nan")
    counts = np.sort(counts)[::-1].astype(np.float64)
    ranks = np.arange(1, len(counts) + 1, dtype=np.float64)
    slope = np.polyfit(np.log(ranks), np.log(counts), 1)[0]
    return float(-slope)


def _sample(n: int, max_n: int, seed: int) -> np.ndarray:
    if max_n <= 0 or n <= max_n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=max_n, replace=False))


def pack_stats(packed: PackedStore, *, max_sequences: int = 2000, seed: int = 0) -> dict:
    """Summary dict (see the module docstring); ``zipf_per_sequence`` holds the sampled values."""
    entries = np.asarray(packed.entries)
    n_seq = packed.n_sequences
    seq_of = np.repeat(np.arange(n_seq), np.diff(np.asarray(packed.seq_offsets)))  # entry -> sequence
    docs_per = _distinct_per_seq(seq_of, entries[:, 0], n_seq)
    lens = packed.sequence_lengths()
    full = np.flatnonzero(lens == packed.row_len)
    zipf = _zipf_sample(packed, full, max_sequences, seed)
    cfg = packed.meta["config"]
    return {
        "path": str(packed.path),
        "method": cfg["method"],
        "retriever": cfg["retriever"] if cfg["method"] in retrieving_methods() else None,
        "context": packed.context,
        "n_sequences": n_seq,
        "n_full_sequences": len(full),
        "n_entries": packed.n_entries,
        "n_tokens": int(lens.sum()),
        "docs_per_sequence": {
            "mean": float(docs_per.mean()) if n_seq else 0.0,
            "median": float(np.median(docs_per)) if n_seq else 0.0,
            "max": int(docs_per.max()) if n_seq else 0,
        },
        **_neighbour_stats(np.asarray(packed.similarity, dtype=np.float64), seq_of, n_seq),
        **_span_stats(packed.store.docs_meta(), entries, seq_of, docs_per, n_seq),
        "zipf": {
            "mean": float(zipf.mean()) if len(zipf) else None,
            "std": float(zipf.std()) if len(zipf) else None,
            "n_sequences": len(zipf),
        },
        "docs_per_sequence_all": docs_per.tolist(),
        "zipf_per_sequence": zipf.tolist(),
    }


def _distinct_per_seq(seq_of: np.ndarray, keys: np.ndarray, n_seq: int) -> np.ndarray:
    """(n_seq,) how many distinct ``keys`` (one per entry) each sequence holds."""
    if not len(keys):
        return np.zeros(n_seq, np.int64)
    pairs = np.unique(np.stack([seq_of, keys], axis=1), axis=0)
    return np.bincount(pairs[:, 0], minlength=n_seq)


def _neighbour_stats(sims: np.ndarray, seq_of: np.ndarray, n_seq: int) -> dict:
    """Similarity of the retrieved entries (similarity > 0), and the share of sequences holding one."""
    retrieved = np.isfinite(sims) & (sims > 0)
    related_seqs = np.bincount(seq_of[retrieved], minlength=n_seq) > 0 if n_seq else np.zeros(0, bool)
    return {
        "mean_neighbour_similarity": float(sims[retrieved].mean()) if retrieved.any() else None,
        "retrieved_fraction_of_entries": float(retrieved.mean()) if len(sims) else 0.0,
        "frac_sequences_ge2_related": float(related_seqs.mean()) if n_seq else 0.0,
    }


def _span_stats(
    meta: list[dict], entries: np.ndarray, seq_of: np.ndarray, docs_per: np.ndarray, n_seq: int
) -> dict:
    """Mean distinct domains and parent directories per sequence."""
    dom_names: dict[str, int] = {}
    dir_names: dict[str, int] = {}
    dom = np.array(
        [dom_names.setdefault(str(m.get("domain", "")), len(dom_names)) for m in meta], dtype=np.int64
    )
    dirs = np.array(
        [
            dir_names.setdefault(str(PurePosixPath(str(m.get("path") or "")).parent), len(dir_names))
            for m in meta
        ],
        dtype=np.int64,
    )
    doms_per = _distinct_per_seq(seq_of, dom[entries[:, 0]], n_seq) if len(entries) else docs_per
    dirs_per = _distinct_per_seq(seq_of, dirs[entries[:, 0]], n_seq) if len(entries) else docs_per
    return {
        "domains_per_sequence": float(doms_per.mean()) if n_seq else 0.0,
        "directories_per_sequence": float(dirs_per.mean()) if n_seq else 0.0,
    }


def _zipf_sample(packed: PackedStore, full: np.ndarray, max_sequences: int, seed: int) -> np.ndarray:
    """Zipf coefficients of a seeded sample of the full sequences (of all when none is full), NaNs
    left out."""
    pool = full if len(full) else np.arange(packed.n_sequences)
    picked = pool[_sample(len(pool), max_sequences, seed)]
    zipf = np.array([zipf_coefficient(packed.sequence_tokens(int(i))[0]) for i in picked])
    return zipf[np.isfinite(zipf)]


def format_pack_stats(s: dict) -> str:
    sim = s["mean_neighbour_similarity"]
    z = s["zipf"]
    zipf = "n/a" if z["mean"] is None else f"{z['mean']:.3f} +- {z['std']:.3f}"
    lines = [
        f"packed store   {s['path']}  ({s['method']}{', ' + s['retriever'] if s['retriever'] else ''}, "
        f"context {s['context']:,})",
        f"sequences      {s['n_sequences']:,} ({s['n_full_sequences']:,} full), entries {s['n_entries']:,}, "
        f"tokens {s['n_tokens']:,}",
        f"docs/sequence  mean {s['docs_per_sequence']['mean']:.2f}  "
        f"median {s['docs_per_sequence']['median']:.0f}  "
        f"max {s['docs_per_sequence']['max']}",
        f"neighbours     mean similarity {'n/a' if sim is None else f'{sim:.3f}'}, "
        f"{100 * s['retrieved_fraction_of_entries']:.1f}% of entries retrieved, "
        f"{100 * s['frac_sequences_ge2_related']:.1f}% of sequences hold >= 2 related documents",
        f"spans          {s['domains_per_sequence']:.2f} domains, "
        f"{s['directories_per_sequence']:.2f} directories per sequence",
        f"zipf           {zipf} over {z['n_sequences']:,} full sequences (lower = burstier)",
    ]
    return "\n".join(lines)


def plot_pack_stats(s: dict, out: str | Path) -> Path:
    """Two panels: documents per sequence, and per-sequence Zipf coefficients (PNG, atomic)."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    docs = np.asarray(s["docs_per_sequence_all"])
    if len(docs):
        a.hist(
            docs,
            bins=np.arange(1, docs.max() + 2) - 0.5 if docs.max() < 60 else 50,
            color="#3b6ea8",
            edgecolor="white",
            linewidth=0.4,
        )
    a.set_xlabel("documents per sequence")
    a.set_ylabel("sequences")
    a.set_title(f"{s['method']}: mean {s['docs_per_sequence']['mean']:.2f} docs/sequence")
    z = np.asarray(s["zipf_per_sequence"])
    if len(z):
        b.hist(z, bins=40, color="#c0392b", edgecolor="white", linewidth=0.4)
        b.axvline(z.mean(), color="black", linestyle="--", linewidth=1, label=f"mean {z.mean():.3f}")
        b.legend()
    b.set_xlabel("Zipf coefficient of token frequencies (per sequence)")
    b.set_title("burstiness (lower = burstier)")
    return save_png(fig, out)
