"""Visible-context sweep: any evaluation as a function of how much recent context the model sees.

The optimal-visible-context analysis of the intrinsic-entropy seed (Appendix A): keep the
task fixed and let the model see only the k most recent tokens of each prompt (k < 1
means that fraction of the prompt). Accuracy that first rises and then falls with k is a
model that gets distracted by far context. For the loss, the task ``loss`` is the
last-token loss with k visible tokens (the protocol of ``bayes_fit``), so the same
targets are scored at every k, and with k = 1 among them the context gain (k = 1 minus the
largest k, paired per target) is reported as bayes-fit reports it.

The prompts are built once; only their left end is cut, so every point of the curve asks
the same questions (the balanced candidate sets of ``tasks``; their control prompts are cut
alike, so each point carries its calibrated score and Wilson interval).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

import contextlab.eval.bayes_fit as bayes_fit
import contextlab.eval.icl as icl
import contextlab.eval.kv as kv
import contextlab.eval.needle as needle
import contextlab.eval.passkey as passkey
import contextlab.eval.progress as progress
import contextlab.eval.tasks as tasks
import contextlab.eval.vartrack as vartrack
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.base import EvalOutput, open_store
from contextlab.eval.stats import Z95

DEPTHS = [0.0, 25.0, 50.0, 75.0, 100.0]


@dataclass
class Options:
    task: Literal["niah", "kv", "passkey", "vartrack", "icl", "loss"] = opt(
        "passkey", "the evaluation to sweep"
    )
    visible: list[float] = opt(
        [0.125, 0.25, 0.5, 0.75, 1.0],
        "visible context: tokens (>= 1) or fractions of each prompt (< 1; 1.0 = everything)",
    )
    samples: int = opt(256, "target tokens for task=loss")
    shots: int = opt(32, "in-context examples for task=icl")
    length: int = opt(
        0,
        "prompt length in tokens for niah/passkey/vartrack; 0 = the task's longest default length (the "
        "model's context less what the answer needs, so no prompt passes the context)",
    )
    scoring: Literal["likelihood", "generate", "both"] = opt("likelihood", "how prompt tasks are scored")


def _task_samples(adapter, o: Options, data):
    L = [o.length] if o.length else []  # empty: the task's own default lengths, fitted to the context
    if o.task == "niah":
        return _longest(needle.build(adapter, needle.Options(lengths=L, depths=list(DEPTHS)), data), o), 5
    if o.task == "passkey":
        return _longest(passkey.build(adapter, passkey.Options(lengths=L, depths=list(DEPTHS)), data), o), 5
    if o.task == "vartrack":
        return _longest(vartrack.build(adapter, vartrack.Options(lengths=L, samples=8), data), o), 2
    if o.task == "kv":
        return kv.build(adapter, kv.Options(n_examples=10), data), 5
    if o.task == "icl":
        folder = tasks_folder(data)
        test = icl.select_test(icl.read_trec(folder / "test.txt"), icl.Options().n_test, True)
        samples = icl.build_prompts(adapter, icl.read_trec(folder / "train.txt"), test, o.shots, 0)
        return (samples, {"folder": str(folder)}), len(icl.LABELS)
    raise AssertionError(f"task {o.task!r} (the config loader admits only the Options.task values)")


def _longest(built, o: Options):
    """(samples, info) of a task built at its default lengths -> those of the longest length only (the
    whole context less what the answer needs); a given ``--length`` is kept as it is."""
    samples, info = built
    if o.length:
        return samples, info
    top = max(s.cell[-1] for s in samples)  # the length is the last part of every task's cell
    return [s for s in samples if s.cell[-1] == top], {**info, "lengths": [top]}


def tasks_folder(data):
    from pathlib import Path

    if not data or not Path(data).is_dir():
        raise UserError("task icl needs --data the TREC folder (../shared/data/trec_qc)")
    return Path(data)


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    points, gain = [], None
    progress.announce(
        "visible",
        {
            "task": options.task,
            "visible": options.visible,
            "samples": options.samples if options.task == "loss" else None,
            "length": (options.length or adapter.context)
            if options.task in ("niah", "passkey", "vartrack")
            else None,
            "data": data,
        },
    )
    if options.task == "loss":
        store = open_store(data, adapter, "visible (task loss)")
        ks = sorted({int(v) for v in options.visible if v >= 1})
        if not ks:
            raise UserError("task loss needs --visible in tokens (>= 1), e.g. 1,4,16,64,256")
        targets = bayes_fit.sample_targets(store, options.samples, max(ks), 0)
        losses = bayes_fit.last_token_losses(adapter, store, targets, ks)
        for k, row in zip(ks, losses):
            points.append(
                {
                    "visible": k,
                    "loss": float(row.mean()),
                    "stderr": float(row.std(ddof=1) / np.sqrt(len(row))),
                }
            )
        metric, info = "loss", {"store": str(store.path), "hash": store.hash}
        best = min(points, key=lambda p: p[metric])
        gain = bayes_fit.context_gain(losses, ks, [d for d, _ in targets], adapter.context)
    else:
        mode = "both" if options.scoring == "both" else options.scoring
        (samples, info), n_cands = _task_samples(adapter, options, data)
        for v in progress.bar(options.visible, desc=f"visible: {options.task}", unit="point"):
            rows = tasks.score_samples(adapter, samples, mode, visible=None if v == 1.0 else v)
            summ = tasks.summarize(rows, n_cands)["summary"]
            metric, _ = tasks.headline_metric(summ)
            points.append(
                {"visible": v, **summ, "prompt_tokens": float(np.mean([r["prompt_tokens"] for r in rows]))}
            )
        best = max(points, key=lambda p: p[metric])
    res = {
        "summary": {
            "task": options.task,
            "metric": metric,
            "best_visible": best["visible"],
            "best_value": best[metric],
            "value_full_context": points[-1][metric],
            **(
                {}
                if gain is None
                else {"context_gain": gain["gain"], "context_gain_interval95": gain["interval95"]}
            ),
        },
        "points": points,
        **({} if gain is None else {"context_gain": gain}),
    }

    def plot(path):
        from contextlab.eval.plots import lines_png

        return lines_png(
            {adapter.info.id: ([p["visible"] for p in points], [p[metric] for p in points])},
            path,
            xlabel="visible context (tokens, or fraction of the prompt)",
            ylabel=metric,
            title=f"visible-context sweep: {options.task}",
            logx=options.task == "loss",
            bands=_bands(adapter.info.id, points, metric),
        )

    return EvalOutput(res, info, plot=plot)


def _bands(label: str, points: list[dict], metric: str) -> dict | None:
    """95% intervals per point: mean ± 1.96 standard errors for losses, Wilson for accuracies."""
    if metric == "loss":
        band = [(p["loss"] - Z95 * p["stderr"], p["loss"] + Z95 * p["stderr"]) for p in points]
    else:
        band = [p.get(f"{metric}_ci95") for p in points]
    return {label: band} if all(b is not None for b in band) else None
