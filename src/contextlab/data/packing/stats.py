"""Diagnostics of a packed store (``contextlab data pack-stats``), with a plot.

* documents per sequence (distinct documents, pieces of one document counted once), and the share
  of sequences that hold one document only: where most do (documents long against the context),
  a retrieving packing is told that it had little to arrange (``few_to_arrange``);
* mean retrieval similarity of neighbours: the similarity recorded for every entry that a
  retriever brought in, in that retriever's measure (``RetrieverKind.similarity``, named on the
  printed line: bm25: score / self-score; dense: cosine; repo: 1 / (1 + folder steps));
* fraction of sequences with >= 2 related documents: sequences holding at least one
  retrieved entry (it and the document that retrieved it); 0 for ep / ep-domain by design;
* domains and directories spanned per sequence (``docs_meta()`` "domain" and the parent
  folder of "path"): how many repositories/books a sequence mixes;
* Zipf coefficient of token frequencies (seed Table 9, "burstiness"): per sequence, the
  token counts sorted in decreasing order are fitted as log f = c - s log r by least
  squares over all ranks; s is averaged over (a seeded sample of) sequences, with its
  standard deviation. Lower s = flatter distribution = burstier sequences. Sequences
  shorter than context + 1 tokens are left out so every fit sees the same number of tokens.
* The same exponent by maximum likelihood (``zipf_mle``): the token counts of a sequence fitted
  as a discrete power law P(count = x) ~ x^-alpha for x >= x_min, x_min chosen by the
  Kolmogorov-Smirnov distance (Clauset, Shalizi and Newman 2009; the ``powerlaw`` package), and
  turned into the rank exponent s = 1 / (alpha - 1) so both estimators read on one scale. The
  least-squares slope weighs the long tail of rare tokens (most ranks) and the MLE only the
  counts above x_min, so where they disagree on a comparison the disagreement is about the
  data's shape, not a single estimator's choice. Trade-off: a fit costs ~20 ms per sequence
  (about 40 s for the default 2,000), so the fits show a progress bar (on a terminal only).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

import numpy as np

from contextlab.data.packing.methods import RETRIEVERS, retrieving_methods
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


def power_law_fit(tokens: np.ndarray) -> tuple[float, float, float]:
    """(s, alpha, x_min): the discrete power-law MLE of the token counts of ``tokens`` with a fitted
    lower cut-off, and its rank exponent s = 1 / (alpha - 1). NaNs when fewer than 10 distinct
    counts leave nothing to fit."""
    import warnings

    import powerlaw

    _, counts = np.unique(np.asarray(tokens), return_counts=True)
    if len(np.unique(counts)) < 10:
        return float("nan"), float("nan"), float("nan")
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # powerlaw warns on every candidate x_min it rejects
        fit = powerlaw.Fit(counts, discrete=True, verbose=False)
        alpha, xmin = float(fit.power_law.alpha), float(fit.power_law.xmin)  # computed on first access
    s = 1.0 / (alpha - 1.0) if alpha > 1 else float("nan")
    return s, alpha, xmin


def _sample(n: int, max_n: int, seed: int) -> np.ndarray:
    if max_n <= 0 or n <= max_n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=max_n, replace=False))


def pack_stats(
    packed: PackedStore,
    *,
    max_sequences: int = 2000,
    mle_sequences: int = 200,
    seed: int = 0,
    progress: bool = False,
    verify: bool = True,
) -> dict:
    """Summary dict (see the module docstring); ``zipf_per_sequence`` holds the sampled values.
    ``mle_sequences``: how many of the sampled sequences also get the power-law MLE (a seeded subsample;
    0 = all of them): the MLE scans every x_min, 44 ms a sequence, so 2,000 of them took 90 s where the
    least-squares slope of all took 2 s.
    ``progress``: a bar over the sampled sequences' fits (on a terminal only). ``verify``: first
    check that the token store's tokens, which the fits read, still have its content hash
    (``TokenStore.check_content``, as ``pack`` and ``train`` do)."""
    if verify:
        packed.store.check_content()
    entries = np.asarray(packed.entries)
    n_seq = packed.n_sequences
    seq_of = np.repeat(np.arange(n_seq), np.diff(np.asarray(packed.seq_offsets)))  # entry -> sequence
    docs_per = _distinct_per_seq(seq_of, entries[:, 0], n_seq)
    lens = packed.sequence_lengths()
    full = np.flatnonzero(lens == packed.row_len)
    picked = _picked(packed, full, max_sequences, seed)
    with_mle = set(picked[_sample(len(picked), mle_sequences, seed + 1)].tolist())
    zipf, mle = _fits(packed, picked, with_mle, progress)
    fitted = np.isfinite(mle).all(axis=1)  # the MLE needs 10 distinct counts; many sequences lack them
    in_mle = np.array([int(i) in with_mle for i in picked], bool)
    zipf_fitted = zipf[in_mle][fitted]  # least squares on the very sequences the MLE fitted
    zipf_fitted = zipf_fitted[np.isfinite(zipf_fitted)]
    zipf = _finite(zipf)
    mle = mle[fitted]
    arranged = arrangement(packed, docs_per)  # method, retriever, context, one-document share
    retriever = arranged["retriever"]
    return {
        "path": str(packed.path),
        **arranged,
        "similarity_measure": (RETRIEVERS[retriever].similarity or None) if retriever in RETRIEVERS else None,
        "n_sequences": n_seq,
        "n_full_sequences": len(full),
        "n_entries": packed.n_entries,
        "n_tokens": int(lens.sum()),
        "heldout": packed.meta.get("heldout"),  # the documents held out for validation (None: none)
        **near_duplicates(packed),
        "docs_per_sequence": {
            "mean": float(docs_per.mean()) if n_seq else 0.0,
            "median": float(np.median(docs_per)) if n_seq else 0.0,
            "max": int(docs_per.max()) if n_seq else 0,
        },
        **_neighbour_stats(np.asarray(packed.similarity, dtype=np.float64), seq_of, n_seq),
        **_span_stats(packed.store.iter_docs_meta(), entries, seq_of, docs_per, n_seq),
        "zipf": {
            "mean": float(zipf.mean()) if len(zipf) else None,
            "std": float(zipf.std()) if len(zipf) else None,
            "n_sequences": len(zipf),
            "estimator": "least-squares slope of log count vs log rank, all ranks",
        },
        "zipf_mle": {
            "mean": float(mle[:, 0].mean()) if len(mle) else None,
            "std": float(mle[:, 0].std()) if len(mle) else None,
            "alpha_mean": float(mle[:, 1].mean()) if len(mle) else None,
            "xmin_median": float(np.median(mle[:, 2])) if len(mle) else None,
            "n_sequences": len(mle),
            "n_sampled": len(with_mle),  # the MLE was tried on these; the rest had < 10 distinct counts
            "least_squares_mean_same_sequences": float(zipf_fitted.mean()) if len(zipf_fitted) else None,
            "estimator": "discrete power-law MLE of the counts above a KS-fitted x_min, s = 1/(alpha-1)",
        },
        "docs_per_sequence_all": docs_per.tolist(),
        "zipf_per_sequence": zipf.tolist(),
        "zipf_mle_per_sequence": mle[:, 0].tolist(),
    }


def _fits(
    packed: PackedStore, picked: np.ndarray, with_mle: set, progress: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(least-squares Zipf slope of each picked sequence (n,), power-law MLE (s, alpha, x_min) of those
    in ``with_mle`` (m, 3))."""
    from contextlab import bars

    zipf, mle = [], []
    hide = None if progress else True  # None: tqdm shows the bar only when stderr is a terminal
    for i in bars.bar(picked, desc="pack-stats: Zipf fits", unit="seq", leave=False, disable=hide):
        tokens = packed.sequence_tokens(int(i))[0]
        zipf.append(zipf_coefficient(tokens))
        if i in with_mle:
            mle.append(power_law_fit(tokens))
    return np.array(zipf, np.float64), np.array(mle, np.float64).reshape(-1, 3)


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
    meta: Iterable[dict], entries: np.ndarray, seq_of: np.ndarray, docs_per: np.ndarray, n_seq: int
) -> dict:
    """Mean distinct domains and parent directories per sequence (``meta`` read a row at a time:
    two integer codes per document are kept, not its dict)."""
    dom_names: dict[str, int] = {}
    dir_names: dict[str, int] = {}
    dom, dirs = array("q"), array("q")
    for m in meta:
        dom.append(dom_names.setdefault(str(m.get("domain", "")), len(dom_names)))
        parent = str(PurePosixPath(str(m.get("path") or "")).parent)
        dirs.append(dir_names.setdefault(parent, len(dir_names)))
    dom, dirs = np.frombuffer(dom, np.int64), np.frombuffer(dirs, np.int64)
    doms_per = _distinct_per_seq(seq_of, dom[entries[:, 0]], n_seq) if len(entries) else docs_per
    dirs_per = _distinct_per_seq(seq_of, dirs[entries[:, 0]], n_seq) if len(entries) else docs_per
    return {
        "domains_per_sequence": float(doms_per.mean()) if n_seq else 0.0,
        "directories_per_sequence": float(dirs_per.mean()) if n_seq else 0.0,
    }


def _picked(packed: PackedStore, full: np.ndarray, max_sequences: int, seed: int) -> np.ndarray:
    """A seeded sample of the full sequences (of all when none is full) for the burstiness fits."""
    pool = full if len(full) else np.arange(packed.n_sequences)
    return pool[_sample(len(pool), max_sequences, seed)]


def _finite(x: np.ndarray) -> np.ndarray:
    return x[np.isfinite(x)]


def stats_record(s: dict) -> dict:
    """The figures of ``pack_stats`` without its per-sequence lists: what ``pack_stats.json`` keeps
    (the summaries, ``docs_per_sequence`` and ``directories_per_sequence`` among them)."""
    return {k: v for k, v in s.items() if not isinstance(v, list)}


def _mle_subset(m: dict) -> str:
    """When the MLE fitted only some of the sequences it tried: how many, why, and the least-squares
    mean of those same sequences (they are not a random draw of the rest: the burstiest fit least)."""
    tried = m.get("n_sampled")
    if not tried or m["n_sequences"] >= tried:
        return ""
    same = m.get("least_squares_mean_same_sequences")
    return (
        f" of {tried:,} tried: the other {tried - m['n_sequences']:,} have fewer than 10 distinct token "
        "counts to fit"
        + (f"; least squares on the same {m['n_sequences']:,}: {same:.3f}" if same is not None else "")
    )


def format_pack_stats(s: dict) -> str:
    sim = s["mean_neighbour_similarity"]
    z = s["zipf"]
    zipf = "n/a" if z["mean"] is None else f"{z['mean']:.3f} +- {z['std']:.3f}"
    m = s.get("zipf_mle") or {"mean": None}
    mle = (
        "n/a"
        if m["mean"] is None
        else (
            f"{m['mean']:.3f} +- {m['std']:.3f} (alpha {m['alpha_mean']:.3f}, "
            f"x_min median {m['xmin_median']:.0f}, {m['n_sequences']:,} sequences{_mle_subset(m)})"
        )
    )
    lines = [
        f"packed store   {s['path']}  ({s['method']}{', ' + s['retriever'] if s['retriever'] else ''}, "
        f"context {s['context']:,})",
        f"sequences      {s['n_sequences']:,} ({s['n_full_sequences']:,} full), entries {s['n_entries']:,}, "
        f"tokens {s['n_tokens']:,}",
        f"docs/sequence  mean {s['docs_per_sequence']['mean']:.2f}  "
        f"median {s['docs_per_sequence']['median']:.0f}  "
        f"max {s['docs_per_sequence']['max']}  "
        f"({100 * s.get('single_document_sequences', 0):.0f}% hold one document)",
        f"neighbours     mean similarity {_similarity(sim, s.get('similarity_measure'))}, "
        f"{100 * s['retrieved_fraction_of_entries']:.1f}% of entries retrieved, "
        f"{100 * s['frac_sequences_ge2_related']:.1f}% of sequences hold >= 2 related documents",
        f"spans          {s['domains_per_sequence']:.2f} domains, "
        f"{s['directories_per_sequence']:.2f} directories per sequence",
        f"zipf           {zipf} over {z['n_sequences']:,} full sequences (least squares; lower = burstier)",
        f"zipf (MLE)     {mle}",
    ]
    if held := s.get("heldout"):
        n = held["documents"]
        lines.insert(
            2,
            f"held out       {n:,} document{'s' * (n != 1)} ({held['tokens']:,} tokens) for validation, "
            f"packed in no sequence (val_fraction {held['val_fraction']:g}, split_seed {held['split_seed']})",
        )
    if line := near_duplicates_line(s):
        lines.insert(2, f"left out       {line}")
    if note := few_to_arrange(s):
        lines.append(note)
    return "\n".join(lines)


def arrangement(packed: PackedStore, docs_per: np.ndarray | None = None) -> dict:
    """What decides whether a packing had documents to arrange (``few_to_arrange``), without the fits:
    the share of sequences holding one document and the median document's tokens (``docs_per``: the
    documents of each sequence, when known)."""
    if docs_per is None:
        seq_of = np.repeat(np.arange(packed.n_sequences), np.diff(np.asarray(packed.seq_offsets)))
        docs_per = _distinct_per_seq(seq_of, np.asarray(packed.entries)[:, 0], packed.n_sequences)
    cfg = packed.meta["config"]
    lengths = np.sort(np.asarray(packed.store.lengths()))
    total = float(lengths.sum())
    cum = np.cumsum(lengths)
    sims = np.asarray(packed.similarity)
    return {
        "method": cfg["method"],
        "retriever": cfg["retriever"] if cfg["method"] in retrieving_methods() else None,
        "context": packed.context,
        "single_document_sequences": float((docs_per == 1).mean()) if len(docs_per) else 0.0,
        "median_document_tokens": float(np.median(lengths)) if len(lengths) else 0.0,
        # half the tokens are in documents at least this long (the median a token's document has)
        "token_median_document_tokens": float(lengths[np.searchsorted(cum, total / 2)]) if total else 0.0,
        "tokens_in_long_documents": float(lengths[lengths >= packed.row_len].sum() / total) if total else 0.0,
        "retrieved_entries": int((np.isfinite(sims) & (sims > 0)).sum()),
    }


FEW_TO_ARRANGE = 0.5  # the share of one-document sequences from which a retrieving packing is told


def near_duplicates(packed: PackedStore) -> dict:
    """The near-duplicates an icp pack left out (``--icp-dedup``), with their tokens; {} for none."""
    m = packed.meta
    n = int(m.get("dropped_near_duplicates") or 0)
    if not n:
        return {}
    tokens = m.get("dropped_near_duplicate_tokens")
    if tokens is None:  # packs written before the count: from the shards' document lists
        ids = [d for shard in m.get("shards", []) for d in shard.get("dropped_near_duplicates", [])]
        tokens = int(np.asarray(packed.store.lengths())[ids].sum()) if ids else None
    return {
        "dropped_near_duplicates": n,
        "dropped_near_duplicate_tokens": tokens,
        "icp_dedup": m["config"].get("icp_dedup", 0.0),
    }


def near_duplicates_line(s: dict) -> str | None:
    """What ``--icp-dedup`` left out of every sequence (None when nothing): documents and tokens."""
    n = s.get("dropped_near_duplicates") or 0
    if not n:
        return None
    tokens = s.get("dropped_near_duplicate_tokens")
    toks = f", {tokens:,} tokens" if tokens is not None else ""
    return (
        f"{n:,} near-duplicate document{'s' * (n != 1)}{toks} (--icp-dedup {s.get('icp_dedup', 0):g}: packed "
        "in no sequence)"
    )


def whole_percent(share: float) -> str:
    """``share`` as a whole percent, but never one that reads as all or none when it is not
    (0.9982: "99.8%", where it read "100%")."""
    p = 100 * float(share)
    near_edge = (99.5 <= p < 100) or (0 < p < 0.5)
    return f"{p:.1f}%" if near_edge else f"{p:.0f}%"


def few_to_arrange(s: dict) -> str | None:
    """One line when most sequences of a retrieving packing hold a single document: the documents are
    long against the context, so the packing chose the neighbours of few sequences and a comparison
    with ep measures little of it (Paul Graham's essays at context 512: 85% of sequences)."""
    single = s.get("single_document_sequences", 0.0)
    if not s["retriever"] or single < FEW_TO_ARRANGE:
        return None
    if "tokens_in_long_documents" in s:  # what fills the sequences: the tokens' documents, not the median one
        why = (
            f"{whole_percent(s['tokens_in_long_documents'])} of the tokens are in documents that fill a "
            f"sequence alone (half of them in documents of {s['token_median_document_tokens']:,.0f} tokens "
            f"or more), against context {s['context']:,}"
        )
    else:
        median = s["median_document_tokens"]
        why = f"the median document has {median:,.0f} tokens against context {s['context']:,}"
    chose = (
        "chose no neighbour at all: this pack is ep's, and a comparison with ep compares it with itself"
        if s.get("retrieved_entries", s.get("retrieved_fraction_of_entries")) == 0
        else "chose the neighbours of few sequences and differs little from ep here"
    )
    return (
        f"note: {100 * single:.0f}% of sequences hold (a piece of) one document: {why}, so {s['method']} "
        f"{chose}; a longer context, or a corpus of shorter documents, gives it more to arrange"
    )


def _similarity(sim: float | None, measure: str | None) -> str:
    """The mean similarity with its measure ("0.919 (1 / (1 + folder steps))"); n/a when none."""
    if sim is None:
        return "n/a"
    return f"{sim:.3f}" + (f" ({measure})" if measure else "")


def pack_label(s: dict) -> str:
    """The packing in a few words: method, the retriever it used, the context ('splice, dense, 1,024')."""
    parts = [s["method"]] + ([s["retriever"]] if s.get("retriever") else [])
    return ", ".join(parts) + (f", context {s['context']:,}" if s.get("context") else "")


def plot_pack_stats(s: dict, out: str | Path) -> Path:
    """Two panels: documents per sequence, and per-sequence Zipf coefficients (PNG, atomic)."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

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
    a.xaxis.set_major_locator(MaxNLocator(integer=True))  # counts: no tick at 1.25 documents
    a.yaxis.set_major_locator(MaxNLocator(integer=True))
    a.set_xlabel("documents per sequence")
    a.set_ylabel("sequences")
    a.set_title(f"{pack_label(s)}: mean {s['docs_per_sequence']['mean']:.2f} docs/sequence", fontsize=10)
    for key, color, name in (
        ("zipf_per_sequence", "#c0392b", "least squares"),
        ("zipf_mle_per_sequence", "#2e86c1", "MLE"),
    ):
        z = np.asarray(s.get(key) or [])
        if len(z):
            b.hist(  # as shares: the MLE's few sequences stay visible beside the least squares' many
                z,
                bins=40,
                weights=np.full(len(z), 1 / len(z)),
                color=color,
                alpha=0.6,
                edgecolor="white",
                linewidth=0.4,
                label=f"{name}: mean {z.mean():.3f} ({len(z):,} sequences)",
            )
            b.axvline(z.mean(), color=color, linestyle="--", linewidth=1)
    if b.has_data():
        b.legend()
    b.set_xlabel("Zipf coefficient of token frequencies (per sequence)")
    b.set_ylabel("share of each estimator's sequences")
    b.set_title("burstiness (lower = burstier)")
    return save_png(fig, out)
