"""Validation loss of every run of a sweep against training FLOPs, in one plot.

Reads ``SWEEP/results.csv`` (each run's total FLOPs and tokens, hence its FLOPs per token)
and each ``SWEEP/runs/RUN/metrics.jsonl`` (validation loss at its logged steps), and draws
loss (left axis) and perplexity (right axis) against training FLOPs. Used for the
ContextLM-vs-GPT comparison in docs/results.md:

    python scripts/plot_val_curves.py sweeps/contextlm_vs_gpt --out docs/img/contextlm_vs_gpt.png
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

from contextlab.figures import pyplot, save_png


def curves(sweep: Path) -> dict[str, list[tuple[float, float]]]:
    """{run name: [(training FLOPs, validation loss), ...]} for every finished run of the sweep."""
    out = {}
    with open(sweep / "results.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row.get("status") != "done" or not row.get("tokens"):
                continue
            per_token = float(row["flops"]) / float(row["tokens"])
            lines = (sweep / "runs" / row["run"] / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
            points = [json.loads(line) for line in lines if line.strip()]
            out[row["run"]] = [(p["tokens"] * per_token, p["val_loss"]) for p in points if "val_loss" in p]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep", type=Path, help="a sweep directory (results.csv, runs/)")
    ap.add_argument("--out", type=Path, required=True, help="PNG to write")
    ap.add_argument("--title", default="", help="plot title (default: the sweep's name)")
    args = ap.parse_args()
    data = curves(args.sweep)
    if not data:
        raise SystemExit(f"{args.sweep}/results.csv has no finished runs; run the sweep first")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    for name, pts in data.items():
        x, y = zip(*pts)
        ax.plot(
            x, y, marker="o", markersize=3, label=f"{name} (final {y[-1]:.3f}, ppl {math.exp(y[-1]):.1f})"
        )
    ax.set_xlabel("training FLOPs")
    ax.set_ylabel("validation loss (nats/token)")
    lo, hi = ax.get_ylim()
    twin = ax.twinx()
    twin.set_ylim(math.exp(lo), math.exp(hi))
    twin.set_yscale("log")
    twin.set_ylabel("perplexity")
    ax.set_title(args.title or args.sweep.name)
    ax.legend(fontsize=8)
    save_png(fig, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
