"""Ranking a sweep's objectives by the one loss they share.

Each objective's own validation loss is a different quantity (masked tokens for MLM, targets after
a corrupted input for span corruption and UL2, every head for MTP), so a sweep whose runs differ in
``objective.name`` is ranked by ``best_val_lm_loss``: the validation rows' next-token loss with the
model run left to right (``Objective.lm_loss``). Runs of objectives that cannot be run so (MLM,
span corruption) are listed unranked, with the reason. Trade-off: the ranking reads results.csv
only (strings, as written), so it works on a finished sweep without loading a model.
"""

from __future__ import annotations

import csv
from pathlib import Path

OBJECTIVE_KEY = "objective.name"
RANK_BY = "best_val_lm_loss"


def objective_ranking(results_csv: str | Path) -> list[str]:
    """The lines that rank the runs of a sweep over objectives; [] when its runs share one objective."""
    with open(results_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if len({r.get(OBJECTIVE_KEY) or "clm" for r in rows}) < 2:
        return []
    ranked = sorted((r for r in rows if r.get(RANK_BY)), key=lambda r: float(r[RANK_BY]))
    lines = [
        f"objectives compared by {RANK_BY} (the next-token loss of the validation rows with each model "
        "run left to right), not by val_loss, which is each objective's own and not comparable:"
    ]
    for i, r in enumerate(ranked, 1):
        lines.append(f"  {i}. {r['run']} ({r.get(OBJECTIVE_KEY) or 'clm'}): {float(r[RANK_BY]):.4f}")
    for r in rows:
        if not r.get(RANK_BY) and r.get("status") == "done":
            lines.append(f"  -  {r['run']} ({r.get(OBJECTIVE_KEY)}): not a left-to-right model, not ranked")
    return lines
