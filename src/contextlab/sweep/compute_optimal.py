"""Compute-optimal context size from a sweep's results.

Following the compute-optimal-context-size study: for every run, take its best-context
loss (the mean contextwise loss over the last 10% of the training context, from the
``contextwise`` evaluation; add it to ``sweep.evals``). Then

* U-curves: best-context loss against the training context, one line per model size, one
  panel per budget (runs that differ only in keys outside the analysis, e.g. a grid over
  ``train.seed``, are replicates: their mean is the point, their range is kept as the spread);
* the optimal context for each (budget, model size), and smoothed over budgets by taking
  the most common optimum in a sliding window (the study's smoothing, since the raw argmin
  jumps around with noise; a window with no single most common keeps the budget's own, and the
  figure draws each budget's own where the mode overruled it);
* the optimal (model size, context) pair per budget;
* with the contextwise metric, how far every other context is from the optimum, paired over the
  documents both runs read, with a 95% interval, and with replicates (a grid over train.seed) paired
  seed by seed and pooled over seeds (``paired_margins``): an optimum whose neighbours' intervals
  hold 0 is not told apart from them by these runs.

Ranking by a loss averaged over the training context's positions (``val_loss``,
``best_val_loss``, ...) is refused unless asked for (``rank_by_mean_loss``,
``sweep.analysis_rank_by_mean_loss``), and then carries ``MEAN_LOSS_WARNING``: such a loss ranks
training contexts wrongly (the seed's section 2). Trade-off: a sweep without the contextwise
evaluation gets no analysis by default rather than a plausible wrong one.

Reads results.csv (and, for the paired margins, each run's contextwise arrays); writes
compute_optimal.json and three PNGs (U-curves per budget, the optimum per budget, and every
budget's curve minus its minimum on one axis, as the seed's Figure 4).
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import numpy as np

from contextlab.errors import UserError, some
from contextlab.figures import pyplot, save_png
from contextlab.io import atomic_write_json

METRICS = ("contextwise.best_context_loss", "val_loss")  # the default, then the fallback when allowed
BUDGET_KEYS = ("train.max_flops", "train.max_tokens", "train.max_steps", "train.max_minutes")  # in this order
MEAN_LOSS_WARNING = (
    "warning: {metric} averages the loss over positions 1..the run's own training context, so a longer "
    "context is scored on more positions that have much context to use; the compute-optimal-context "
    "study shows this ranks training contexts wrongly (its 16K-context model had the lower training "
    "loss, yet a 4K-context model predicted better at every context length both can see). Rank by "
    "contextwise.best_context_loss (add contextwise to sweep.evals) to choose a training context."
)


def number_text(v) -> str:
    """A number as a person writes it in a config: 2e-3, 1.5e11, 0.5, 64."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, float) and v != 0 and not 1e-2 <= abs(v) < 1e5:
        mantissa, exponent = f"{v:.6e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def budget_label(budget_key: str | None, budget) -> str:
    """A budget as printed and in plot titles: ``train.max_flops 1.5e11`` (``all runs`` without one)."""
    return "all runs" if budget_key is None else f"{budget_key} {number_text(float(budget))}"


ONE_MODEL = "model"  # the size of every run when the results have no model column


def size_label(size_key: str, size) -> str:
    """A model of the analysis as printed and in plot legends: a named size as it is (``tiny-2x128``),
    any other model key with its name (``n_embd 64``)."""
    if size == ONE_MODEL:  # no model column in the results: the grid does not vary the model
        return "the sweep's model"
    return str(size) if size_key == "model.size" else f"{size_key.split('.')[-1]} {size}"


def context_resolved(metric: str) -> bool:
    """Whether ``metric`` compares runs at matched positions (a contextwise result), not as a mean
    over each run's own training context."""
    return metric.startswith("contextwise.")


def _num(x: str):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def load_results(path: str | Path) -> list[dict]:
    path = Path(path)
    if path.is_dir():
        path = path / "results.csv"
    if not path.is_file():
        raise UserError(f"no results.csv at {path}; run the sweep first")
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def analyze(
    rows: list[dict],
    *,
    context_key: str = "train.context",
    size_key: str = "model.size",
    budget_key: str | None = None,
    metric: str | None = None,
    window: int = 3,
    rank_by_mean_loss: bool = False,
) -> dict:
    """The analysis of the finished runs of ``rows`` (see the module docstring); ``rank_by_mean_loss``
    allows a metric that is not context-resolved, with ``MEAN_LOSS_WARNING`` in the result."""
    done = [r for r in rows if r.get("status") == "done"]
    if not done:
        raise UserError("no finished runs in the results; nothing to analyse")
    if context_key == "train.context" and "train.seq_len" in done[0]:  # results from before the rename
        done = [{"train.context": r["train.seq_len"], **r} for r in done]
    size_key, budget_key, metric = _columns(done, context_key, size_key, budget_key, metric)
    warning = _mean_loss_warning(done, metric, context_key, rank_by_mean_loss)
    samples = _samples(done, metric, context_key, size_key, budget_key)
    table, spread, ranges = _means_and_spread(samples)
    budgets = sorted(table)
    optimal = {b: _optimum(table[b]) for b in budgets}
    sizes = sorted({s for b in budgets for s in table[b]})
    smoothed = {s: _smoothed_optimum(optimal, budgets, s, window) for s in sizes}
    notes = _unfinished(rows) + _thin_cells(samples, budget_key, size_key)
    return {
        "metric": metric,
        "warning": warning,
        "context_key": context_key,
        "size_key": size_key,
        "budget_key": budget_key,
        "window": window,
        "replicates": max(len(v) for v in samples.values()) if samples else 0,
        "replicate_spread": {
            b: {sz: dict(sorted(c.items())) for sz, c in v.items()} for b, v in spread.items()
        },
        "replicate_range": ranges,
        "curves": {str(b): {s: dict(sorted(c.items())) for s, c in table[b].items()} for b in budgets},
        "optimal": {str(b): v for b, v in optimal.items()},
        "optimal_context_smoothed": {s: [[b, c] for b, c in v] for s, v in smoothed.items()},
        "notes": notes,
    }


def _unfinished(rows: list[dict]) -> list[str]:
    """A note when runs of the grid have no result yet: the analysis reads the others."""
    left = Counter(r.get("status") or "pending" for r in rows if r.get("status") != "done")
    if not left:
        return []
    which = ", ".join(f"{n} {st}" for st, n in sorted(left.items()))
    done = len(rows) - sum(left.values())
    names = some([r.get("run") for r in rows if r.get("status") != "done" and r.get("run")], 4)
    return [
        f"{done} of {len(rows)} runs of the grid are done ({which}: {names}); the analysis reads the done "
        "ones"
    ]


def _thin_cells(samples: dict, budget_key: str | None, size_key: str) -> list[str]:
    """Notes on what an optimum cannot claim: a budget and size with one context finished (an optimum
    of one), or contexts with unequal numbers of finished replicates (means over other seeds)."""
    cells: dict = {}
    for (budget, size, ctx), losses in samples.items():
        cells.setdefault((budget, size), {})[ctx] = len(losses)
    notes = []
    for (budget, size), counts in sorted(cells.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        where = f"{budget_label(budget_key, budget)}, {size_label(size_key, size)}"
        if len(counts) == 1:
            notes.append(
                f"{where}: only context {next(iter(counts))} has a finished run, so its optimum compares "
                "nothing; finish the other contexts of the grid"
            )
        elif len(set(counts.values())) > 1:
            each = ", ".join(f"{c}: {n}" for c, n in sorted(counts.items()))
            notes.append(
                f"{where}: the contexts have unequal numbers of finished replicates ({each}), so their means "
                "are over different runs; finish the grid to compare like with like"
            )
    return notes


def _columns(
    done: list[dict], context_key: str, size_key: str, budget_key: str | None, metric: str | None
) -> tuple[str, str | None, str]:
    """The size, budget and metric columns to analyse: defaults filled in, each one checked."""
    if size_key not in done[0]:  # e.g. a grid over model.n_embd instead of named sizes
        size_key = next((k for k in done[0] if k.startswith("model.")), size_key)
    if budget_key is None:  # the budget the runs differ in (a grid axis), else the one they share
        present = [k for k in BUDGET_KEYS if k in done[0]]
        varies = [k for k in present if len({r.get(k) for r in done}) > 1]
        budget_key = (varies or present or [None])[0]
    if budget_key is not None and budget_key not in done[0]:
        raise UserError(
            f"the analysis axis '{budget_key}' is not a column of the results; set "
            f"sweep.analysis_axis to one of the grid keys"
        )
    if metric is not None and not any(_num(r.get(metric)) is not None for r in done):
        raise UserError(
            f"no finished run has a value for '{metric}'; set sweep.analysis_metric to a loss column "
            f"of results.csv (e.g. val_loss or best_val_loss)"
        )
    if metric is None:
        metric = next((m for m in METRICS if any(_num(r.get(m)) is not None for r in done)), None)
    if context_key not in done[0]:
        raise UserError(f"the grid does not vary {context_key}, so there are no training contexts to compare")
    if metric is None:
        raise UserError(f"the results need '{context_key}' and a loss column ({' or '.join(METRICS)})")
    return size_key, budget_key, metric


def _mean_loss_warning(done: list[dict], metric: str, context_key: str, rank_by_mean_loss: bool) -> str:
    """ "" when ``metric`` may rank the training contexts of ``done`` (context-resolved, or one context
    only); the warning when it is a mean loss that was asked for; else the refusal."""
    if context_resolved(metric) or len({r.get(context_key) for r in done}) < 2:
        return ""
    if rank_by_mean_loss:
        return MEAN_LOSS_WARNING.format(metric=metric)
    fix = (
        "add contextwise to sweep.evals and rank by contextwise.best_context_loss, or set "
        "sweep.analysis_rank_by_mean_loss = true to rank by it anyway"
    )
    raise UserError(f"will not rank training contexts by {metric}: it ranks them wrongly; {fix}")


def _samples(done: list[dict], metric: str, context_key: str, size_key: str, budget_key: str | None) -> dict:
    """(budget, size, context) -> the metric of every replicate run (e.g. a grid over train.seed)."""
    samples: dict = {}
    for r in done:
        loss = _num(r.get(metric))
        if loss is None:
            continue
        budget = _num(r.get(budget_key)) if budget_key else 0.0
        samples.setdefault((budget, r.get(size_key, ONE_MODEL), int(float(r[context_key]))), []).append(loss)
    return samples


def _means_and_spread(samples: dict) -> tuple[dict, dict, dict]:
    """budget -> size -> context -> mean loss, and the same (budget as str) -> max - min of replicates,
    and -> [min, max] of replicates (what the U-curves draw as a bar)."""
    table: dict = {}
    spread: dict = {}
    ranges: dict = {}
    for (budget, size, ctx), losses in samples.items():
        table.setdefault(budget, {}).setdefault(size, {})[ctx] = sum(losses) / len(losses)
        if len(losses) > 1:
            spread.setdefault(str(budget), {}).setdefault(size, {})[ctx] = max(losses) - min(losses)
            ranges.setdefault(str(budget), {}).setdefault(size, {})[str(ctx)] = [min(losses), max(losses)]
    return table, spread, ranges


def _optimum(curves: dict) -> dict:
    """One budget's optimal context per size (size -> context -> loss), and the best (size, context)."""
    per_size = {s: min(curve, key=curve.get) for s, curve in curves.items()}
    best_size, best_ctx = min(((s, c) for s, c in per_size.items()), key=lambda sc: curves[sc[0]][sc[1]])
    return {
        "per_size": per_size,
        "best": {"size": best_size, "context": best_ctx, "loss": curves[best_size][best_ctx]},
    }


def _smoothed_optimum(optimal: dict, budgets: list, size, window: int) -> list[tuple]:
    """(budget, most common optimal context in a window of budgets) for one size."""
    seq = [(b, optimal[b]["per_size"].get(size)) for b in budgets if size in optimal[b]["per_size"]]
    out = []
    for i, (b, _) in enumerate(seq):
        lo, hi = max(0, i - window // 2), min(len(seq), i + window // 2 + 1)
        counts = Counter(c for _, c in seq[lo:hi])
        top = max(counts.values())
        modes = [c for c, n in counts.items() if n == top]
        # no single most common: the budget's own optimum (ties to the smaller flattened every growth: a
        # window of two budgets at each end, so raw 32, 64 read 32, 32)
        out.append((b, modes[0] if len(modes) == 1 else seq[i][1]))
    return out


def paired_margins(runs_dir: Path, rows: list[dict], result: dict, replicate_keys: list[str] = ()) -> dict:
    """Per budget and size: every other context's best-context loss minus the optimum's, paired over
    the documents both read, with a 95% t interval over documents (``within_noise``: the contexts
    whose interval holds 0, which these runs do not tell apart from the optimum).

    Runs of different training contexts score pieces of different lengths (their own context), so
    the pairing is by document: each document's mean best-context loss under each run (replicates of
    a cell averaged), the difference taken per document, and its mean and interval over the documents
    both runs read. That mean weighs documents equally, so it can differ a little from the difference
    of the two reported losses, which weigh pieces. Runs whose contextwise results read other text
    (another store or held-out part) are not paired: ``skipped`` says so.

    The interval over documents holds which documents were read, not the seed-to-seed noise of
    training. With replicates (``replicate_keys``: grid keys outside the analysis, e.g. train.seed,
    whose every value ran at every context of the cell), each replicate is paired with the optimum's
    run of the same value, its difference averaged over the documents, and those differences pooled
    with a t interval over replicates (``others_over_replicates``); ``within_noise`` then reads that
    interval, which holds both."""
    from contextlab.eval.paired_stats import cluster_t

    context_key, size_key, budget_key = result["context_key"], result["size_key"], result["budget_key"]
    cells: dict = {}  # (budget, size, context) -> {replicate (values of replicate_keys): run names}
    for r in rows:
        if r.get("status") == "done" and _num(r.get(result["metric"])) is not None:
            budget = _num(r.get(budget_key)) if budget_key else 0.0
            ctx = int(float(r.get(context_key) or r.get("train.seq_len")))
            replicate = tuple(str(r.get(k)) for k in replicate_keys)
            cell = cells.setdefault((str(budget), r.get(size_key, ONE_MODEL), ctx), {})
            cell.setdefault(replicate, []).append(r["run"])
    out: dict = {}
    read: dict = {}  # run name -> (the text its contextwise result read, document -> loss): each read once
    for b, per_size in result["optimal"].items():
        for size, best in per_size["per_size"].items():
            contexts = sorted(c for (bb, sz, c) in cells if bb == b and sz == size)
            if len(contexts) < 2:
                continue
            try:
                docs = {
                    c: _document_losses(
                        runs_dir, [n for ns in cells[(b, size, c)].values() for n in ns], read
                    )
                    for c in contexts
                }
            except ValueError as exc:
                out.setdefault(b, {})[size] = {"optimum": int(best), "skipped": str(exc)}
                continue
            texts = {text for text, _ in docs.values()}
            if len(texts) > 1:
                why = "the runs' contextwise results read other text (store or held-out part)"
                out.setdefault(b, {})[size] = {"optimum": int(best), "skipped": why}
                continue
            base = docs[int(best)][1]
            others = {}
            for c in contexts:
                if c == int(best):
                    continue
                common = sorted(set(base) & set(docs[c][1]))
                diff = np.array([docs[c][1][d] - base[d] for d in common])
                if len(diff):
                    others[str(c)] = cluster_t(diff, np.ones(len(diff)))
            margins = {
                "optimum": int(best),
                "documents": min((d["n_clusters"] for d in others.values()), default=0),  # the fewest paired
                "documents_read": {str(c): len(docs[c][1]) for c in contexts},  # what each point averages
                "others": others,
            }
            reps = _over_replicates(runs_dir, {c: cells[(b, size, c)] for c in contexts}, int(best), read)
            ran = {c: len(cells[(b, size, c)]) for c in contexts}
            if not reps and replicate_keys and max(ran.values()) > 1:
                margins["replicates_unmatched"] = (
                    "not pooled over replicates: the contexts did not all run the same ones "
                    f"({', '.join(f'{c}: {n}' for c, n in ran.items())})"
                )
            if reps:
                margins.update(
                    others_over_replicates=reps, replicates=len(next(iter(reps.values()))["per_pair"])
                )
            margins["within_noise"] = [
                int(c)
                for c, d in (reps or others).items()
                if d["interval95"] is None or d["interval95"][0] <= 0
            ]
            out.setdefault(b, {})[size] = margins
    return out


def _over_replicates(runs_dir: Path, cells: dict[int, dict], best: int, read: dict) -> dict:
    """context -> the difference from the optimum per replicate (its run minus the optimum's run of the
    same replicate, averaged over the documents both read), pooled with a t interval over replicates;
    {} unless every context ran the same two or more replicates. ``read``: as ``_document_losses``."""
    from contextlab.eval.paired_stats import mean_t

    replicates = set(cells[best])
    if len(replicates) < 2 or any(set(runs) != replicates for runs in cells.values()):
        return {}
    order = sorted(replicates)
    losses = {
        c: {r: _document_losses(runs_dir, runs[r], read)[1] for r in order} for c, runs in cells.items()
    }
    out = {}
    for c in sorted(cells):
        if c == best:
            continue
        diffs = []
        for r in order:
            common = set(losses[c][r]) & set(losses[best][r])
            diffs.append(float(np.mean([losses[c][r][d] - losses[best][r][d] for d in common])))
        out[str(c)] = {**mean_t(diffs, "replicates"), "per_pair": diffs}
    return out


def _replicate_keys(sweep_dir: Path, result: dict) -> list[str]:
    """The grid keys of the sweep (its recorded sweep.toml) that the analysis does not read: the runs
    of one cell that differ only in them are replicates (a grid over train.seed or data.split_seed)."""
    from contextlab.config import read_toml
    from contextlab.sweep.folder import SWEEP_FILE

    try:
        grid = read_toml(sweep_dir / SWEEP_FILE).get("grid") or {}
    except (OSError, UserError):
        return []
    read = {result["context_key"], result["size_key"], result["budget_key"], "train.seq_len"}
    return [k for k in grid if k not in read]


def margins_line(margins: dict | None) -> str:
    """One size's paired margins in a line: ``each context's loss - context 256's, paired over 8
    documents (each weighed equally): 128 +0.041 [+0.020, +0.062]; 512 +0.004 [-0.010, +0.018] (within
    noise)``; "" without."""
    if not margins:
        return ""
    if margins.get("skipped"):
        return f"no paired margins: {margins['skipped']}"
    how, parts = margins_parts(margins)
    return f"each context's loss - context {margins['optimum']}'s, {how}: {parts}"


def margins_parts(margins: dict) -> tuple[str, str]:
    """(how the margins were paired, each other context's margin with its interval), in words."""
    from contextlab.eval.paired_stats import interval_text

    reps = margins.get("others_over_replicates")
    counts = {int(c): d.get("n_clusters") for c, d in margins["others"].items()}
    one_count = len(set(counts.values())) <= 1  # every comparison paired the same documents
    parts = []
    for c, d in sorted((reps or margins["others"]).items(), key=lambda cd: int(cd[0])):
        notes = ["within noise"] if int(c) in margins["within_noise"] else []
        if d["diff"] < 0:  # the optimum is the lowest mean over pieces; documents weighed equally differ
            notes.append("below the optimum with documents weighed equally")
        if not reps and not one_count:
            notes.insert(0, f"{counts[int(c)]:,} documents")
        parts.append(f"{c} {interval_text(d)}" + (f" ({'; '.join(notes)})" if notes else ""))
    weighed = (
        "each weighed equally, where the losses ranked weigh pieces, so a margin can differ from the gap "
        "of the two losses"
    )
    over = (
        f"{margins['documents']:,} documents"
        if one_count
        else "the documents both runs read (as many as each margin says)"
    )
    how = (
        f"paired per replicate over the documents ({weighed}) and pooled over {margins['replicates']} "
        "replicates"
        if reps
        else f"paired over {over} ({weighed}; one run per context: the intervals hold the documents "
        "read, not training noise, which a grid over train.seed adds)"
    )
    read = margins.get("documents_read") or {}
    if len(set(read.values())) > 1:  # a document shorter than a context's pieces is read only by shorter ones
        each = ", ".join(f"{n:,} at {c}" for c, n in sorted(read.items(), key=lambda cn: int(cn[0])))
        how += f"; the losses ranked average other documents per context ({each}: a piece needs L tokens)"
    if margins.get("replicates_unmatched"):
        how += f"; {margins['replicates_unmatched']}"
    return how, "; ".join(parts)


def _document_losses(runs_dir: Path, runs: list[str], read: dict) -> tuple[tuple, dict[int, float]]:
    """(what text the runs' contextwise results read, document -> mean best-context loss over their
    pieces, averaged over the runs); ValueError naming a run whose result has no per-piece arrays or
    replicates that read other text. ``read``: each run's (text, document -> loss), filled as runs are
    read, so a run is read once however many comparisons use it."""
    for name in runs:
        if name not in read:
            read[name] = _run_document_losses(runs_dir / name / "eval")
    texts = {read[name][0] for name in runs}
    if len(texts) > 1:
        raise ValueError(f"the replicates {', '.join(runs)} read other text (store or held-out part)")
    per_run = [read[name][1] for name in runs]
    shared = set.intersection(*(set(d) for d in per_run))
    return texts.pop(), {d: float(np.mean([r[d] for r in per_run])) for d in shared}


def _run_document_losses(folder: Path) -> tuple[tuple, dict[int, float]]:
    """One run's contextwise result in ``folder``: (the text it read, document -> mean best-context loss
    over its pieces)."""
    import json

    try:
        doc = json.loads((folder / "contextwise.json").read_text())
        files = doc["arrays"]
        pieces = np.load(folder / files["pieces"])
        losses = np.load(folder / files["piece_best_loss"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{folder / 'contextwise.json'} has no per-piece losses to pair ({type(exc).__name__}); "
            "evaluate contextwise again"
        ) from None
    data = doc.get("data") or {}
    ids, inverse = np.unique(pieces[:, 0], return_inverse=True)
    means = np.bincount(inverse, weights=losses) / np.bincount(inverse)
    held = data.get("held_out_id") or data.get("held_out")  # its identity: its words name each run's pack
    return (data.get("hash"), data.get("split"), held), dict(zip(ids.tolist(), means.tolist()))


def _order(size) -> tuple:
    """Sizes in legends by value (64 before 128), names after them in alphabetical order."""
    value = _num(size)
    return (0, value, "") if value is not None else (1, 0.0, str(size))


def plot(result: dict, out_dir: Path) -> list[Path]:
    plt = pyplot()

    budgets = list(result["curves"])
    return [
        _plot_u_curves(plt, result, budgets, out_dir / "u_curves.png"),
        _plot_optimal_context(plt, result, out_dir / "optimal_context.png"),
        _plot_gap_curves(plt, result, budgets, out_dir / "gap_curves.png"),
    ]


def _plot_u_curves(plt, result: dict, budgets: list, path: Path) -> Path:
    """Loss against training context, one panel per budget, one line per size, a star at its optimum."""
    fig, axes = plt.subplots(1, len(budgets), figsize=(4.2 * len(budgets), 3.6), squeeze=False, sharey=True)
    for ax, b in zip(axes[0], budgets):
        for size, curve in sorted(result["curves"][b].items(), key=lambda sc: _order(sc[0])):
            xs = [int(x) for x in curve]
            (line,) = ax.plot(
                xs, list(curve.values()), marker="o", label=size_label(result["size_key"], size)
            )
            spread = (result.get("replicate_range") or {}).get(b, {}).get(size, {})
            for x, (lo, hi) in ((int(c), r) for c, r in spread.items()):  # the replicates' range
                ax.plot([x, x], [lo, hi], color=line.get_color(), linewidth=1, alpha=0.6)
            best = result["optimal"][b]["per_size"][size]
            ax.plot(
                [int(best)],
                [curve[best] if best in curve else curve[str(best)]],
                marker="*",
                markersize=14,
                color=line.get_color(),
            )
            tied = ((result.get("paired") or {}).get(b) or {}).get(size, {}).get("within_noise") or []
            near = [(int(c), curve.get(c, curve.get(str(c)))) for c in tied]
            if near:  # the contexts the paired margins do not tell apart from the optimum
                ax.plot(*zip(*near), "o", ms=11, mfc="none", color=line.get_color(), label=f"_{size} tied")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training context (tokens)")
        ax.set_title(budget_label(result["budget_key"], b))
    metric = result["metric"]
    unit = " (nats/token)" if "loss" in metric else ""
    axes[0][0].set_ylabel(metric.replace("contextwise.", "") + unit)
    marks = "★ the optimum"
    paired = result.get("paired") or {}
    if any(m.get("within_noise") for b in budgets for m in (paired.get(b) or {}).values()):
        marks += "; ○ not told apart from it (paired, 95%)"
    if result.get("warning"):
        marks += "; ranked by a mean loss (see the analysis's warning)"
    fig.subplots_adjust(bottom=0.26, top=0.88)
    fig.text(0.5, 0.015, marks, fontsize=8, ha="center", va="bottom")
    sizes = {s for b in budgets for s in result["curves"][b]}
    title = None if sizes == {ONE_MODEL} else result.get("size_key")  # read "model.size: model"
    axes[0][-1].legend(fontsize=8, title=title or None, title_fontsize=8)
    return save_png(fig, path)


def _plot_optimal_context(plt, result: dict, path: Path) -> Path:
    """The optimal context against the budget, one line per size: the smoothed optimum (a mode over a
    window of budgets), and each budget's own optimum as crosses where they differ."""
    fig, ax = plt.subplots(figsize=(5, 3.6))
    w = min(result.get("window", 3), len(result["optimal"]))  # "mode of 3 budgets" of 2 budgets
    for size, pts in sorted(result["optimal_context_smoothed"].items(), key=lambda sp: _order(sp[0])):
        label = size_label(result["size_key"], size)
        line = ax.plot([float(b) for b, _ in pts], [c for _, c in pts], marker="o", label=label)[0]
        own = {float(b): o["per_size"].get(size) for b, o in result["optimal"].items()}
        raw = [(float(b), own.get(float(b))) for b, _ in pts]
        if w > 1 and any(r != c for (_, r), (_, c) in zip(raw, pts)):
            ax.plot(*zip(*raw), "x", ms=9, color=line.get_color(), label=f"{label}: each budget's own")
    if all(float(b) > 0 for b in result["optimal"]):
        ax.set_xscale("log")
    ax.set_yscale("log", base=2)
    ax.set_xlabel(result["budget_key"] or "budget")
    ax.set_ylabel("optimal training context" + (f" (mode of {w} budgets)" if w > 1 else ""))
    ax.legend(fontsize=8)
    return save_png(fig, path)


def _plot_gap_curves(plt, result: dict, budgets: list, path: Path) -> Path:
    """The seed's Figure 4 view: each budget's curve minus its own minimum, all budgets on one axis."""
    sizes = sorted({s for b in budgets for s in result["curves"][b]}, key=_order)
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.6 * len(sizes), 3.6), squeeze=False)
    cmap = plt.get_cmap("viridis")
    for ax, size in zip(axes[0], sizes):
        for i, b in enumerate(budgets):
            curve = result["curves"][b].get(size)
            if not curve:
                continue
            xs = [int(x) for x in curve]
            low = min(curve.values())
            color = cmap(i / max(1, len(budgets) - 1))
            ax.plot(
                xs,
                [v - low for v in curve.values()],
                marker="o",
                color=color,
                label=budget_label(result["budget_key"], b),
            )
            best = int(result["optimal"][b]["per_size"][size])
            ax.plot([best], [0.0], marker="*", markersize=14, color=color)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training context (tokens)")
        ax.set_ylabel(f"{result['metric']} − its minimum")
        ax.set_title(size_label(result["size_key"], size))
        ax.legend(fontsize=8)
    return save_png(fig, path)


def compute_optimal(sweep_dir: str | Path, **kwargs) -> dict:
    sweep_dir = Path(sweep_dir)
    rows = load_results(sweep_dir)
    result = analyze(rows, **kwargs)
    if result["metric"] == METRICS[0]:
        result["paired"] = paired_margins(
            sweep_dir / "runs", rows, result, _replicate_keys(sweep_dir, result)
        )
    result["plots"] = [str(p) for p in plot(result, sweep_dir)]
    atomic_write_json(sweep_dir / "compute_optimal.json", result)
    return result
