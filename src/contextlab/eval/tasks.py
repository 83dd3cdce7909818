"""Shared machinery of the prompt tasks (needle, key-value, passkey, variable tracking, ICL).

A task builds ``Sample``s: prompt ids in the model's own tokenizer, the answer text, and
candidate continuations (the true one first, then distractors). The tasks build *balanced
candidate sets*: each set of k candidates is asked k times, once with each member as the
true answer (``group`` names the set), so a model that ignores the context picks the same
candidate in every member and scores exactly 1/k on average. ``eval/scoring.py`` scores them;
this module holds what comes before and after: the prompt lengths and the summaries.

``sample_arrays`` turns the scored rows into the per-sample arrays every task saves beside its
JSON (correctness, cell, candidate set), which ``contextlab compare`` pairs between two models.
Results are grouped by each sample's ``cell`` (e.g. (length, depth)) into accuracy tables, each
with its Wilson interval.

Lengths: a task's default prompt lengths are fractions of the model's context less what the
answer adds to the longest forward pass (``default_lengths``), so no default prompt runs past
the context; ``check_longest`` checks the longest sequence of all samples once, before the
first forward, so the one warning (or error) names the longest prompt and the task's own option.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import contextlab.eval.stats as stats
from contextlab.errors import UserError


@dataclass
class Sample:
    prompt: list[int]  # ids
    answer: str  # the text generation must reproduce
    candidates: list[list[int]]  # ids of candidate continuations, the true one first
    cell: tuple = ()  # grouping key, e.g. (length, depth)
    max_new: int = 0  # tokens to generate; 0 = the caller's max_new_tokens
    meta: dict = field(default_factory=dict)
    control: list[int] | None = None  # the prompt without its evidence; None = not calibrated
    group: int = -1  # the balanced candidate set the sample belongs to
    # the independent unit whose outcomes agree beyond its candidate set (a kv example, its same pairs asked
    # at every position): accuracy intervals cluster by it; -1: the candidate set
    unit: int = -1


def answer_room(answer_tokens: int, scoring: str, max_new: int) -> int:
    """Tokens a forward pass sees past the prompt: the answer but its last token (likelihood: the last
    is only a target), the generated tokens but the last (generation)."""
    room = answer_tokens - 1 if scoring in ("likelihood", "both") else 0
    return max(room, max_new - 1 if scoring in ("generate", "both") else 0, 0)


DEFAULT_FRACTIONS = (0.25, 0.5, 1.0)  # the prompt tasks' default lengths, as fractions of the context
LONG_CONTEXT = 8192  # past this, a settings line of defaults says which option measures shorter


def shorter(adapter, given, flag: str) -> str | None:
    """The settings line's note for a model whose context is long (minutes to hours per prompt on a CPU)
    when the lengths followed it by default: which option measures shorter. None otherwise."""
    if given or adapter.context <= LONG_CONTEXT:
        return None
    return f"the defaults follow the model's {adapter.context:,}-token context; {flag} measures shorter"


def prompt_lengths(task: str, context: int, given, room: int, shortest: int) -> list[int]:
    """A prompt task's lengths: ``given`` (its --lengths) as they are, else ``default_lengths`` at
    ``DEFAULT_FRACTIONS`` of ``context``; one line (``no_default_length``) when no default fits."""
    if given:
        return list(given)
    lengths = default_lengths(context, DEFAULT_FRACTIONS, room, shortest)
    if not lengths:
        raise no_default_length(task, context, room, shortest)
    short = [f for f in DEFAULT_FRACTIONS if int(f * context) - room < shortest]
    if short:  # a default length left out: said, so the lengths measured are no surprise
        import sys

        print(
            f"note: {task}: the default length{'s' * (len(short) != 1)} at "
            f"{', '.join(f'{f:g}' for f in short)} of the {context:,}-token context "
            f"{'are' if len(short) != 1 else 'is'} shorter than the task's fixed text ({shortest:,} tokens "
            f"at least) and left out; measuring {', '.join(f'{n:,}' for n in lengths)}",
            file=sys.stderr,
        )
    return lengths


def default_lengths(context: int, fractions: tuple[float, ...], room: int, shortest: int) -> list[int]:
    """A task's default prompt lengths: each fraction of the model's context less ``room`` (what the
    answer adds to the longest forward pass), so a default prompt with its answer never exceeds the
    context; lengths under ``shortest`` (too short for the task's fixed text) are left out."""
    lengths = sorted({int(f * context) - room for f in fractions})
    return [n for n in lengths if n >= shortest]


def no_default_length(task: str, context: int, room: int, shortest: int) -> UserError:
    """The one line of a model whose context holds no prompt of ``task`` with its answer."""
    return UserError(
        f"{task}: the model's context ({context:,} tokens) is too short for a {task} prompt ({shortest:,} "
        f"tokens at least, and {room} of its answer); pass --lengths to run it past the context (the "
        "model then extrapolates)"
    )


def lengths_fix(task: str, context: int, room: int, shortest: int = 1) -> str:
    """What to do about a prompt of ``task`` past the context: the largest --lengths that fits, or, when
    none does (a context shorter than the task's fixed text and answer), that it measures extrapolation."""
    fits = context - room
    if fits >= shortest:
        return (
            f"use {task} --lengths of at most {fits:,} to stay within the context (or leave --lengths out: "
            "the default lengths fit)"
        )
    return (
        f"no {task} prompt fits the model's context of {context:,} tokens ({shortest:,} at least, and {room} "
        "of its answer), so every length measures extrapolation"
    )


def longest_forward(samples: list[Sample], scoring: str, max_new_tokens: int = 16) -> int:
    """The most tokens any forward pass of ``score_samples`` sees for these samples (prompts with their
    candidates or generated tokens, controls with their candidates)."""
    most = 0
    for s in samples:
        longest = max((len(c) for c in s.candidates), default=1)
        most = max(most, len(s.prompt) + answer_room(longest, scoring, s.max_new or max_new_tokens))
        if s.control is not None and scoring in ("likelihood", "both"):
            most = max(most, len(s.control) + longest - 1)
    return most


def check_longest(adapter, samples: list[Sample], scoring: str, what: str, fix: str) -> int:
    """Check the longest forward pass of all samples once, before any (``ModelAdapter.check_length``:
    an error for a fixed-position model, one warning for a RoPE one); returns its length."""
    T = longest_forward(samples, scoring)
    adapter.check_length(T, what, fix)
    return T


def sample_rows(rows: list[dict], samples: list[Sample]) -> list[dict]:
    """The scored rows as a result saves them (``results.samples``): each with its sample's answer and
    meta (a needle's actual depth), so a wrong answer can be read beside what the model generated."""
    return [{**r, "answer": s.answer, **s.meta} for r, s in zip(rows, samples)]


def sample_arrays(rows: list[dict]) -> dict[str, np.ndarray]:
    """The per-sample outcomes of ``score_samples`` as arrays saved beside the result, in sample order:
    ``correct_<metric>`` (n,) int8 for each accuracy scored, ``cell`` (n, parts) float64 and
    ``group`` (n,) int64, so two models' results pair sample by sample (``contextlab compare``), and
    ``unit`` (n,) int64, the cluster their intervals take."""
    out = {
        f"correct_{m}": np.asarray([r[m] for r in rows], np.int8) for m in ACCURACIES if rows and m in rows[0]
    }
    out["cell"] = np.asarray([r["cell"] for r in rows], np.float64).reshape(len(rows), -1)
    out["group"] = np.asarray([r["group"] for r in rows], np.int64)
    out["unit"] = np.asarray([r.get("unit", r["group"]) for r in rows], np.int64)
    return out


ACCURACIES = {
    "likelihood_correct": "likelihood_accuracy",
    "calibrated_correct": "calibrated_accuracy",
    "exact": "exact_match",
    "contains": "contains_match",
}
SCORED_BY = {  # each per-sample accuracy key in words (scoring.py), for plot titles
    "likelihood_correct": "correct: true answer is the most likely candidate",
    "calibrated_correct": "correct: the evidence raises the true answer most (log-prob with it - without)",
    "exact": "correct: greedy output starts with the answer",
    "contains": "correct: greedy output contains the answer",
}


def _metrics(rows: list[dict]) -> dict:
    """Accuracies with their Wilson intervals, keyword recall and the calibrated scores of ``rows``."""
    out: dict = {}
    for m, name in ACCURACIES.items():
        if rows and m in rows[0]:
            # a candidate set's rotations agree, and so do the sets of one unit (a kv example's positions)
            units = [r.get("unit", r["group"]) for r in rows] if "group" in rows[0] else None
            p = stats.proportion([r[m] for r in rows], clusters=units)
            out[name], out[f"{name}_ci95"] = p["accuracy"], p["ci95"]
            if "n_effective" in p:
                out[f"{name}_n_effective"] = p["n_effective"]
    if rows and "keyword_recall" in rows[0]:
        out["keyword_recall"] = float(np.nanmean([r["keyword_recall"] for r in rows]))
    if rows and "gain_true" in rows[0]:
        out["calibrated"], out["calibrated_stderr"] = stats.mean_stderr([r["gain_true"] for r in rows])
        out["calibrated_distractors"] = float(np.mean([r["gain_distractors"] for r in rows]))
        out["calibrated_specific"], out["calibrated_specific_stderr"] = stats.mean_stderr(
            [r["gain_true"] - r["gain_distractors"] for r in rows]
        )
    out["n"] = len(rows)
    return out


def summarize(rows: list[dict], n_candidates: int) -> dict:
    """Overall and per-cell accuracies (likelihood, exact, contains) with intervals and calibration."""
    cells = defaultdict(list)
    for r in rows:
        cells[tuple(r["cell"])].append(r)
    summary = _metrics(rows)
    if n_candidates > 1 and "likelihood_accuracy" in summary:
        summary["chance"] = 1.0 / n_candidates
    by_cell = []
    for c, rs in sorted(cells.items()):
        cell = {
            "cell": list(c),
            "n": len(rs),
            "prompt_tokens": float(np.mean([r["prompt_tokens"] for r in rs])),
        }
        for m in ACCURACIES:
            if m in rs[0]:
                cell[m] = float(np.mean([r[m] for r in rs]))
        m = _metrics(rs)
        cell.update(
            {k: v for k, v in m.items() if k.endswith("_ci95") or k.startswith(("calibrated", "keyword"))}
        )
        by_cell.append(cell)
    return {"summary": summary, "by_cell": by_cell, "text": summary_lines(summary)}


def summary_lines(summary: dict) -> list[str]:
    """'likelihood accuracy 0.20 [0.16, 0.25] of n=500, chance 0.20, calibrated +0.01 nats' and the like."""
    lines = []
    for name in ACCURACIES.values():
        if name in summary:
            chance = summary.get("chance") if name in ("likelihood_accuracy", "calibrated_accuracy") else None
            calibrated = summary.get("calibrated") if name == "likelihood_accuracy" else None
            label = name.replace("_", " ")
            line = stats.accuracy_line(
                label,
                summary[name],
                summary[f"{name}_ci95"],
                summary["n"],
                chance,
                calibrated,
                summary.get(f"{name}_n_effective"),
            )
            if calibrated is not None:
                line += f" (distractors {summary['calibrated_distractors']:+.2f})"
            lines.append(line)
    if "keyword_recall" in summary:
        lines.append(f"keyword recall {summary['keyword_recall']:.2f} of n={summary['n']}")
    lo = (summary.get("calibrated_accuracy_ci95") or [0.0])[0]
    if "likelihood_accuracy" in summary and lo > summary["likelihood_accuracy_ci95"][1]:
        lines.append(
            f"note: the evidence raises the true answer most in {summary['calibrated_accuracy']:.2f} of the "
            f"prompts, but it is the most likely candidate in only {summary['likelihood_accuracy']:.2f}: the "
            "either the candidates' own prior (their length, their words) outweighs what the model reads, "
            "or it reads that a value is in the prompt without finding the one asked for (a model that "
            "copies the last value it saw: the evidence raises the true one, present only with it, and it "
            "still picks another); calibrated accuracy cannot tell these apart, the likelihood accuracy is "
            "the test of retrieval"
        )
    return lines


def headline_metric(summary: dict) -> tuple[str, str]:
    """(summary key, per-cell key) of the main accuracy: likelihood when scored, else substring match."""
    if "likelihood_accuracy" in summary:
        return "likelihood_accuracy", "likelihood_correct"
    return "contains_match", "contains"


def table(by_cell: list[dict], metric: str, rows: list, cols: list) -> list[list[float]]:
    """by_cell with 2-part cells (row value, col value) -> matrix[row][col] of metric."""
    look = {tuple(c["cell"]): c[metric] for c in by_cell}
    return [[look.get((r, c), float("nan")) for c in cols] for r in rows]


def interval_key(cell_key: str) -> str:
    """The per-cell key of the 95% interval of a per-cell accuracy key ('likelihood_correct' -> ...)."""
    return f"{ACCURACIES[cell_key]}_ci95"


def interval_table(by_cell: list[dict], cell_key: str, rows: list, cols: list) -> list[list]:
    """Like ``table``, with each cell's (lo, hi) Wilson interval of ``cell_key`` (None where absent)."""
    look = {tuple(c["cell"]): c.get(interval_key(cell_key)) for c in by_cell}
    return [[look.get((r, c)) for c in cols] for r in rows]


def rotations(candidates: list[list[int]]) -> list[list[list[int]]]:
    """For a balanced set: candidate lists with member j first (then the others in set order), j = 0..k-1."""
    return [[candidates[j]] + [c for i, c in enumerate(candidates) if i != j] for j in range(len(candidates))]


def _per_cell(by_cell: list[dict]) -> int | None:
    """The prompts behind each cell when every cell has as many (else None: the title says nothing)."""
    counts = {c.get("n") for c in by_cell}
    return counts.pop() if len(counts) == 1 and None not in counts else None


def depth_by_length(
    res: dict, depths: list, lengths: list, what: str, title: str, col_label: str = "prompt length (tokens)"
) -> Callable[[Path], Path]:
    """Put ``res["heatmap"]`` (the headline metric by depth x length, with 95% intervals) into a
    depth-sweep task's result and return the function that draws it (``plots.heatmap_png``);
    ``what`` names the hidden thing ("needle", "key"), ``title`` the task and the model, ``col_label``
    what the lengths are (passkey's prompts are exactly theirs)."""
    _key, cell_key = headline_metric(res["summary"])
    res["heatmap"] = {
        "metric": cell_key,
        "rows_depth": depths,
        "cols_length": lengths,
        "values": table(res["by_cell"], cell_key, depths, lengths),
        "ci95": interval_table(res["by_cell"], cell_key, depths, lengths),
    }

    def plot(path: Path) -> Path:
        from contextlab.result_plots import heatmap_png

        return heatmap_png(
            res["heatmap"]["values"],
            depths,
            lengths,
            path,
            row_label=f"{what} depth (%)",
            col_label=col_label,
            title=f"{title}\n{SCORED_BY[cell_key]}",
            intervals=res["heatmap"]["ci95"],
            value_label="accuracy (fraction of prompts correct)",
            chance=res["summary"].get("chance"),
            per_cell=_per_cell(res["by_cell"]),
        )

    return plot
