"""Visible-context sweep: any evaluation as a function of how much recent context the model sees.

The optimal-visible-context analysis of the intrinsic-entropy seed (Appendix A): keep the
task fixed and let the model see only the k most recent tokens of each prompt (k > 1 is
tokens, k < 1 that fraction of the prompt, k = 1 all of it). Accuracy that first rises and
then falls with k is a model that gets distracted by far context.

For the loss, the task ``loss`` is the last-token loss with k visible tokens (the protocol
of ``bayes_fit``), so the same targets are scored at every k. Its full length is the
model's context, as bayes-fit's longest default l: k < 1 is that fraction of it (rounded
up, as the prompt tasks round), k = 1 all of it, k > 1 tokens. One visible token is
always measured too, the baseline of the context gain (one visible token minus the largest
k, paired per target, as bayes-fit reports it), so ``value_full_context`` is the loss
with the whole context and the gain is there whatever the list. Trade-off: a lone
visible token cannot be asked for by itself (1 means everything, as for the prompt tasks)
but is never missing, and the settings line lists the token counts that are run.

The prompts are built once; only their left end is cut, so every point of the curve asks
the same questions (the balanced candidate sets of ``tasks``; their control prompts are cut
alike, so each point carries its calibrated score and Wilson interval).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

import contextlab.eval.bayes_fit as bayes_fit
import contextlab.eval.heldout as heldout
import contextlab.eval.icl as icl
import contextlab.eval.kv as kv
import contextlab.eval.needle as needle
import contextlab.eval.passkey as passkey
import contextlab.eval.progress as progress
import contextlab.eval.scoring as scoring
import contextlab.eval.tasks as tasks
import contextlab.eval.vartrack as vartrack
from contextlab.config import opt
from contextlab.corpus import books_dir
from contextlab.errors import UserError
from contextlab.eval.base import TREC_DATA, EvalOutput, open_store
from contextlab.eval.stats import Z95

DEPTHS = [0.0, 25.0, 50.0, 75.0, 100.0]


DEFAULT_VISIBLE = [0.125, 0.25, 0.5, 0.75, 1.0]


@dataclass
class Options:
    task: Literal["niah", "kv", "passkey", "vartrack", "icl", "loss"] = opt(
        "passkey", "the evaluation to sweep"
    )
    visible: list[float] = opt(
        list(DEFAULT_VISIBLE),
        "visible context: tokens (> 1), fractions (< 1) or 1 = everything, of each prompt (task=loss: of "
        "the model's context, and one visible token is measured too, the context gain's baseline; with "
        "the default, every power of 2 below the context as well, where the loss falls most)",
    )
    samples: int = opt(256, "target tokens for task=loss")
    shots: int = opt(
        0,
        "in-context examples for task=icl; 0 = the most of icl's default counts (2, 8, 32) whose prompts "
        "fit the model's context",
    )
    length: int = opt(
        0,
        "prompt length in tokens for niah/passkey/vartrack; 0 = the task's longest default length (the "
        "model's context less what the answer needs, so no prompt passes the context)",
    )
    scoring: Literal["likelihood", "generate", "both"] = opt("likelihood", "how prompt tasks are scored")
    split: Literal["all", "run"] = opt("all", "task=loss: " + heldout.SPLIT_HELP)
    heldout_of: str = heldout.of_option()


def _task_samples(adapter, o: Options, data):
    L = [o.length] if o.length else []  # empty: the task's own default lengths, fitted to the context
    if o.task == "niah":  # the haystack eval niah reads by default: the books shipped with contextlab
        hay = data or str(books_dir())
        return _longest(needle.build(adapter, needle.Options(lengths=L, depths=list(DEPTHS)), hay), o), 5
    if o.task == "passkey":
        return _longest(passkey.build(adapter, passkey.Options(lengths=L, depths=list(DEPTHS)), data), o), 5
    if o.task == "vartrack":
        return _longest(vartrack.build(adapter, vartrack.Options(lengths=L, samples=8), data), o), 2
    if o.task == "kv":
        return kv.build(adapter, kv.Options(n_examples=10), data), 5
    if o.task == "icl":
        folder = tasks_folder(data)
        test = icl.select_test(icl.read_trec(folder / "test.txt"), icl.Options().n_test, True)
        train = icl.read_trec(folder / "train.txt")
        shots, samples = _icl_shots(adapter, train, test, o.shots)
        tasks.check_longest(
            adapter, samples, "likelihood", f"the longest icl prompt ({shots} shots)", "lower --shots"
        )
        record = icl.data_record(folder, folder / "train.txt", folder / "test.txt")
        return (samples, {**record, "shots": shots}), len(icl.LABELS)
    raise AssertionError(f"task {o.task!r} (the config loader admits only the Options.task values)")


def _icl_shots(adapter, train, test, given: int) -> tuple[int, list]:
    """(the shots, their prompts): ``given``, or without it the most of icl's default counts whose
    prompts fit the model's context (32 shots ran a 256-token model on 656 tokens by default)."""
    if given:
        return given, icl.build_prompts(adapter, train, test, given, 0)
    for k in sorted((k for k in icl.DEFAULT_SHOTS if k), reverse=True):
        samples = icl.build_prompts(adapter, train, test, k, 0)
        if max(len(s.prompt) for s in samples) + 4 <= adapter.context:
            return k, samples
    raise UserError(
        f"even {min(k for k in icl.DEFAULT_SHOTS if k)} shots make icl prompts longer than the model's "
        f"context of {adapter.context:,} tokens; give --shots to run past it, or choose another task"
    )


def candidates_per_sample(samples, default: int) -> int:
    """The candidates every sample was scored against (the chance level's 1/k), read from the samples
    built: a task fitted to a short context has fewer (kv with 3 keys per set, not 5); ``default`` when
    samples carry none or differ."""
    counts = {len(s.candidates) for s in samples if s.candidates}
    return counts.pop() if len(counts) == 1 else default


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
        raise UserError(f"task icl needs --data the TREC folder, {TREC_DATA}")
    return Path(data)


def loss_lengths(visible: list[float], full: int) -> list[int]:
    """The visible tokens task=loss runs: each value as tokens (> 1) or as a fraction of ``full`` (< 1,
    rounded up; 1 = ``full``), with one token added (the context gain's baseline), sorted, once each."""
    if any(v <= 0 for v in visible):
        raise UserError(
            f"--visible {','.join(f'{v:g}' for v in visible)} has a value <= 0; give tokens (> 1), "
            "fractions (< 1) or 1 for the whole context"
        )
    return sorted({1, *(int(v) if v > 1 else max(1, math.ceil(v * full)) for v in visible)})


def _loss_points(adapter, options: Options, data: str | None, ks: list[int]):
    """(points, context gain, data record) of task=loss at the visible lengths ``ks``."""
    store = open_store(data, adapter, "visible (task loss)", split=options.split)
    view, held = heldout.documents(store, adapter.info.path, options.split, of=options.heldout_of)
    longest = int(view.lengths().max()) if len(view) else 0
    if longest <= max(ks):
        raise UserError(
            f"visible (task loss) needs documents longer than its longest visible length ({max(ks):,} "
            "tokens; 1 and the fractions of --visible count from the model's context of "
            f"{adapter.context:,}) but the longest in {store.path} has {longest:,}; give --visible "
            f"in tokens below {longest:,}, or a store of longer documents"
        )
    adapter.check_length(max(ks), f"visible context {max(ks):,}", fix="lower the largest --visible")
    targets = bayes_fit.sample_targets(view, options.samples, max(ks), 0)
    losses = bayes_fit.last_token_losses(adapter, view, targets, ks)  # (len(ks), N)
    points = [
        {"visible": k, "loss": float(row.mean()), "stderr": float(row.std(ddof=1) / np.sqrt(len(row)))}
        for k, row in zip(ks, losses)
    ]
    gain = bayes_fit.context_gain(losses, ks, [d for d, _ in targets], adapter.context)
    return points, gain, {"store": str(store.path), "hash": store.hash, **held}


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    points, gain = [], None
    ks = loss_lengths(options.visible, adapter.context) if options.task == "loss" else None
    if ks is not None and options.visible == DEFAULT_VISIBLE:  # where the loss falls most: 2 .. 16
        ks = sorted(
            {
                *ks,
                *(1 << i for i in range(1, max(1, adapter.context).bit_length()) if 1 << i < adapter.context),
            }
        )
    if ks is None and options.split == "run":
        raise UserError(
            f"--split run reads the part of a token store a run held out, for --task loss; --task "
            f"{options.task} reads its own prompts: leave --split out"
        )
    progress.announce(
        "visible",
        {
            "task": options.task,
            "visible": options.visible if ks is None else None,
            "visible tokens": ks,
            "of context": adapter.context if ks is not None else None,
            "split": "run (what the run held out)" if ks is not None and options.split == "run" else None,
            "samples": options.samples if options.task == "loss" else None,
            "length": (options.length or adapter.context)
            if options.task in ("niah", "passkey", "vartrack")
            else None,
            "data": data,
        },
    )
    if ks is not None:
        points, gain, info = _loss_points(adapter, options, data, ks)
        metric = "loss"
        best = min(points, key=lambda p: p[metric])
    else:
        mode = "both" if options.scoring == "both" else options.scoring
        (samples, info), n_cands = _task_samples(adapter, options, data)
        n_cands = candidates_per_sample(samples, n_cands)
        for v in progress.bar(options.visible, desc=f"visible: {options.task}", unit="point"):
            rows = scoring.score_samples(adapter, samples, mode, visible=None if v == 1.0 else v)
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
            **({"best_value_ci95": best[f"{metric}_ci95"]} if f"{metric}_ci95" in best else {}),
            "value_full_context": points[-1][metric],
            **(
                {"value_full_context_ci95": points[-1][f"{metric}_ci95"], "n": points[-1]["n"]}
                if f"{metric}_ci95" in points[-1]
                else {}
            ),
            **({"chance": points[-1]["chance"]} if "chance" in points[-1] else {}),
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
        from contextlab.result_plots import lines_png

        return lines_png(
            {adapter.info.id: ([p["visible"] for p in points], [p[metric] for p in points])},
            path,
            xlabel="visible context (tokens)"
            if ks
            else "visible context (tokens, or fraction of the prompt)",
            ylabel="loss (nats/token)" if options.task == "loss" else f"{metric} (fraction correct)",
            title=f"visible-context sweep: {options.task}",
            logx=options.task == "loss",
            bands=_bands(adapter.info.id, points, metric),
            band_label="95% interval (mean ± 1.96 standard errors)"
            if options.task == "loss"
            else "95% interval (Wilson)",
        )

    return EvalOutput(res, info, plot=plot)


def _bands(label: str, points: list[dict], metric: str) -> dict | None:
    """95% intervals per point: mean ± 1.96 standard errors for losses, Wilson for accuracies."""
    if metric == "loss":
        band = [(p["loss"] - Z95 * p["stderr"], p["loss"] + Z95 * p["stderr"]) for p in points]
    else:
        band = [p.get(f"{metric}_ci95") for p in points]
    return {label: band} if all(b is not None for b in band) else None
