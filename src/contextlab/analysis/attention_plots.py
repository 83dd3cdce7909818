"""Figures of ``analyze attention``, drawn from its result dict alone (so a saved JSON redraws them).

* ``attention_tokens.png``: the seed's Figure 6 for one row: attention received per token,
  the models side by side, and the percent change per token with the chunks marked and each
  chunk's percent change written above it; with ``per_layer`` one more panel per layer.
* ``attention_chunks.png`` (two models): percent change by chunk index over all rows, and by
  offset within a chunk; attention received per query that can see the token vs position.
* ``attention_distance.png``: mass by distance bucket, layer x bucket heatmaps, one per model,
  and A - B when both have as many layers; a ContextLM's predictor (over chunks) as lines.

Trade-off: fixed layouts with no styling options; the numbers behind every panel are in the JSON.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from contextlab.figures import pyplot, save_png

COLORS = {"a": "tab:orange", "b": "tab:blue"}  # the seed: ContextLM orange, GPT blue
SHARE = "share of each query's attention"  # a cell of the mass-by-distance heatmaps


def _label(results: dict, k: str) -> str:
    part = results["models"][k]
    return f"{k.upper()}: {Path(part['id']).name} ({part['architecture']})"


def _bars(ax, results: dict, received: dict, title: str) -> None:
    tokens = results["sample"]["tokens"]
    x = np.arange(len(tokens))
    width = 0.8 / len(received)
    for n, (k, r) in enumerate(received.items()):
        ax.bar(x + (n - (len(received) - 1) / 2) * width, r, width, color=COLORS[k], label=_label(results, k))
    ax.set_ylabel("attention received")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.set_xlim(-0.6, len(tokens) - 0.4)


def _token_axis(ax, tokens: list[str]) -> None:
    ax.set_xticks(np.arange(len(tokens)))
    ax.set_xticklabels([repr(t)[1:-1][:10] for t in tokens], rotation=90, fontsize=6)


def _percent_panel(ax, sample: dict) -> None:
    pct = np.asarray(sample["percent_by_token"], float)
    w = sample["chunk"]
    ax.bar(np.arange(len(pct)), pct, color=np.where(pct >= 0, "tab:green", "tab:red"))
    ax.axhline(0, color="black", lw=0.6)
    top = np.nanmax(np.abs(pct)) if np.isfinite(pct).any() else 1.0
    top = top or 1.0  # two identical models change nothing: an axis of ±1%, not of zero height
    for c, p in enumerate(sample["percent_by_chunk"]):
        ax.axvline(c * w - 0.5, color="grey", lw=0.5, ls=":")
        ax.text(c * w + (w - 1) / 2, top * 1.05, f"{p:+.0f}%", ha="center", fontsize=6)
    ax.set_ylim(-top * 1.15, top * 1.2)
    ax.set_ylabel("A vs B (%)")
    ax.set_title(f"percent change per token; per chunk of {w} above", fontsize=9)


def tokens_png(results: dict, path, per_layer: bool = False) -> Path:
    """The per-token figure of the sample row."""
    plt = pyplot()
    sample = results["sample"]
    n_layers = len(next(iter(sample["received_per_layer"].values())))
    panels = 1 + ("percent_by_token" in sample) + (n_layers if per_layer else 0)
    fig, axes = plt.subplots(panels, 1, figsize=(max(8, 0.22 * len(sample["tokens"])), 2.6 * panels))
    axes = np.atleast_1d(axes)
    _bars(
        axes[0], results, sample["received"], "attention received per token (averaged over heads and layers)"
    )
    k = 1
    if "percent_by_token" in sample:
        _percent_panel(axes[1], sample)
        k = 2
    if per_layer:
        for layer in range(n_layers):
            per = {m: r[layer] for m, r in sample["received_per_layer"].items() if layer < len(r)}
            _bars(axes[k + layer], results, per, f"layer {layer + 1}")
    for ax in axes:
        _token_axis(ax, sample["tokens"])
    return save_png(fig, path)


def chunks_png(results: dict, path, per_layer: bool = False) -> Path:
    """Percent change by chunk and by offset within a chunk over all rows; received per query."""
    plt = pyplot()
    comp = results["comparison"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    ax = axes[0]
    ax.plot(comp["percent_by_chunk"], color="black", lw=1.2, label="averaged over layers")
    if per_layer and "per_layer" in comp:
        for layer, p in enumerate(comp["per_layer"]["percent_by_chunk"]):
            ax.plot(p, lw=0.8, label=f"layer {layer + 1}")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xlabel(f"chunk index (chunks of {comp['chunk']} positions)")
    ax.set_ylabel("A vs B (%)")
    ax.set_title(f"attention received per chunk, {results['rows']} rows", fontsize=9)
    ax.legend(fontsize=6)
    ax = axes[1]
    off = comp["percent_by_offset_in_chunk"]
    ax.bar(np.arange(len(off)), off, color="tab:purple")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xlabel("offset of the token within its chunk (j mod w)")
    ax.set_ylabel("A vs B (%)")
    ax.set_title("by offset within a chunk", fontsize=9)
    ax = axes[2]
    for k, part in results["models"].items():
        r = np.asarray(part["blocks"]["received_per_query"])
        ax.plot(np.arange(1, len(r) + 1), r, color=COLORS[k], lw=1, label=_label(results, k))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("source position j + 1")
    ax.set_ylabel("received / queries that see it")
    ax.set_title("attention per query that can see the token", fontsize=9)
    ax.legend(fontsize=6)
    return save_png(fig, path)


def _bucket_labels(buckets: list[dict]) -> list[str]:
    return [f"{b['from']}" if b["from"] == b["to"] else f"{b['from']}-{b['to']}" for b in buckets]


def _heatmap(
    fig,
    ax,
    mass: np.ndarray,
    labels: list[str],
    title: str,
    value: str,
    diverging: bool = False,
    vmax: float | None = None,
) -> None:
    """A layer x distance-bucket heatmap; ``value`` names a cell's number along the colour bar; ``vmax``:
    the top of a scale shared with other panels (two models' maps compared colour for colour)."""
    if diverging:
        top = float(np.abs(mass).max()) or 1.0
        im = ax.imshow(mass, aspect="auto", cmap="RdBu_r", vmin=-top, vmax=top)
    else:
        im = ax.imshow(mass, aspect="auto", cmap="viridis", vmin=0, vmax=vmax)
    ax.set_xticks(np.arange(len(labels)))
    ax.set_xticklabels(labels, rotation=60, fontsize=6)
    ax.set_yticks(np.arange(mass.shape[0]))
    ax.set_yticklabels([str(i + 1) for i in range(mass.shape[0])], fontsize=7)
    ax.set_xlabel("distance i - j (tokens)")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046).set_label(value, fontsize=8)


def distance_png(results: dict, path) -> Path:
    """Mass by distance bucket: a layer x bucket heatmap per model, A - B, the predictor's lines."""
    plt = pyplot()
    labels = _bucket_labels(results["buckets"])
    models = results["models"]
    masses = {k: np.asarray(p["blocks"]["mass_by_distance"]) for k, p in models.items()}
    diff = "comparison" in results and len({m.shape for m in masses.values()}) == 1
    predictors = {k: p["predictor"] for k, p in models.items() if "predictor" in p}
    n = len(masses) + diff + bool(predictors)
    cols = n if n <= 2 else 2  # four panels in a row were 2,200 px wide: halved on a page, unreadable
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 3.8 * rows), squeeze=False)
    axes = axes.ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    top = max((float(m.max()) for m in masses.values() if m.size), default=None)  # one scale for A and B
    for ax, (k, mass) in zip(axes, masses.items()):
        _heatmap(fig, ax, mass, labels, f"mass by distance, {_label(results, k)}", SHARE, vmax=top)
    if diff:
        delta = masses["a"] - masses["b"]
        _heatmap(fig, axes[len(masses)], delta, labels, "A - B", f"A - B ({SHARE})", True)
    if predictors:
        ax = axes[n - 1]  # the last shown panel (a grid may hide one after it)
        for k, pred in predictors.items():
            bk = pred["buckets"]
            labels = _bucket_labels(bk)
            for layer, mass in enumerate(pred["mass_by_distance"]):
                alpha = 0.4 + 0.6 * layer / max(1, len(pred["mass_by_distance"]) - 1)
                ax.plot(
                    mass,
                    "o-",
                    ms=3,
                    lw=1,
                    color=COLORS[k],
                    alpha=alpha,
                    label=f"{k.upper()} layer {layer + 1}",
                )
        ax.legend(fontsize=6)
        ax.set_xticks(np.arange(len(labels)))
        ax.set_xticklabels(labels, rotation=60, fontsize=6)
        ax.set_xlabel("distance in chunks (bucket)")
        ax.set_ylabel("share of attention")
        ax.set_title("ContextLM predictor over chunks, per layer", fontsize=9)
    return save_png(fig, path)


def plot_all(results: dict, out_dir, per_layer: bool = False) -> list[Path]:
    """Every figure of a result into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    paths = [tokens_png(results, out / "attention_tokens.png", per_layer)]
    if "comparison" in results:
        paths.append(chunks_png(results, out / "attention_chunks.png", per_layer))
    paths.append(distance_png(results, out / "attention_distance.png"))
    return paths
