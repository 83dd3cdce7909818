"""Print the FIM-vs-CLM table of docs/results.md from two `contextlab eval infill` results.

    python scripts/fim_vs_clm_table.py OUT/eval/fim/infill.json OUT/eval/clm/infill.json

Rows: single-line and multi-line exact match (with 95% Wilson intervals) and the true middle's
bits per byte, per prompt (PSM, SPM, left to right); the left-to-right loss of the held-out
files. A model without FIM sentinels has no PSM/SPM row ("-"). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def cell(kinds: dict, kind: str, mode: str, key: str) -> str:
    got = kinds[kind]["modes"].get(mode)
    if got is None:
        return "-"
    if key in ("exact_match", "exact_match_n_lines"):
        x = got[key]
        return f"{x['accuracy']:.3f} [{x['ci95'][0]:.3f}, {x['ci95'][1]:.3f}]"
    return f"{got[key]:.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("fim", help="infill.json of the FIM-trained model")
    p.add_argument("clm", help="infill.json of the CLM-trained model")
    args = p.parse_args()
    res = {
        name: json.loads(Path(f).read_text())["results"] for name, f in (("FIM", args.fim), ("CLM", args.clm))
    }
    rows = [
        ("single-line exact match", "single", "exact_match"),
        ("multi-line exact match (model ends it)", "multi", "exact_match"),
        ("multi-line exact match (first n lines)", "multi", "exact_match_n_lines"),
        ("single-line middle, bits/byte", "single", "bits_per_byte"),
        ("multi-line middle, bits/byte", "multi", "bits_per_byte"),
    ]
    print("| measure | prompt | FIM model | CLM model |\n|---|---|---|---|")
    for label, kind, key in rows:
        for mode in ("psm", "spm", "l2r"):
            a, b = (cell(r["kinds"], kind, mode, key) for r in res.values())
            print(f"| {label} | {mode} | {a} | {b} |")
    a, b = (
        f"{r['lm']['loss']:.4f} nats/token, {r['lm']['bits_per_byte']:.4f} bits/byte" for r in res.values()
    )
    print(f"| left-to-right loss of the held-out files | l2r | {a} | {b} |")
    print(json.dumps({name: r["summary"] for name, r in res.items()}))


if __name__ == "__main__":
    main()
