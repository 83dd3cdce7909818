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
    """The lines that rank the runs of a sweep over objectives; [] when its runs share one objective.
    Only finished runs are ranked: a run stopped half-way (killed, failed, still running) has the loss
    of a shorter run, listed apart with how far it got."""
    results_csv = Path(results_csv)
    with open(results_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if len({r.get(OBJECTIVE_KEY) or "clm" for r in rows}) < 2:
        return []
    done = [r for r in rows if r.get("status") == "done"]
    ranked = sorted((r for r in done if r.get(RANK_BY)), key=lambda r: float(r[RANK_BY]))
    lines = [
        f"objectives compared by {RANK_BY} (the next-token loss of the validation rows with each model "
        "run left to right), not by val_loss, which is each objective's own and not comparable:"
    ]
    for i, r in enumerate(ranked, 1):
        lines.append(f"  {i}. {r['run']} ({r.get(OBJECTIVE_KEY) or 'clm'}): {float(r[RANK_BY]):.4f}")
    for r in done:
        if not r.get(RANK_BY):
            lines.append(f"  -  {r['run']} ({r.get(OBJECTIVE_KEY)}): not a left-to-right model, not ranked")
    for r in rows:
        if r.get("status") != "done" and r.get(RANK_BY):
            lines.append(f"  -  {r['run']} ({r.get(OBJECTIVE_KEY) or 'clm'}): not ranked, {_unfinished(r)}")
    if len(ranked) >= 2:
        runs = results_csv.parent / "runs"
        lines.append(
            "  these losses have no interval; the paired difference of two runs with its 95% interval: "
            f"contextlab compare {runs / ranked[1]['run']} {runs / ranked[0]['run']}"
        )
    return lines


def _unfinished(r: dict) -> str:
    """How far a run that did not finish got, in words: its status, step and share of its budget."""
    where = f"{r.get('status') or 'unfinished'} at step {r['steps']}" if r.get("steps") else r.get("status")
    for key, spent in (
        ("train.max_flops", "flops"),
        ("train.max_tokens", "tokens"),
        ("train.max_steps", "steps"),
    ):
        try:
            share = float(r[spent]) / float(r[key])
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            continue
        return f"{where} ({100 * share:.0f}% of its {key}): its loss is of a shorter run"
    return f"{where}: its loss is of a run that did not finish"
