"""The tables and plots of the SPLICE vs EP study (scripts/splice_vs_ep_extension.py), from its result files.

    .venv/bin/python scripts/splice_vs_ep_tables.py OUT

Reads ``OUT/eval/{base,ep,splice}/{contextwise,niah,kv}.json``, ``OUT/eval/paired.json`` (if
present) and ``OUT/timings.json``; writes ``OUT/summary.md``, ``OUT/summary.json``,
``OUT/buckets.png`` and ``OUT/retrieval.png`` and returns the Markdown tables.

Trade-off: the tables are this study's own (fixed models, fixed evaluations), so they live
beside the script that runs it rather than in ``contextlab.report``, which knows nothing of
studies; they read result files only, so they can be redrawn at any time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from contextlab.figures import pyplot, save_png
from contextlab.io import atomic_write_text

ARMS = {
    "ep": "example packing (EP)",
    "splice": "SPLICE-BM25",
}  # arm -> label; both mixed 50/50 with standard EP
MODELS = {"base": "start (no extension)", **ARMS}  # labels() adds the pretraining context


def summarize(out: Path) -> str:
    """Every table of the study as Markdown (also written to OUT/summary.md) and the two plots."""
    res = {
        m: {
            ev: json.loads((out / "eval" / m / f"{ev}.json").read_text())["results"]
            for ev in ("contextwise", "niah", "kv")
        }
        for m in MODELS
    }
    lines = bucket_table(res) + retrieval_tables(res) + paired_table(out)
    timings = json.loads((out / "timings.json").read_text())
    lines += [
        "",
        "Wall time (s): "
        + ", ".join(f"{k} {v:.0f}" for k, v in timings.items())
        + f"; total {sum(timings.values()) / 60:.1f} min",
    ]
    text = "\n".join(lines) + "\n"
    atomic_write_text(out / "summary.md", text)
    atomic_write_text(out / "summary.json", json.dumps(res, indent=1, default=float) + "\n")
    plot_buckets(res, out / "buckets.png")
    plot_retrieval(res, out / "retrieval.png")
    return text


def pretraining_context(res: dict) -> int:
    """The base model's training context, as its contextwise evaluation recorded it."""
    return int(res["base"]["contextwise"]["train_context"])


def labels(res: dict) -> dict[str, str]:
    """Model -> label, the start model's with its pretraining context."""
    return {**MODELS, "base": f"start ({pretraining_context(res)}, no extension)"}


def bucket_table(res: dict) -> list[str]:
    lines = ["### Loss by position bucket (held-out books, nats/token)", ""]
    buckets = [b for b in res["base"]["contextwise"]["buckets"]]
    head = [f"{b['from']}-{b['to']}" for b in buckets]
    lines += ["| model | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for m, label in labels(res).items():
        bk = res[m]["contextwise"]["buckets"]
        lines.append(f"| {label} | " + " | ".join(f"{b['loss']:.3f}" for b in bk) + " |")
    return lines


def retrieval_tables(res: dict) -> list[str]:
    """Needle accuracy by prompt length and by depth; key-value accuracy by gold position."""
    niah = res["base"]["niah"]["heatmap"]
    lines = [
        "",
        "### Needle in a haystack (likelihood accuracy, 5 candidates; by prompt length)",
        "",
        "| model | " + " | ".join(str(x) for x in niah["cols_length"]) + " | all |",
        "|---|" + "---|" * (len(niah["cols_length"]) + 1),
    ]
    for m, label in labels(res).items():
        vals = res[m]["niah"]["heatmap"]["values"]  # rows depth, cols length
        by_len = [sum(r[j] for r in vals) / len(vals) for j in range(len(niah["cols_length"]))]
        lines.append(
            f"| {label} | "
            + " | ".join(f"{v:.2f}" for v in by_len)
            + f" | {res[m]['niah']['summary']['likelihood_accuracy']:.2f} |"
        )
    lines += [
        "",
        "| model | " + " | ".join(f"depth {d:g}%" for d in niah["rows_depth"]) + " |",
        "|---|" + "---|" * len(niah["rows_depth"]),
    ]
    for m, label in labels(res).items():
        vals = res[m]["niah"]["heatmap"]["values"]
        lines.append(f"| {label} | " + " | ".join(f"{sum(r) / len(r):.2f}" for r in vals) + " |")
    kv = res["base"]["kv"]["by_position"]
    lines += [
        "",
        "### Key-value retrieval (likelihood accuracy, 5 candidates; by gold position)",
        "",
        "| model | " + " | ".join(f"pos {p}" for p in kv["positions"]) + " | all |",
        "|---|" + "---|" * (len(kv["positions"]) + 1),
    ]
    for m, label in labels(res).items():
        acc = res[m]["kv"]["by_position"]["accuracy"]
        lines.append(
            f"| {label} | "
            + " | ".join(f"{a:.2f}" for a in acc)
            + f" | {res[m]['kv']['summary']['likelihood_accuracy']:.2f} |"
        )
    return lines


def paired_table(out: Path) -> list[str]:
    paired = out / "eval" / "paired.json"
    if not paired.exists():
        return []
    lines = [
        "",
        "### SPLICE minus EP, paired over the same held-out windows (nats/token)",
        "",
        "| positions | SPLICE - EP | standard error | windows where SPLICE is better |",
        "|---|---|---|---|",
    ]
    for part, r in json.loads(paired.read_text()).items():
        lines.append(
            f"| {part.removeprefix('positions ')} | {r['splice_minus_ep']:+.4f} | {r['stderr']:.4f} | "
            f"{r['splice_better_in']} of {r['windows']} |"
        )
    return lines


def plot_buckets(res: dict, path: Path) -> None:
    """Mean loss in each 2^i position bucket, one line per model (per-position curves are too noisy)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for m, label in labels(res).items():
        bk = res[m]["contextwise"]["buckets"]
        ax.plot([b["from"] for b in bk], [b["loss"] for b in bk], marker="o", label=label)
    ax.axvline(pretraining_context(res), color="grey", ls=":", lw=1, label="pretraining context")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("position bucket [2^i, 2^(i+1)) (tokens of context)")
    ax.set_ylabel("mean loss (nats/token)")
    ax.set_title("held-out books: loss by position bucket")
    ax.legend(fontsize=8)
    save_png(fig, path, dpi=120)


def plot_retrieval(res: dict, path: Path) -> None:
    """Needle accuracy by prompt length and key-value accuracy by gold position, one line per model."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for m, label in labels(res).items():
        h = res[m]["niah"]["heatmap"]
        by_len = [sum(r[j] for r in h["values"]) / len(h["values"]) for j in range(len(h["cols_length"]))]
        a.plot(h["cols_length"], by_len, marker="o", label=label)
        kv = res[m]["kv"]["by_position"]
        b.plot(kv["positions"], kv["accuracy"], marker="o", label=label)
    for ax, chance in (
        (a, res["base"]["niah"]["summary"].get("chance")),
        (b, res["base"]["kv"]["summary"].get("chance")),
    ):
        if chance:
            ax.axhline(chance, color="grey", ls=":", lw=1, label="chance")
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("likelihood accuracy")
    a.set_xscale("log", base=2)
    a.set_xlabel("needle prompt length (tokens)")
    a.set_title("needle in a haystack (held-out books)")
    b.set_xlabel("position of the gold pair")
    b.set_title("key-value retrieval")
    b.legend(fontsize=8)
    save_png(fig, path, dpi=120)


if __name__ == "__main__":
    print(summarize(Path(sys.argv[1])))
