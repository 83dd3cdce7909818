"""A folder of several runs on one page: their validation curves and contextwise curves drawn together.

A sweep or any folder of runs shows each run in its own section; a researcher comparing them
(objectives, contexts, packings) wants the curves on one figure. Two figures are drawn, each only
over runs whose numbers measure the same thing:

* validation loss against training tokens, over runs that validate on the same rows (by the hash of
  the rows their checkpoints record: EP and SPLICE packings of one store hold out the same documents;
  for older runs, the same data settings, ``train.context`` and validation size in ``config.toml``, or
  one ``data.val_store``, whatever they trained on); the loss is the left-to-right
  one (``val_lm_loss``) where the objective's own differs, and runs that have none (MLM, span
  corruption) are named and left out. Runs whose FLOPs per token differ by more than 5% (MTP's extra
  heads, ContextLM's predictor) are drawn against training FLOPs instead, the axis their budgets
  are compared on (from each newest checkpoint's counters);
* ``contextwise`` loss by position, over runs whose ``eval/contextwise.json`` read the same text
  (store hash, split and held-out part) with the same options (pieces; not the length, each run's
  own in a context sweep).

Runs that share neither are said to in one line, not drawn over each other. Trade-off: the groups
come from the files the runs wrote (no model is loaded), so a run written before a key existed
groups by what it has.
"""

from __future__ import annotations

import json
from pathlib import Path

from contextlab import rundir
from contextlab.report.blocks import muted, png_img
from contextlab.report.evals import comparable_options, read_result

MAX_GROUPS = 4  # figures of each kind; more groups are counted in a line
VALIDATION_KEYS = (
    "store",
    "val_store",
    "val_fraction",
    "val_split",
    "split_seed",
    "packed",
    "mixture",
    "mode",
)
VAL_STORE_KEYS = ("val_store", "split_seed", "mode")  # the rows' keys of a run with a data.val_store


def together_section(runs: list[Path], names: dict[Path, str], contextwise: bool = True) -> str:
    """HTML for the runs drawn together ("" for fewer than two runs, or nothing to draw);
    ``contextwise`` False: the page already draws their contextwise curves together (a quickstart)."""
    if len(runs) < 2:
        return ""
    configs = {run: _config(run) for run in runs}  # each run's config.toml, read once
    parts = _validation(runs, names, configs) + (_contextwise(runs, names) if contextwise else [])
    return "<h2>Runs together</h2>\n" + "\n".join(parts) if parts else ""


def _config(run: Path) -> dict:
    """The run's resolved config.toml ({} when it cannot be read)."""
    from contextlab.config import read_toml
    from contextlab.errors import UserError

    try:
        return read_toml(run / rundir.CONFIG)
    except (OSError, UserError):
        return {}


def _rows_key(run: Path, cfg: dict) -> str:
    """What decides a run's validation rows: the hash of the rows themselves, which its checkpoints
    record (runs that score the same text share it whatever they trained on: packings of one store
    that hold out the same documents, runs of one data.val_store); for runs written before that
    record, its data settings, context and validation size. With a data.val_store every run reads
    that store's documents in a split_seed order, so the training data is no part of that key."""
    rows = (rundir.data_record(run) or {}).get("validation_rows")
    if rows:
        return f"rows {rows}"
    data, train = cfg.get("data", {}), cfg.get("train", {})
    keys = VAL_STORE_KEYS if data.get("val_store") else VALIDATION_KEYS
    return repr(
        (
            [(k, data.get(k)) for k in keys],
            train.get("context"),
            train.get("val_tokens"),
            train.get("val_rows"),
        )
    )


def _groups(keyed: dict[Path, str]) -> list[list[Path]]:
    """Runs grouped by key, the largest group first (ties: first seen)."""
    groups: dict[str, list[Path]] = {}
    for run, key in keyed.items():
        groups.setdefault(key, []).append(run)
    return sorted(groups.values(), key=len, reverse=True)


def _flops_per_token(run: Path) -> float | None:
    """Training FLOPs per token of a run, from its newest checkpoint's counters (None without one)."""
    from contextlab.errors import UserError

    latest = rundir.latest_checkpoint(run)
    try:
        state = rundir.read_checkpoint_state(latest) if latest is not None else {}
    except UserError:
        return None
    flops, tokens = state.get("flops") or 0.0, state.get("tokens") or 0
    return flops / tokens if flops > 0 and tokens > 0 else None


def _validation(runs: list[Path], names: dict[Path, str], configs: dict[Path, dict]) -> list[str]:
    from contextlab.figures import png_bytes
    from contextlab.report.plots import curves_figure

    curves, left_out = {}, []
    for run in runs:
        rows = rundir.read_metrics(run)
        lm = [(r.get("tokens", r["step"]), r["val_lm_loss"]) for r in rows if "val_lm_loss" in r]
        objective = configs[run].get("objective", {}).get("name", "clm")
        own = [(r.get("tokens", r["step"]), r["val_loss"]) for r in rows if "val_loss" in r]
        if lm or (own and objective == "clm"):
            curves[run] = lm or own
        elif own:
            left_out.append(f"{names[run]} ({objective})")
    parts = []
    groups = [g for g in _groups({r: _rows_key(r, configs[r]) for r in curves}) if len(g) > 1]
    for group in groups[:MAX_GROUPS]:
        per_token = {r: _flops_per_token(r) for r in group}
        known = [v for v in per_token.values() if v]
        by_flops = len(known) == len(group) and max(known) > 1.05 * min(known)  # e.g. MTP's extra heads
        fig = curves_figure(
            {names[r]: [(x * per_token[r] if by_flops else x, y) for x, y in curves[r]] for r in group},
            xlabel="training FLOPs (the runs differ in FLOPs per token)" if by_flops else "training tokens",
            ylabel="validation loss, left to right (nats/token)",
            title=f"validation loss of {len(group)} runs on the same rows",
        )
        parts.append(png_img(png_bytes(fig), "validation loss of the runs"))
    if curves and not groups:
        parts.append(
            muted(
                "validation losses are not drawn together: each run validates on other rows (its data or "
                "train.context differ), so their losses measure different text; the contextwise figure "
                "compares runs on one text; runs trained with one data.val_store, or on packings of one "
                "store made with one --val-fraction and --split-seed, validate on the same rows"
            )
        )
    elif len(groups) > MAX_GROUPS:
        parts.append(
            muted(f"{len(groups) - MAX_GROUPS} more groups of runs validating on the same rows not drawn")
        )
    if left_out and parts:
        parts.append(
            muted(
                f"not drawn: {', '.join(left_out)}: the objective's own validation loss is another quantity, "
                "and it has no left-to-right one"
            )
        )
    return parts


def _held(data: dict, key: str):
    """A result's data value for grouping; the held-out part by its identity where recorded (its words
    name the pack each run trained on, so EP's and SPLICE's runs read as other text)."""
    return (data.get("held_out_id") or data.get(key)) if key == "held_out" else data.get(key)


def _contextwise(runs: list[Path], names: dict[Path, str]) -> list[str]:
    from contextlab.figures import png_bytes
    from contextlab.result_plots import contextwise_figure

    docs = {}
    for run in runs:
        doc = read_result(rundir.eval_dir(run) / "contextwise.json")
        if doc is not None and "loss" in doc.get("results", {}):
            docs[run] = doc
    keyed = {  # the same text, read with the same settings (pieces, length, ...)
        run: repr([_held(doc["data"], k) for k in ("hash", "split", "held_out", "documents", "tokens")])
        + json.dumps(comparable_options(doc), sort_keys=True)
        for run, doc in docs.items()
    }
    parts = []
    groups = [g for g in _groups(keyed) if len(g) > 1]
    for group in groups[:MAX_GROUPS]:
        curves = {}
        for run in group:
            r = docs[run]["results"]
            curves[names[run]] = {
                "context": r["context"],
                "loss": r["loss"],
                "train_context": r.get("train_context"),
                "minimum": r.get("minimum"),
                "best_context": r.get("best_context"),
                "stderr": r.get("stderr"),
            }
        few = min(docs[run]["results"].get("n_documents", 0) for run in group) < 256
        data = docs[group[0]]["data"]
        where = Path(str(data.get("store", ""))).name + (
            " (what each run held out)" if data.get("split") == "run" else ""
        )
        fig = contextwise_figure(
            curves, smooth=9 if few else 1, title=f"contextwise loss of {len(group)} runs on {where}"
        )
        parts.append(png_img(png_bytes(fig), "contextwise loss of the runs"))
    if len(docs) > 1 and not groups:
        parts.append(
            muted(
                "contextwise curves are not drawn together: each run's contextwise.json read other text "
                "(another store or held-out part) or with other settings (pieces)"
            )
        )
    elif len(groups) > MAX_GROUPS:
        parts.append(muted(f"{len(groups) - MAX_GROUPS} more groups of runs read on the same text not drawn"))
    return parts
