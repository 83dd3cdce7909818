"""Paired comparisons of two models' evaluation results (``contextlab compare RUN_A RUN_B``).

Reads the result files both runs already have (``RUN/eval/NAME.json`` and the arrays saved
beside them) and computes A - B on the *same* windows and samples, so the noise of which
documents or prompts were drawn cancels and only the models' difference is left:

* contextwise: per 2^i position bucket and for the best-context loss, the mean over pieces
  of loss_A - loss_B (exactly the difference of the two reported numbers), with a 95%
  cluster t interval over documents (``eval.paired_stats.cluster_t``; the docstring there says
  why a t interval and not a bootstrap);
* ppl: the loss per token A - B over the same tokens, documents as clusters, and each
  document's mean difference;
* bayes-fit: per visible length the loss A - B of the same target tokens (documents as
  clusters), and the fitted C0 and gamma differences with a bootstrap over documents
  (compare/fit.py);
* infill: per span kind and prompt mode pair, the true middle's loss and exact match A - B,
  files as clusters, and the left-to-right loss of the same files (compare/infill.py);
* niah, kv, passkey, vartrack: per cell and overall, the accuracy difference with a seeded
  bootstrap interval over balanced candidate sets and McNemar's discordant counts;
* icl: per number of shots, the accuracy difference of each set of in-context examples (the
  SPLICE paper's TREC delta) with a bootstrap interval over sets, and their histogram.

Which two results pair, and the one line that says why not when they do not, is
``compare/pairing.py``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import contextlab.eval.paired_stats as cs
from contextlab.compare.fit import bayes_fit
from contextlab.compare.infill import infill
from contextlab.compare.pairing import PATHS, TASKS, Side, check_pairing, eval_folder, labels, side
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.results import code_version, jsonable
from contextlab.io import atomic_write_text
from contextlab.outputs import refuse_unwritable

FORMAT = "contextlab-compare"
CELL_PARTS = {
    "niah": ["depth", "length"],
    "passkey": ["depth", "length"],
    "kv": ["position"],
    "vartrack": ["length"],
}
METRIC_NAMES = {"likelihood_correct": "likelihood", "contains": "substring-match", "exact": "exact-match"}


@dataclass
class Options:
    resamples: int = opt(2000, "bootstrap resamples for the accuracy intervals (retrieval tasks, icl)")
    seed: int = opt(0, "seed of the bootstrap (the same files and seed give the same intervals)")


# ---------------------------------------------------------------------------- one evaluation each


def contextwise(a: Side, b: Side, o: Options) -> dict:
    keys = ("pieces", "piece_bucket_loss", "piece_best_loss")
    xa, xb = a.arrays("contextwise", keys), b.arrays("contextwise", keys)
    docs = xa["pieces"][:, 0]
    bk_a = a.doc["results"]["buckets"]

    def paired(d: np.ndarray) -> dict:
        return cs.cluster_t(*cs.per_cluster(d, docs))

    per_bucket = [
        {"from": bk["from"], "to": bk["to"], "a": float(ya.mean()), "b": float(yb.mean()), **paired(ya - yb)}
        for bk, ya, yb in zip(bk_a, xa["piece_bucket_loss"].T, xb["piece_bucket_loss"].T)
    ]
    best = {
        "a": float(xa["piece_best_loss"].mean()),
        "b": float(xb["piece_best_loss"].mean()),
        "window_a": [a.doc["results"]["best_context"][k] for k in ("from", "to")],
        "window_b": [b.doc["results"]["best_context"][k] for k in ("from", "to")],
        **paired(xa["piece_best_loss"] - xb["piece_best_loss"]),
    }
    n_docs = best["n_clusters"]
    windows = (
        ""
        if best["window_a"] == best["window_b"]
        else (
            f" at each model's own best-context positions (A {best['window_a'][0]}-{best['window_a'][1]}, "
            f"B {best['window_b'][0]}-{best['window_b'][1]}: other targets)"
        )
    )
    line = (
        f"contextwise best-context loss A - B = {cs.interval_text(best)} over {n_docs} documents "
        f"({len(docs)} pieces; A {best['a']:.3f}, B {best['b']:.3f}){windows}"
    )
    results = {"unit": "piece", "cluster": "document", "n_pieces": len(docs), "n_documents": n_docs}
    have = [set(s.doc.get("arrays") or {}) for s in (a, b)]
    lines = [line]
    if all("piece_one_token_loss" in h for h in have):  # the context gain (1 vs all visible), A - B, paired
        one = ("piece_one_token_loss",)
        ga = a.arrays("contextwise", one)[one[0]] - xa["piece_best_loss"]
        gb = b.arrays("contextwise", one)[one[0]] - xb["piece_best_loss"]
        results["context_gain"] = {"a": float(ga.mean()), "b": float(gb.mean()), **paired(ga - gb)}
        lines.append(
            f"contextwise context gain A - B = {cs.interval_text(results['context_gain'])} over {n_docs} "
            f"documents (A {ga.mean():.3f}, B {gb.mean():.3f})"
        )
    notes = []
    if best["window_a"] != best["window_b"]:  # models of different training contexts
        longer = "A" if best["window_a"][1] > best["window_b"][1] else "B"
        notes.append(
            f"best-context windows differ (A {best['window_a']}, B {best['window_b']}): each model's loss "
            "over the last tenth of its own training context, so the difference is of other targets (the "
            "longer model's far positions against the shorter one's), and so is the context gain's; "
            f"to read both on the same targets, evaluate the shorter model with --train-context "
            f"{max(best['window_a'][1], best['window_b'][1])} (model {longer}'s) and compare again: the "
            "per-bucket differences above are of the same positions either way"
        )
    return {
        "lines": lines,
        "results": {**results, "best_context": best, "buckets": per_bucket},
        "notes": notes,
    }


def ppl(a: Side, b: Side, o: Options) -> dict:
    keys = ("token_losses", "doc_offsets")
    xa, xb = a.arrays("ppl", keys), b.arrays("ppl", keys)
    offsets = xa["doc_offsets"]
    diff = xa["token_losses"].astype(np.float64) - xb["token_losses"].astype(np.float64)  # (tokens,)
    counts = np.diff(offsets).astype(np.float64)  # (scored sequences,)
    sums = np.add.reduceat(diff, offsets[:-1]) if len(diff) else np.zeros(0)
    ids = a.optional("doc_ids")  # the store's document of each (older results: none recorded)
    if ids is not None and len(ids) == len(counts):  # pieces of one document are one cluster
        _, cluster = np.unique(ids, return_inverse=True)
        sums, counts = np.bincount(cluster, sums), np.bincount(cluster, counts)
    total = cs.cluster_t(sums, counts)
    sa, sb = a.doc["results"]["summary"], b.doc["results"]["summary"]
    total.update(a=sa["loss"], b=sb["loss"], perplexity_a=sa["perplexity"], perplexity_b=sb["perplexity"])
    line = (
        f"ppl loss A - B = {cs.interval_text(total)} nats/token over {len(counts)} documents "
        f"({len(diff):,} tokens; perplexity A {sa['perplexity']:.2f}, B {sb['perplexity']:.2f})"
    )
    per_doc = {"diff": (sums / counts).tolist(), "tokens": counts.astype(int).tolist()}
    return {
        "lines": [line],
        "results": {"unit": "token", "cluster": "document", "loss": total, "per_document": per_doc},
    }


def task(name: str):
    """The comparison of one retrieval task (niah, kv, passkey, vartrack)."""

    def run(a: Side, b: Side, o: Options) -> dict:
        metric = _common_metric(name, a, b)
        keys = (f"correct_{metric}", "cell", "group")
        xa, xb = a.arrays(name, keys), b.arrays(name, keys)
        ca, cb, group, cell = xa[keys[0]], xb[keys[0]], xa["group"], xa["cell"]
        unit, cluster = _units(name, a, b, group)
        overall = _accuracy_diff(ca, cb, unit, o)
        by_cell = []
        for c in np.unique(cell, axis=0):
            m = (cell == c).all(1)
            by_cell.append({"cell": c.tolist(), **_accuracy_diff(ca[m], cb[m], unit[m], o)})
        mc = overall["mcnemar"]
        line = (
            f"{name} {METRIC_NAMES[metric]} accuracy A - B = {cs.interval_text(overall, 2)} over {len(ca)} "
            f"samples in {overall['n_clusters']} {cluster}s (A {overall['a']:.2f}, B {overall['b']:.2f}; "
            f"only A right {mc['only_a_right']}, only B right {mc['only_b_right']}, "
            f"McNemar p={mc['p_value']:.2g})"
        )
        results = {"metric": metric, "cluster": cluster, "cell_parts": CELL_PARTS[name]}
        notes = []
        bootstrapped = overall["interval_method"] == "cluster bootstrap"
        sums, _ = cs.per_cluster(ca.astype(np.float64) - cb, group)
        if len(sums) and not np.any(sums):
            results["no_spread"] = True
            notes.append(
                f"{name}: every candidate set scores alike for A and B (the same number right in each set: "
                "in a balanced set a model blind to the context gets exactly 1 of its k), so a resampling of "
                "sets has no spread and the interval is Newcombe's of paired proportions over the samples; "
                "the two retrieve equally on these sets, which is what two models that do not retrieve at "
                "all also give"
            )
        elif not bootstrapped:
            notes.append(
                f"{name}: every {cluster} differs by the same amount between A and B (in a balanced set a "
                "model blind to the context gets exactly 1 of its k), so a resampling of them has no spread: "
                "the interval is Newcombe's of paired proportions over the samples, which keeps each "
                "model's own uncertainty"
            )
        if bootstrapped and overall["n_clusters"] < FEW_CLUSTERS:  # a bootstrap over a handful is too narrow
            results["few_clusters"] = True
            notes.append(
                f"{name}: only {overall['n_clusters']} {cluster}s, and a bootstrap over fewer than "
                f"{FEW_CLUSTERS} is too narrow (a few discordant prompts can put 0 outside it); evaluate "
                f"both with more samples ({FEW_FLAG[name]})"
            )
        out = {"lines": [line], "results": {**results, "overall": overall, "by_cell": by_cell}}
        return {**out, "notes": notes} if notes else out

    return run


FEW_CLUSTERS = 10  # fewer clusters than this: the bootstrap interval is said to be too narrow
FEW_FLAG = {"niah": "--samples", "passkey": "--samples", "vartrack": "--samples", "kv": "--n-examples"}
UNIT_NAMES = {"kv": "example"}  # the unit a task's samples share beyond a candidate set


def _units(name: str, a: Side, b: Side, group: np.ndarray) -> tuple[np.ndarray, str]:
    """(the cluster of each sample pair, its name): the samples' unit where both results record the same
    (a kv example asked at every position), else the candidate set (results from before units)."""
    ua, ub = a.optional("unit"), b.optional("unit")
    if ua is None or ub is None or ua.shape != group.shape or not np.array_equal(ua, ub):
        return group, "candidate set"
    if np.array_equal(ua, group):
        return group, "candidate set"
    return ua, UNIT_NAMES.get(name, "unit")


def _common_metric(name: str, a: Side, b: Side) -> str:
    have = [set(s.doc.get("arrays") or {}) for s in (a, b)]
    for m in ("likelihood_correct", "contains", "exact"):
        if all(f"correct_{m}" in h for h in have):
            return m
    raise UserError(
        f"{name}: {a.label} and {b.label} share no scored accuracy (per-sample arrays correct_*); rerun "
        f"`contextlab eval {name}` on both with the same --scoring"
    )


def _accuracy_diff(ca: np.ndarray, cb: np.ndarray, group: np.ndarray, o: Options) -> dict:
    """A - B with the cluster bootstrap's interval, or, where every cluster differs by the same amount
    (the bootstrap then has no width: +0.80 [+0.80, +0.80] of a copier against a blind model on balanced
    sets), Newcombe's interval of paired proportions over the samples (``interval_method`` says which)."""
    sums, counts = cs.per_cluster(ca.astype(np.float64) - cb, group)
    out = cs.cluster_bootstrap(sums, counts, o.resamples, o.seed)
    table = cs.mcnemar(ca, cb)
    out["interval_method"] = "cluster bootstrap"
    means = sums / np.maximum(counts, 1)
    if out["interval95"] is not None and len(means) and np.ptp(means) == 0:
        out["interval95"] = cs.newcombe_paired(table)
        out["interval_method"] = "Newcombe's paired score interval (no spread over clusters to resample)"
    return {**out, "a": float(ca.mean()), "b": float(cb.mean()), "n": len(ca), "mcnemar": table}


def icl(a: Side, b: Side, o: Options) -> dict:
    """Accuracy A - B per number of shots. Every example set asks the same test questions, so where both
    results keep their per-sample arrays the interval resamples the sets and the questions (a crossed
    bootstrap: which questions were drawn moves both models' accuracy); results from before those arrays
    pair the per-set accuracies, over the sets only (said in a note)."""
    rows_a = {r["shots"]: r for r in a.doc["results"]["by_shots"]}
    rows_b = {r["shots"]: r for r in b.doc["results"]["by_shots"]}
    shots = sorted(set(rows_a) & set(rows_b))
    if not shots:
        raise UserError(
            f"icl: {a.label} and {b.label} have no number of shots in common; use the same --shots"
        )
    grids = {
        m: (_icl_samples(a, m), _icl_samples(b, m)) for m in ("likelihood_correct", "calibrated_correct")
    }
    per = []
    for k in shots:
        p = _icl_shots(k, "accuracy_per_set", rows_a[k], rows_b[k], grids["likelihood_correct"], o)
        if (
            k
            and rows_a[k].get("calibrated_accuracy_per_set")
            and rows_b[k].get("calibrated_accuracy_per_set")
        ):
            p["calibrated"] = _icl_shots(
                k, "calibrated_accuracy_per_set", rows_a[k], rows_b[k], grids["calibrated_correct"], o
            )
        per.append(p)
    lines = []
    for p in per:
        lines.append(
            f"icl accuracy A - B at {p['shots']} shots = {cs.interval_text(p, 3)} over {_over(p)} "
            f"(TREC delta; A {p['a']:.3f}, B {p['b']:.3f})"
        )
        if "calibrated" in p:  # the label the shots raise most, where both sides scored it
            c = p["calibrated"]
            lines.append(
                f"icl calibrated accuracy A - B at {p['shots']} shots = {cs.interval_text(c, 3)} "
                f"(A {c['a']:.3f}, B {c['b']:.3f})"
            )
    notes = []
    if set(rows_a) ^ set(rows_b):
        notes.append(f"shots only one side scored (prompts too long): {sorted(set(rows_a) ^ set(rows_b))}")
    few = [p["shots"] for p in per if p["shots"] and len(p["per_set"]) < 10]  # zero shots: one set always
    if few:
        notes.append(
            f"icl: fewer than 10 example sets at {', '.join(map(str, few))} shots: a percentile bootstrap "
            "over so few sets is too narrow; raise --seeds"
        )
    if any(p["cluster"] == "example set" for p in per):
        notes.append(
            "icl: a result without per-sample arrays (an older icl): its interval resamples the example sets "
            "only, not the test questions they share, so it is too narrow; rerun `contextlab eval icl` on "
            "both"
        )
    cluster = (
        "example set and test question" if all(p["cluster"] != "example set" for p in per) else "example set"
    )
    return {"lines": lines, "results": {"cluster": cluster, "by_shots": per}, "notes": notes}


def _over(p: dict) -> str:
    if p["cluster"] == "example set":
        return f"{len(p['per_set'])} example sets"
    return f"{len(p['per_set'])} example sets x {p['n_questions']} test questions"


def _icl_samples(s: Side, metric: str) -> tuple[np.ndarray, ...] | None:
    """(shots, example set, test question, correct) per sample, or None for a result from before icl
    saved them."""
    got = [s.optional(k) for k in (f"correct_{metric}", "cell", "group")]
    if any(x is None for x in got):
        return None
    correct, cell, question = got
    return cell[:, 0].astype(np.int64), cell[:, 1].astype(np.int64), question.astype(np.int64), correct


def _icl_grid(k: int, ga: tuple, gb: tuple) -> tuple[np.ndarray, np.ndarray]:
    """A's and B's outcomes at ``k`` shots as (example sets, questions) grids, over the sets both scored
    whole (a set whose prompts were too long for a model was not scored)."""
    cells = []
    for shots, sets, questions, correct in (ga, gb):
        m = shots == k
        cells.append({(int(x), int(q)): float(c) for x, q, c in zip(sets[m], questions[m], correct[m])})
    ca, cb = cells
    qs = sorted({q for _, q in ca} & {q for _, q in cb})
    common = {x for x, _ in ca} & {x for x, _ in cb}
    sets = sorted(x for x in common if all((x, q) in ca and (x, q) in cb for q in qs))
    return tuple(  # type: ignore[return-value]
        np.asarray([[c[x, q] for q in qs] for x in sets], np.float64).reshape(len(sets), len(qs))
        for c in (ca, cb)
    )


def _icl_shots(k: int, key: str, ra: dict, rb: dict, grid, o: Options) -> dict:
    """A - B at ``k`` shots with its interval: over the grid of sets x questions where both sides saved
    their samples (``grid``), else over the per-set accuracies ``key`` of the two results' rows."""
    ga, gb = grid
    if ga is not None and gb is not None:
        A, B = _icl_grid(k, ga, gb)
        if A.size:
            d = A - B
            return {
                "shots": k,
                "a": float(A.mean()),
                "b": float(B.mean()),
                "per_set": d.mean(1).tolist(),
                "n_questions": int(d.shape[1]),
                "cluster": "example set and test question",
                **cs.crossed_bootstrap(d, o.resamples, o.seed),
            }
    pa, pb = ra[key], rb[key]
    n = min(len(pa), len(pb))
    d = np.asarray(pa[:n], np.float64) - np.asarray(pb[:n], np.float64)  # (sets,)
    boot = cs.cluster_bootstrap(d, np.ones(n), o.resamples, o.seed)
    return {
        "shots": k,
        "a": float(np.mean(pa[:n])),
        "b": float(np.mean(pb[:n])),
        "per_set": d.tolist(),
        "cluster": "example set",
        **boot,
    }


COMPARERS = {
    "contextwise": contextwise,
    "ppl": ppl,
    "bayes-fit": bayes_fit,
    **{t: task(t) for t in TASKS},
    "icl": icl,
    "infill": infill,
}


# ---------------------------------------------------------------------------- both runs, every evaluation


def compare_runs(run_a: str | Path, run_b: str | Path, *args, **kwargs) -> tuple[Path, list[dict]]:
    """Compare every evaluation both runs have (or ``evals``); write OUT/compare_NAME.json and .png for
    each and return OUT and the written documents. OUT defaults to RUN_A/compare/<B's name>. A file
    there that is not a comparison is refused; so is one of other results or options unless
    ``overwrite`` (``check_rerun``), before anything is written. The arguments are ``comparisons``'."""
    out, docs = comparisons(run_a, run_b, *args, **kwargs)
    save(out, docs)
    return out, docs


def comparisons(
    run_a: str | Path,
    run_b: str | Path,
    evals: list[str] | None,
    options: Options,
    out: str | Path | None,
    overwrite: bool = False,
) -> tuple[Path, list[dict]]:
    """What ``compare_runs`` writes, every check made and nothing written: (OUT, the documents)."""
    if options.resamples < 100:
        raise UserError(f"--resamples {options.resamples} is too few for a 95% interval; use 1000 or more")
    fa, fb = eval_folder(run_a), eval_folder(run_b)
    la, lb = labels(fa, fb)
    both = sorted({f.stem for f in fa.glob("*.json")} & {f.stem for f in fb.glob("*.json")} & set(COMPARERS))
    names = list(dict.fromkeys(evals)) if evals else both
    unknown = [n for n in names if n not in COMPARERS]
    if unknown:
        raise UserError(f"compare does not know {', '.join(unknown)}; choose from {', '.join(COMPARERS)}")
    if not names:
        from contextlab.eval import EVALS

        shared = sorted({f.stem for f in fa.glob("*.json")} & {f.stem for f in fb.glob("*.json")})
        unpaired = [n for n in shared if n in EVALS and n not in COMPARERS]
        raise UserError(
            f"{run_a} and {run_b} have no evaluation in common that compare knows ({', '.join(COMPARERS)})"
            + (
                f"; both have {', '.join(unpaired)}, which compare does not pair (yet): read their results "
                "side by side (`contextlab report` of a folder holding both)"
                if unpaired
                else "; run the same `contextlab eval NAME` on both"
            )
        )
    sides = [(name, side(fa, la, name), side(fb, lb, name)) for name in names]
    notes = {name: check_pairing(name, a, b) for name, a, b in sides}  # refuse before writing anything
    given = out is not None
    out = Path(out) if out else Path(run_a) / "compare" / lb.replace("/", "_")
    refuse_unwritable(out, given)  # before any figure is drawn
    for name, a, b in sides:
        check_rerun(out / f"compare_{name}.json", a, b, name, options, overwrite)
    trained = training_note(sides[0][1], sides[0][2])
    return out, [_document(name, a, b, options, notes[name] + trained) for name, a, b in sides]


ONE_PAIR = (
    "one model of each: the intervals hold which documents and samples were read, not the noise of "
    "training (a run of another seed can differ by more); pairs of runs of other seeds, compare A B "
    "--and A2 B2, pool it"
)


def save(out: Path, docs: list[dict]) -> None:
    """Write each comparison document as OUT/compare_NAME.json, and its plot."""
    from contextlab.compare.plots import PLOTS

    out.mkdir(parents=True, exist_ok=True)
    for doc in docs:
        name = doc["eval"]
        atomic_write_text(out / f"compare_{name}.json", json.dumps(doc, indent=2, allow_nan=False) + "\n")
        PLOTS[name](doc, out / f"compare_{name}.png")


def training_note(a: Side, b: Side) -> list[str]:
    """A note when A's and B's runs trained on other amounts (steps or tokens, e.g. a budget of
    minutes): their difference is partly of that. [] when equal or unknown (a model trained elsewhere)."""
    from contextlab import rundir

    seen, runs = [], []
    for s in (a, b):
        model = (s.doc.get("model") or {}).get("path")
        try:
            run = rundir.run_of(model) if model else None
        except (UserError, OSError, ValueError):
            run = None
        if run is None or not rundir.is_run(run):
            return []
        step = (s.doc.get("model") or {}).get("step")
        rows = [r for r in rundir.read_metrics(run) if step is None or r.get("step", 0) <= step]
        if not rows:
            return []
        runs.append(run)
        seen.append((rows[-1].get("step"), rows[-1].get("tokens"), _flops_at(run, rows[-1].get("tokens"))))
    differ = config_note(*runs)
    (sa, ta, fa), (sb, tb, fb) = seen
    if (sa, ta) == (sb, tb):
        return differ
    amount = lambda st, tk: f"{st:,} steps" + (f", {tk:,} tokens" if isinstance(tk, int) else "")
    if fa and fb and abs(fa - fb) <= 0.01 * max(fa, fb):  # an equal-compute design: the point, not a confound
        return differ + [
            f"A and B trained with the same compute ({fa:.3g} and {fb:.3g} FLOPs): A {amount(sa, ta)}, B "
            f"{amount(sb, tb)}, which equal compute implies for their setups; the difference is at equal "
            "training FLOPs"
        ]
    return differ + [
        f"A was trained {amount(sa, ta)}, B {amount(sb, tb)}: the difference is partly of how long each "
        "trained, not only of what differs in their setup"
    ]


BUDGET_KEYS = {("train", k) for k in ("max_steps", "max_tokens", "max_flops", "max_minutes", "patience")}


def config_note(run_a: Path, run_b: Path, show: int = 4) -> list[str]:
    """One line naming the settings A's and B's training configs differ in, with both values (what the
    comparison measures; a user's SPLICE - EP comparison named neither); [] when a config is missing."""
    from contextlab.compare.pairing import config_differences
    from contextlab.train.config import RESUME_FREE

    # how a run was written or logged, not what it trained: the keys a resume may change, but its budget
    written = {f"{section}.{key}" for section, key in RESUME_FREE - BUDGET_KEYS}
    differ = config_differences(str(run_a), str(run_b), lambda k: k in written)
    if differ is None:
        return []
    if not differ:
        return ["A and B were trained with the same config: the difference is of training noise alone"]
    shown = "; ".join(
        f"{k} {_config_value(a)} vs {_config_value(b)}" for k, (a, b) in list(differ.items())[:show]
    )
    more = f"; and {len(differ) - show} more" if len(differ) > show else ""
    return [f"A and B were trained with other {'settings' if len(differ) > 1 else 'setting'}: {shown}{more}"]


def _config_value(v) -> str:
    """A config value as the note shows it: a path by its last two parts, a missing one as (unset)."""
    if v is None:
        return "(unset)"
    text = str(v)
    return "/".join(Path(text).parts[-2:]) if "/" in text and len(text) > 40 else text


def _flops_at(run: Path, tokens) -> float | None:
    """The training FLOPs a run had spent after ``tokens`` tokens: its FLOPs per token (any checkpoint's
    state: the model and objective fix it) times them; None when unknown."""
    from contextlab import rundir

    found = rundir.list_checkpoints(run)
    if not isinstance(tokens, int) or not found:
        return None
    try:
        state = rundir.read_checkpoint_state(found[-1][1])
    except UserError:
        return None
    flops, seen = state.get("flops"), state.get("tokens")
    if not all(isinstance(x, (int, float)) and x > 0 for x in (flops, seen)):
        return None
    return float(flops) / float(seen) * tokens


def check_rerun(path: Path, a: Side, b: Side, name: str, options: Options, overwrite: bool) -> None:
    """One line before ``path`` is replaced by a comparison it does not hold: a file that is not a
    comparison (always), or one of other results (its A's or B's result file) or options (unless
    ``overwrite``). The same comparison again replaces it (a reproduction)."""
    from contextlab.outputs import earlier_result

    doc = earlier_result(path, FORMAT, "a `contextlab compare` result")
    if doc is None or overwrite:
        return
    now = {"a": str((a.folder / f"{name}.json").resolve()), "b": str((b.folder / f"{name}.json").resolve())}
    was = {k: str(Path(str((doc.get(k) or {}).get("result"))).resolve()) for k in ("a", "b")}
    change = [f"{k.upper()} {was[k]} -> {now[k]}" for k in ("a", "b") if was[k] != now[k]]
    old_options = doc.get("options") or {}
    change += [
        f"--{k} {old_options.get(k)} -> {v}" for k, v in vars(options).items() if old_options.get(k) != v
    ]
    if change:
        raise UserError(
            f"{path} holds a comparison of other results or options ({'; '.join(change)}); pass --overwrite "
            "to replace it, or give another --out to keep both (nothing was written)"
        )


def _document(name: str, a: Side, b: Side, options: Options, notes: list[str]) -> dict:
    """Compare one evaluation: its JSON document (``save`` writes it and its plot)."""
    t0 = time.perf_counter()
    got = COMPARERS[name](a, b, options)
    doc = {
        "format": FORMAT,
        "eval": name,
        **code_version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(time.perf_counter() - t0, 3),
        "a": _describe(a, name),
        "b": _describe(b, name),
        "difference": "A - B",
        "options": vars(options),
        "paired_on": {k: v for k, v in (a.doc.get("data") or {}).items() if k not in PATHS},
        "notes": notes + got.get("notes", []),
        "scope": ONE_PAIR,  # what the intervals hold (``compare --and`` pools pairs of other seeds)
        "lines": got["lines"],
        "results": got["results"],
    }
    return jsonable(doc)


def _describe(s: Side, name: str) -> dict:
    model = s.doc.get("model") or {}
    return {
        "label": s.label,
        "result": str((s.folder / f"{name}.json").resolve()),  # the report checks it is still this one
        "model": model.get("path"),
        "step": model.get("step"),
        "created": s.doc.get("created"),
    }
