"""Shared machinery of the prompt tasks (needle, key-value, passkey, variable tracking, ICL).

A task builds ``Sample``s: prompt ids in the model's own tokenizer, the answer text, and
candidate continuations (the true one first, then distractors). ``score_samples`` scores
them deterministically in one or both ways:

* generation: greedy decoding of up to ``max_new_tokens``; ``exact`` when the generated
  text (whitespace-trimmed) starts with the answer, ``contains`` when it holds it anywhere;
* likelihood: the summed log-probability of each candidate after the prompt (candidates
  of one prompt are scored in one batch); correct when the true answer scores highest.
  This works even for tiny models that cannot yet generate the answer: it measures
  whether the context raises the right answer above the distractors.

``visible`` keeps only the most recent k prompt tokens (k < 1: that fraction of the
prompt), the knob of the visible-context sweep. Results are grouped by each sample's
``cell`` (e.g. (length, depth)) into accuracy tables.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from contextlab.eval.base import accuracy_ci


@dataclass
class Sample:
    prompt: list[int]  # ids
    answer: str  # the text generation must reproduce
    candidates: list[list[int]]  # ids of candidate continuations, the true one first
    cell: tuple = ()  # grouping key, e.g. (length, depth)
    max_new: int = 0  # tokens to generate; 0 = the caller's max_new_tokens
    meta: dict = field(default_factory=dict)


def truncate(prompt: list[int], visible: float | None) -> list[int]:
    if visible is None or visible <= 0:
        return prompt
    k = int(math.ceil(visible * len(prompt))) if visible < 1 else int(visible)
    return prompt[-k:] if k < len(prompt) else prompt


def score_samples(
    adapter, samples: list[Sample], mode: str = "both", max_new_tokens: int = 16, visible: float | None = None
) -> list[dict]:
    """One dict per sample: likelihood_correct / rank / margin and/or generated / exact / contains."""
    out = []
    for s in samples:
        prompt = truncate(s.prompt, visible)
        row: dict = {"cell": list(s.cell), "prompt_tokens": len(prompt)}
        if mode in ("likelihood", "both") and s.candidates:
            scores = adapter.score_continuations(prompt, s.candidates)
            row["likelihood_correct"] = bool(scores[0] > scores[1:].max()) if len(scores) > 1 else True
            row["rank"] = int((scores[1:] >= scores[0]).sum())
            row["margin"] = float(scores[0] - scores[1:].max()) if len(scores) > 1 else 0.0
        if mode in ("generate", "both"):
            stop = [i for i in (adapter.tokenizer.eot_id,) if i is not None]
            gen = adapter.tokenizer.decode(adapter.generate(prompt, s.max_new or max_new_tokens, stop=stop))
            row["generated"] = gen
            row["exact"] = _norm(gen).startswith(_norm(s.answer))
            row["contains"] = _norm(s.answer) in _norm(gen)
        out.append(row)
    return out


def _norm(text: str) -> str:
    return " ".join(text.strip().split()).lower()


def summarize(rows: list[dict], n_candidates: int) -> dict:
    """Overall and per-cell accuracies (likelihood, exact, contains)."""
    metrics = [m for m in ("likelihood_correct", "exact", "contains") if rows and m in rows[0]]
    cells = defaultdict(list)
    for r in rows:
        cells[tuple(r["cell"])].append(r)
    summary = {}
    for m in metrics:
        name = "likelihood_accuracy" if m == "likelihood_correct" else f"{m}_match"
        summary[name] = accuracy_ci([r[m] for r in rows])["accuracy"]
    if n_candidates > 1 and "likelihood_correct" in metrics:
        summary["chance"] = 1.0 / n_candidates
    by_cell = [
        {
            "cell": list(c),
            **{m: float(np.mean([r[m] for r in rs])) for m in metrics},
            "n": len(rs),
            "prompt_tokens": float(np.mean([r["prompt_tokens"] for r in rs])),
        }
        for c, rs in sorted(cells.items())
    ]
    return {"summary": summary, "by_cell": by_cell}


def headline_metric(summary: dict) -> tuple[str, str]:
    """(summary key, per-cell key) of the main accuracy: likelihood when scored, else substring match."""
    if "likelihood_accuracy" in summary:
        return "likelihood_accuracy", "likelihood_correct"
    return "contains_match", "contains"


def table(by_cell: list[dict], metric: str, rows: list, cols: list) -> list[list[float]]:
    """by_cell with 2-part cells (row value, col value) -> matrix[row][col] of metric."""
    look = {tuple(c["cell"]): c[metric] for c in by_cell}
    return [[look.get((r, c), float("nan")) for c in cols] for r in rows]
