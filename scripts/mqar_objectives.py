"""GPT, ContextLM and MTP trained on the same MQAR data at the same training FLOPs: recall, paired.

    python scripts/mqar_objectives.py                  # the table of docs/mqar.md (~40 min of one core)
    python scripts/mqar_objectives.py --seed 1 --tag _seed1            # the same with other seeds
    python scripts/mqar_objectives.py --arms gpt,mtp --gpt-steps 300,200 --tag _smoke   # a quick look

Three arms, each the 2-layer GPT of ``recipes/mqar_cpu.toml`` (width 128, RoPE, lr 3e-3) trained
with the full next-token loss over every token of the row, the loss ContextLM and MTP are defined
with (so the recipe's answers-only ``recall`` objective is replaced for every arm):

* ``gpt``: objective ``clm`` (the plain GPT);
* ``contextlm``: objective ``contextlm``, chunk size ``--chunk-size`` (4) and a
  ``--predictor-layers`` (1) block predictor, gated fusion (the model starts as the GPT);
* ``mtp``: objective ``mtp`` with ``--n-future`` (2) heads (head 1 is the GPT's last block).

A curriculum of stages (``--pairs``, default 4 then 16 pairs), each stage of an arm starting
from that arm's model of the stage before (``init.source``), the same seeds (data order,
initialisation) for every arm. Equal compute: for each stage the FLOPs budget is computed once,
as ``--gpt-steps`` steps of the GPT arm (``train.max_flops`` = steps x tokens per step x the
GPT's training FLOPs per token, model + objective as the trainer counts them), and every arm
trains to that same ``train.max_flops``, so an arm with more FLOPs per token (the predictor,
the second head) sees fewer tokens. The stores are the ones of ``scripts/mqar_table.py``
(``--data``/pN and pN_val, written with its seeds when missing). A finished run is kept (delete
it to retrain); an unfinished one resumes.

Scoring, on the held-out sequences of each stage (``pN_val``, the same answers for every arm):
each stage's model on its own pairs (``stage_N``; ``pairs_N`` for the last stage, the final
model) and the final model on the earlier stages' pairs (``pairs_N``), over all answers and
(``..._first``) over the first answer of each sequence only, where a model that does not bind
keys to values cannot use elimination (a value of the prompt not yet answered: H_N / N over all
answers, 0.521 for 4 pairs and 0.211 for 16, but 1/N on the first query; printed with each
row). Per column: MQAR accuracy (argmax over the vocabulary at every answer,
``contextlab.eval.mqar.vocab_hits``) with its Wilson 95% interval, and the paired difference
to the GPT on the same answers (arm - GPT) with a 95% percentile interval from a bootstrap over
sequences (``contextlab.eval.paired_stats.cluster_bootstrap``: the answers of one sequence are
resampled together, they are not independent). Prints the per-checkpoint curves, the table,
the budget table, and last one JSON object ``{"gpt": {"stage_4": acc, "stage_4_first": acc,
"pairs_16": acc, "pairs_16_first": acc, "pairs_4": acc}, "contextlm": {...}, "mtp": {...},
"diff_contextlm_gpt": {"pairs_16": [d, lo, hi], ...}, "diff_mtp_gpt": {...}, "flops": the
budget of each arm over all stages, "flops_by_stage": {...}, "tokens": {arm: {"pairs_N":
tokens}}, "steps": {...}, "minutes": {arm: training minutes}}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from mqar_table import score, stores  # noqa: E402  (a sibling script: the stores and the checkpoint curve)

ARMS = ("gpt", "contextlm", "mtp")
OBJECTIVE = {"gpt": "clm", "contextlm": "contextlm", "mtp": "mtp"}


def arm_sets(arm: str, chunk_size: int, predictor_layers: int, n_future: int) -> list[str]:
    """The ``--set`` overrides that make the recipe one arm (objective and its options)."""
    sets = [f"objective.name={OBJECTIVE[arm]}"]
    if arm == "contextlm":
        sets += [
            f"objective.options.chunk_size={chunk_size}",
            f"objective.options.predictor_layers={predictor_layers}",
        ]
    elif arm == "mtp":
        sets += [f"objective.options.n_future={n_future}"]
    return sets


def run_shape(recipe: str, sets: list[str]) -> tuple[float, int]:
    """(training FLOPs per token, tokens per step) of a run, counted as the trainer counts them:
    the model's ``flops_per_token`` at the run's context plus the objective's extra FLOPs."""
    from contextlab.cli.train import load_run_config
    from contextlab.data.store import TokenStore
    from contextlab.models.flops import flops_per_token
    from contextlab.train.budget import resolve_shape
    from contextlab.train.build import build_model, build_objective

    cfg = resolve_shape(load_run_config(recipe, sets))
    objective = build_objective(cfg)
    objective.bind_tokenizer(TokenStore(cfg.data.store).tokenizer_spec)
    model = build_model(cfg, objective.vocab_size, objective.arch, objective.arch_options())
    context = cfg.train.context
    fpt = flops_per_token(model.config, context) + objective.extra_flops_per_token(model.config, context)
    return fpt, cfg.train.tokens_per_step


def split_budget(fpt: dict[str, float], tokens_per_step: int, gpt_steps: int) -> dict:
    """One stage's equal-FLOPs budget: ``gpt_steps`` steps of the GPT arm, and what every arm gets of it.

    Returns {"max_flops", "steps": {arm: n}, "tokens": {arm: n}, "flops": {arm: used}}; the steps
    are the trainer's own (``contextlab.train.budget.budget_steps``). The budget is raised by
    1e-12 of itself so floating-point rounding never costs the GPT its last step.
    """
    from contextlab.train.budget import budget_steps
    from contextlab.train.config import TrainSection

    max_flops = gpt_steps * tokens_per_step * fpt["gpt"] * (1 + 1e-12)
    t = dataclasses.replace(
        TrainSection(), max_flops=max_flops, max_minutes=0.0, max_steps=0, max_tokens=0,
        tokens_per_step=tokens_per_step,
    )  # fmt: skip
    steps = {arm: budget_steps(t, f) for arm, f in fpt.items()}
    return {
        "max_flops": max_flops,
        "steps": steps,
        "tokens": {arm: s * tokens_per_step for arm, s in steps.items()},
        "flops": {arm: s * tokens_per_step * fpt[arm] for arm, s in steps.items()},
    }


def columns(pairs: list[int]) -> dict[str, tuple[int, int, bool]]:
    """The held-out columns of the table: name -> (pair count of the stage whose model is scored, pair
    count of the held-out sequences, first query only). Per stage N in order: the model trained on N
    pairs on N-pair sequences (``stage_N``; ``pairs_N`` for the last stage, the final model), all its
    answers and the first answer of each sequence only (``..._first``); then the final model on the
    earlier stages' pairs (``pairs_N``)."""
    out = {}
    for n in pairs:
        name = f"pairs_{n}" if n == pairs[-1] else f"stage_{n}"
        out[name], out[f"{name}_first"] = (n, n, False), (n, n, True)
    out.update({f"pairs_{n}": (pairs[-1], n, False) for n in pairs[:-1]})
    return out


def no_binding_accuracy(pairs: int, first: bool = False) -> float:
    """Accuracy of a model that answers with a value of the prompt not yet answered, uniformly, without
    binding keys to values: 1/k for the query with k such values left, so H_N / N over all N answers
    (0.521 for 4 pairs, 0.211 for 16) and 1/N on the first query."""
    return 1.0 / pairs if first else sum(1.0 / k for k in range(1, pairs + 1)) / pairs


def first_answers(clusters: np.ndarray) -> np.ndarray:
    """(n_answers,) bool: the first answer of each sequence (``clusters`` in row order)."""
    c = np.asarray(clusters)
    return np.r_[True, c[1:] != c[:-1]] if len(c) else np.zeros(0, bool)


def final_state(run: Path) -> dict | None:
    """The newest checkpoint's state.json (step, tokens, flops, elapsed), None without one."""
    cks = sorted((run / "checkpoints").glob("step_*")) if (run / "checkpoints").exists() else []
    return json.loads((cks[-1] / "state.json").read_text()) if cks else None


def held_out(val: Path) -> tuple[np.ndarray, int]:
    """(rows (n, T), key count) of a held-out MQAR store."""
    from contextlab.data.mqar import mqar_of_store
    from contextlab.data.store import TokenStore

    store = TokenStore(val)
    rows = np.stack([np.asarray(store.doc(i), np.int64) for i in range(store.n_docs)])
    return rows, mqar_of_store(store).keys


def answer_clusters(rows: np.ndarray, keys: int) -> np.ndarray:
    """(n_answers,) the sequence index of every answer, in the order of ``vocab_hits``."""
    from contextlab.data.mqar import answer_positions

    return np.repeat(np.arange(len(rows)), answer_positions(rows, keys).sum(1))


def hits_of(run: Path, rows: np.ndarray, keys: int) -> np.ndarray:
    """(n_answers,) bool: the final model of ``run`` gets each answer (argmax over the vocabulary)."""
    from contextlab.eval.adapter import load_model
    from contextlab.eval.mqar import vocab_hits

    return vocab_hits(load_model(run), rows, keys)


def paired_diff(a: np.ndarray, b: np.ndarray, clusters: np.ndarray, resamples: int, seed: int) -> dict:
    """Accuracy of ``a`` minus that of ``b`` on the same answers, with a 95% bootstrap interval over
    clusters (sequences): {"diff", "interval95": [lo, hi], "n_clusters", "resamples"}."""
    from contextlab.eval.paired_stats import cluster_bootstrap, per_cluster

    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    sums, counts = per_cluster(d, clusters)
    return cluster_bootstrap(sums, counts, resamples, seed)


def summarise(
    hits: dict[str, dict[str, np.ndarray]], clusters: dict[str, np.ndarray], resamples: int, seed: int
):
    """hits[arm][column] (0/1 per answer; the same answers for every arm) -> (accuracies, diffs).

    accuracies[arm][column] = stats.proportion (accuracy, n, ci95); diffs[arm][column] = the paired
    difference arm - gpt (``paired_diff``) for every arm but the GPT.
    """
    from contextlab.eval import stats

    acc = {arm: {c: stats.proportion(h) for c, h in cols.items()} for arm, cols in hits.items()}
    diffs = {
        arm: {c: paired_diff(h, hits["gpt"][c], clusters[c], resamples, seed) for c, h in cols.items()}
        for arm, cols in hits.items()
        if arm != "gpt"
    }
    return acc, diffs


def table_lines(acc: dict, diffs: dict, labels: dict[str, str]) -> list[str]:
    """The Markdown table: one row per (held-out column, arm): accuracy [Wilson 95%] and, for the arms
    other than the GPT, the paired difference to it [bootstrap 95% over sequences]."""
    lines = [
        "| held-out answers | arm | accuracy [Wilson 95%] | arm − GPT, paired [95%] |",
        "|---|---|---|---|",
    ]
    for c, label in labels.items():
        for arm, cols in acc.items():
            p = cols[c]
            cell = "—"
            if arm in diffs:
                d = diffs[arm][c]
                lo, hi = d["interval95"] or (math.nan, math.nan)
                cell = f"{d['diff']:+.3f} [{lo:+.3f}, {hi:+.3f}]"
            lines.append(
                f"| {label} | {arm} | {p['accuracy']:.3f} [{p['ci95'][0]:.3f}, {p['ci95'][1]:.3f}] | {cell} |"
            )
    return lines


def budget_lines(fpt: dict, steps: dict, tokens: dict, minutes: dict) -> list[str]:
    """The Markdown table of what each arm got of the budget: per stage FLOPs per token, steps and
    tokens (``fpt``, ``steps``, ``tokens``: {arm: {"pairs_N": value}}), and its training minutes."""
    stages = list(next(iter(steps.values())))
    head = " | ".join(f"{s}: FLOPs/token | steps | tokens" for s in stages)
    lines = [f"| arm | {head} | minutes |", "|---" * (2 + 3 * len(stages)) + "|"]
    for arm in steps:
        cells = " | ".join(f"{fpt[arm][s]:,.0f} | {steps[arm][s]:,} | {tokens[arm][s]:,}" for s in stages)
        lines.append(f"| {arm} | {cells} | {minutes[arm]:.1f} |")
    return lines


def result_json(acc: dict, diffs: dict, budgets: dict, tokens: dict, steps: dict, minutes: dict) -> dict:
    """The last line: accuracies, paired differences [d, lo, hi], the budget and what each arm saw."""
    out: dict = {arm: {c: round(p["accuracy"], 4) for c, p in cols.items()} for arm, cols in acc.items()}
    for arm, cols in diffs.items():
        out[f"diff_{arm}_gpt"] = {
            c: [round(d["diff"], 4), *[round(x, 4) for x in (d["interval95"] or (math.nan, math.nan))]]
            for c, d in cols.items()
        }
    out["flops"] = float(f"{sum(budgets.values()):.6g}")
    out["flops_by_stage"] = {s: float(f"{b:.6g}") for s, b in budgets.items()}
    out["tokens"] = tokens
    out["steps"] = steps
    out["minutes"] = minutes
    return out


def train(
    args, arm: str, n: int, train_store: Path, val_store: Path, max_flops: float, prev: Path | None
) -> Path:
    run = Path(args.runs) / f"mqar_obj_{arm}_p{n}{args.tag}"
    sets = stage_sets(args, arm, n, train_store, val_store) + [
        f"train.out_dir={run}",
        f"train.max_flops={max_flops!r}",
        "train.max_minutes=0",
        "train.progress=false",
    ]
    sets += [f"init.source={prev}"] if prev else []
    t0 = time.time()
    cmd = [sys.executable, "-m", "contextlab", "train", args.recipe, *[a for s in sets for a in ("--set", s)]]
    subprocess.run(cmd, check=True, cwd=ROOT)
    print(f"trained {run} in {(time.time() - t0) / 60:.1f} min", flush=True)
    return run


def stage_sets(args, arm: str, n: int, train_store: Path, val_store: Path) -> list[str]:
    """The overrides of one arm's run at n pairs (no budget, no output folder)."""
    sets = [
        f"data.store={train_store}",
        f"data.val_store={val_store}",
        f"train.rows_per_step={max(1, args.answers // n)}",
        f"train.threads={args.threads}",
        f"train.seed={args.seed}",
    ]
    return sets + arm_sets(arm, args.chunk_size, args.predictor_layers, args.n_future) + list(args.set)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--arms",
        default=",".join(ARMS),
        help="arms to train, comma-separated, of gpt, contextlm, mtp (gpt is always trained: it is the "
        "reference of the budget and of the paired differences); default all three",
    )
    p.add_argument(
        "--pairs",
        default="4,16",
        help="the curriculum's pair counts, comma-separated; each stage starts from the same arm's model "
        "of the stage before (default 4,16)",
    )
    p.add_argument(
        "--gpt-steps",
        default="1800,1200",
        help="the FLOPs budget of each stage in steps of the GPT arm (one per pair count, or one for all): "
        "train.max_flops = steps x tokens per step x the GPT's FLOPs per token (default 1800,1200)",
    )
    p.add_argument("--chunk-size", type=int, default=4, help="ContextLM chunk size w in tokens (default 4)")
    p.add_argument(
        "--predictor-layers", type=int, default=1, help="ContextLM context-predictor blocks (default 1)"
    )
    p.add_argument("--n-future", type=int, default=2, help="MTP heads: head k predicts token t+k (default 2)")
    p.add_argument(
        "--recipe", default=str(ROOT / "recipes/mqar_cpu.toml"), help="the base recipe of every arm"
    )
    p.add_argument("--data", default=str(ROOT / "runs/data/mqar"), help="folder of the stores pN and pN_val")
    p.add_argument(
        "--runs", default=str(ROOT / "runs"), help="folder of the runs (named mqar_obj_<arm>_pN<tag>)"
    )
    p.add_argument("--tag", default="", help="suffix of the run names")
    p.add_argument(
        "--answers",
        type=int,
        default=1024,
        help="answers per step: rows per step = this / pairs, as scripts/mqar_table.py (default 1024)",
    )
    p.add_argument(
        "--docs", type=int, default=100_000, help="training sequences of a store written when missing"
    )
    p.add_argument(
        "--val-docs", type=int, default=256, help="held-out sequences of a store written when missing"
    )
    p.add_argument("--threads", type=int, default=1, help="train.threads of every run (default 1)")
    p.add_argument(
        "--seed", type=int, default=0, help="train.seed of every run: data order and init (default 0)"
    )
    p.add_argument(
        "--resamples", type=int, default=10_000, help="bootstrap resamples of the paired intervals"
    )
    p.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the bootstrap")
    p.add_argument(
        "--set", action="append", default=[], help="extra override of every run, e.g. optim.lr=3e-3"
    )
    return p


def main() -> None:
    args = parser().parse_args()
    arms = [a for a in ARMS if a == "gpt" or a in args.arms.split(",")]
    unknown = set(args.arms.split(",")) - set(ARMS)
    if unknown:
        raise SystemExit(f"unknown arms {sorted(unknown)}; choose of {', '.join(ARMS)}")
    pairs = [int(x) for x in args.pairs.split(",")]
    gpt_steps = [int(x) for x in args.gpt_steps.split(",")]
    gpt_steps = gpt_steps * len(pairs) if len(gpt_steps) == 1 else gpt_steps
    if len(gpt_steps) != len(pairs):
        raise SystemExit("--gpt-steps needs one value, or one per pair count")

    budgets, runs, vals, minutes = {}, {}, {}, {}
    fpt, tokens, steps = ({a: {} for a in arms} for _ in range(3))
    prev: dict[str, Path | None] = {a: None for a in arms}
    for n, s in zip(pairs, gpt_steps, strict=True):
        train_store, val_store = stores(Path(args.data), n, args.docs, args.val_docs, [])
        vals[n] = val_store
        shape = {a: run_shape(args.recipe, stage_sets(args, a, n, train_store, val_store)) for a in arms}
        tps = shape["gpt"][1]
        split = split_budget({a: f for a, (f, _) in shape.items()}, tps, s)
        budgets[f"pairs_{n}"] = split["max_flops"]
        print(
            f"\n{n} pairs: budget {split['max_flops']:.4g} FLOPs per arm ({s} GPT steps of {tps:,} tokens); "
            + ", ".join(f"{a} {shape[a][0]:,.0f} FLOPs/token -> {split['steps'][a]} steps" for a in arms),
            flush=True,
        )
        for a in arms:
            run = Path(args.runs) / f"mqar_obj_{a}_p{n}{args.tag}"
            state = final_state(run)
            if state is None or state["step"] < split["steps"][a]:
                run = train(args, a, n, train_store, val_store, split["max_flops"], prev[a])
                state = final_state(run)
            if state["step"] != split["steps"][a] or state["flops"] > split["max_flops"]:
                raise SystemExit(
                    f"{run} stopped at step {state['step']} after {state['flops']:.4g} FLOPs; the budget "
                    f"gives {split['steps'][a]} steps and {split['max_flops']:.4g} FLOPs"
                )
            runs[a, n], prev[a] = run, run
            fpt[a][f"pairs_{n}"] = shape[a][0]
            tokens[a][f"pairs_{n}"] = int(state["tokens"])
            steps[a][f"pairs_{n}"] = int(state["step"])
            minutes[a] = round(minutes.get(a, 0.0) + state["elapsed"] / 60, 2)

    print("\nHeld-out accuracy of every checkpoint (argmax over the vocabulary at every answer):")
    for a in arms:
        for n in pairs:
            for r in score(runs[a, n], vals[n]):
                print(
                    f"  {a:9s} {n:3d} pairs  step {r['step']:5d}  {r['tokens'] or 0:>10,} tokens  "
                    f"{r['acc']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]",
                    flush=True,
                )

    data = {n: held_out(vals[n]) for n in pairs}
    every = {n: answer_clusters(*data[n]) for n in pairs}
    raw = {(a, m, n): hits_of(runs[a, m], *data[n]) for a in arms for (m, n, _) in columns(pairs).values()}
    hits, clusters, labels = {a: {} for a in arms}, {}, {}
    for c, (model, test, first) in columns(pairs).items():
        keep = first_answers(every[test]) if first else np.ones(len(every[test]), bool)
        clusters[c] = every[test][keep]
        for a in arms:
            hits[a][c] = raw[a, model, test][keep]
        which = "final model" if model == pairs[-1] else f"after the {model}-pair stage"
        labels[c] = (
            f"{test} pairs, {which}, {'first query of each sequence' if first else 'all answers'} "
            f"({keep.sum():,}; no binding: {no_binding_accuracy(test, first):.3f})"
        )
    acc, diffs = summarise(hits, clusters, args.resamples, args.bootstrap_seed)
    print(
        f"\nHeld-out accuracy ({' -> '.join(map(str, pairs))} pairs, equal FLOPs per stage); differences "
        "paired on the same answers, 95% bootstrap over sequences:\n"
    )
    print("\n".join(table_lines(acc, diffs, labels)))
    print("\nWhat each arm got of the budget:\n")
    print("\n".join(budget_lines(fpt, steps, tokens, minutes)))
    print(json.dumps(result_json(acc, diffs, budgets, tokens, steps, minutes)))


if __name__ == "__main__":
    main()
