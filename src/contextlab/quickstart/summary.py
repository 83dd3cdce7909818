"""The quickstart's headline: three numbers per model, read back from the evaluation result files.

For every run:

* best-context loss (nats/token): the contextwise loss averaged over the last 10% of the
  training context, on held-out code; the compute-optimal-context study's metric, lower
  is better;
* context gain (nats/token): the loss of the same held-out target tokens with one visible
  token minus with the whole training context visible (``bayes-fit``'s paired last-token
  losses), i.e. how much the model's predictions improve by reading its context. Paired
  targets at random positions, not the contextwise curve's first positions: files start
  with boilerplate (licence headers, imports) that is easy to predict from nothing. With the
  95% interval bayes-fit gives it (per-target differences, cluster-robust t over documents);
  the same quantity contextwise reports as context gain on its late targets;
* needle accuracy: how often the needle-in-a-haystack answer is the most likely of five
  candidates, over every length and depth, with its 95% Wilson interval, the number of
  prompts, chance (0.2: each haystack is asked once with each of the five values as the
  needle) and the calibrated scores (nats the needle adds to the true answer's
  log-likelihood, and to the wrong answers'); a model that does not retrieve reads as
  chance within its interval.

Written to ``OUT/summary.json`` (``format = contextlab-summary``), which the HTML report
shows at the top, together with the two models' contextwise curves on one plot. Reading
result files, not models, keeps the summary cheap to rebuild and the report independent.
"""

from __future__ import annotations

import json
from pathlib import Path

from contextlab.errors import some
from contextlab.io import atomic_write_json

SUMMARY_FORMAT = "contextlab-summary"
COLUMNS = ("best-context loss", "context gain", "needle accuracy")


def _result(path: Path) -> dict:
    return json.loads(path.read_text())["results"]


def run_numbers(run_dir: Path) -> dict:
    """The three headline numbers of one run from its eval/contextwise.json and eval/niah.json."""
    from contextlab.eval.tasks import headline_metric

    cw = _result(run_dir / "eval" / "contextwise.json")
    bf = _result(run_dir / "eval" / "bayes-fit.json")
    niah = _result(run_dir / "eval" / "niah.json")
    key, _ = headline_metric(niah["summary"])
    return {
        "best-context loss": cw["summary"]["best_context_loss"],
        "best-context loss interval95": cw["summary"].get("best_context_loss_interval95"),
        "context gain": bf["context_gain"]["gain"],
        "context gain interval95": bf["context_gain"]["interval95"],
        "visible": [bf["lengths"][0], bf["lengths"][-1]],
        "targets": bf["n_targets"],
        "needle accuracy": niah["summary"][key],
        "needle ci95": [round(x, 4) for x in niah["summary"].get(f"{key}_ci95") or []] or None,
        "needle n": niah["summary"].get("n"),
        "needle chance": niah["summary"].get("chance"),
        "needle calibrated": niah["summary"].get("calibrated"),
        "needle calibrated distractors": niah["summary"].get("calibrated_distractors"),
        "train context": cw["train_context"],
    }


def _intervals(rows: list[dict], key: str) -> str:
    """'; 95% intervals (documents as the unit): gpt 5.61 to 5.86, ...' over the runs that have one."""
    parts = [f"{r['run']} {r[key][0]:.3f} to {r[key][1]:.3f}" for r in rows if r.get(key)]
    return f"; 95% intervals (documents as the unit): {', '.join(parts)}" if parts else ""


def _gain_note(rows: list[dict]) -> str:
    """The context-gain line of the notes, with every run's interval."""
    return (
        f"context gain: loss of {rows[0]['targets']} held-out target tokens (random positions) with "
        f"{rows[0]['visible'][0]} visible token minus with {rows[0]['visible'][1]} visible tokens (the same "
        "targets): what reading the context is worth to the model"
        f"{_intervals(rows, 'context gain interval95')}."
    )


def write_summary(out: Path, cfg, seconds_by_step: dict, seconds: float) -> dict:
    """Compute the headline, draw the combined contextwise plot, write OUT/summary.json."""
    from contextlab.eval.contextwise import combined_plot

    rows = []
    for name, spec in cfg.runs.items():
        nums = run_numbers(out / "runs" / name)
        rows.append({"run": name, "objective": spec.objective, "packing": spec.packing, **nums})
    plot = out / "contextwise_models.png"
    names = list(cfg.runs)
    combined_plot([out / "runs" / name / "eval" / "contextwise.json" for name in names], plot, labels=names)
    ctx = rows[0]["train context"]
    chance = rows[0]["needle chance"]
    notes = [
        f"best-context loss: mean loss (nats/token) over the last 10% of the {ctx}-token training context, "
        f"on held-out files ({some([h.lstrip('/') for h in cfg.corpus.heldout], 3)} of "
        f"{cfg.corpus.source or 'the Python standard library'}), "
        f"lower is better{_intervals(rows, 'best-context loss interval95')}.",
        _gain_note(rows),
        "needle accuracy: the true answer is the most likely of 5 candidates, over every needle length and "
        f"depth, each haystack asked once with each candidate as the needle (chance {chance:g}); "
        "[lo, hi] is its 95% Wilson interval over n prompts; 'cal' is the mean log-likelihood (nats) "
        "the needle adds to the true answer, beside what it adds to the wrong ones: a model that "
        "retrieves raises the true answer more. What the instrument has been shown to read: models "
        "that cannot use their context score chance (the negative control), and models that do read "
        "it score 1.0 on this task (an in-context copier and a GPT whose weights are written to copy, "
        "the positive controls); no model trained on CPU has learned to retrieve here yet: "
        "docs/evaluations.md, 'Negative control' and 'Positive controls'."
        if chance
        else "needle accuracy: substring match of the generated answer.",
    ]
    summary = {
        "format": SUMMARY_FORMAT,
        "title": "contextlab quickstart",
        "headline": rows,
        "notes": notes,
        "figures": [plot.name],
        "seconds_by_step": seconds_by_step,
        "seconds_total_recorded": round(sum(seconds_by_step.values()), 1),
        "seconds_this_invocation": round(seconds, 1),
    }
    atomic_write_json(out / "summary.json", summary)
    return summary


def needle_text(r: dict) -> str:
    """'0.20 [0.14, 0.27] n=150, chance 0.20, cal +0.23 (distractors +0.12)' (older summaries: accuracy and
    chance only)."""
    text = f"{r['needle accuracy']:.2f}"
    if r.get("needle ci95"):
        lo, hi = r["needle ci95"]
        text += f" [{lo:.2f}, {hi:.2f}] n={r['needle n']}"
    if r.get("needle chance"):
        text += f", chance {r['needle chance']:.2f}"
    if r.get("needle calibrated") is not None:
        text += f", cal {r['needle calibrated']:+.2f}"
    if r.get("needle calibrated distractors") is not None:
        text += f" (distractors {r['needle calibrated distractors']:+.2f})"
    return text


def format_headline(summary: dict) -> str:
    """The three numbers per model as a small console table (the needle column with its interval)."""
    rows = summary["headline"]
    width = max(len(r["run"]) for r in rows) + 2
    lines = [" " * width + "".join(f"{c:>20}" for c in COLUMNS[:2]) + f"  {COLUMNS[2]}"]
    for r in rows:
        lines.append(
            f"{r['run']:<{width}}{r['best-context loss']:>20.4f}{r['context gain']:>20.4f}  {needle_text(r)}"
        )
    return "\n".join(lines)
