"""Training in the report: runs, sweeps, the quickstart's summary, and the data they trained on.

Each function turns the files of one artifact into one HTML section: a run (metrics.jsonl, its
loss curve, its evaluations, config.toml), a token store (meta.json), a packed store
(pack_stats.json), a sweep (results.csv, compute_optimal.json and its plots) and a quickstart
summary (summary.json). Trade-off: the loss curve is drawn here from the metrics, the one plot
the report makes itself, so a run shows its curve even when training never drew one; it is drawn
in memory and embedded in the page, never saved in the run folder the report reads.
"""

from __future__ import annotations

import csv
import html
import json
import re
import shlex
from pathlib import Path

from contextlab import rundir
from contextlab.report.blocks import img, keys, muted, png_img, pre, table
from contextlab.report.details import optimal_context_results, optimal_context_section
from contextlab.report.evals import eval_sections, read_results
from contextlab.report.plots import loss_curve_png
from contextlab.sweep.results import recorded_status, rewritten_evals

VAL_OWN = "validation loss (its objective's)"
VAL_LM = "left-to-right validation loss"
OWN_LOSS_NOTE = (
    "each run's validation loss is its objective's own (multi-token prediction: all heads; masked LM: the "
    "masked tokens; span corruption: the target spans), which other objectives' do not compare with: rank "
    "objectives by the left-to-right validation loss (empty for objectives that cannot run left to right)"
)


def run_section(run: Path, title: str | None = None) -> tuple[str, dict]:
    """HTML for one training run directory, and its key numbers."""
    parts, key = [f"<h2>{html.escape(title or 'Run ' + run.name)}</h2>"], {}
    rows = rundir.read_metrics(run)
    if rows:
        s = rundir.summarize(rows)
        objective = (rundir.read_config(run).get("objective") or {}).get("name")
        key = {
            **({"objective": objective} if objective else {}),
            "steps": s["steps"],
            "train loss": s["train_loss"],
            **({VAL_OWN: s["val_loss"]} if "val_loss" in s else {}),
            **({"validated on": on} if "val_loss" in s and (on := validated_on(run)) else {}),
            # the one loss every objective that runs left to right shares (a clm's is its own loss; it was
            # left out where equal, so the column to rank objectives by lacked the baseline)
            **({VAL_LM: s["val_lm_loss"]} if s.get("val_lm_loss") is not None else {}),
        }
        parts.append(keys(key))
        parts += [muted(line) for line in schedule_notes(run)]
        parts.append(png_img(loss_curve_png(rows, run.name), "loss curve"))
    eval_dir = rundir.eval_dir(run)
    parts += eval_sections(eval_dir, read_results(eval_dir), newest_step=_newest_step(run))
    cfg = run / rundir.CONFIG
    if cfg.exists():
        parts.append(
            "<details><summary>resolved config and command</summary>"
            + pre(f"contextlab train {shlex.quote(str(cfg))}")
            + pre(cfg.read_text())
            + "</details>"
        )
    return "\n".join(parts), key


def _newest_step(run: Path) -> int | None:
    """The step of the run's newest checkpoint (None without one or when it cannot be read)."""
    latest = rundir.latest_checkpoint(run)
    try:
        step = json.loads((latest / rundir.STATE).read_text()).get("step") if latest else None
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) else None


def schedule_notes(run: Path) -> list[str]:
    """One line per budget change on resume (``schedule_changes`` of the newest checkpoint): from that
    step the learning rate followed another schedule, so the run equals no single budget."""
    latest = rundir.latest_checkpoint(run)
    try:
        changes = json.loads((latest / rundir.STATE).read_text()).get("schedule_changes") if latest else None
    except (OSError, ValueError, AttributeError):
        return []
    return [
        f"resumed at step {step:,} with a new budget: the learning-rate schedule of {old:,} steps became one "
        f"of {new:,}, so this run equals neither budget run uninterrupted"
        for step, old, new in changes or []
    ]


def store_section(store: Path) -> str:
    meta = json.loads((store / "meta.json").read_text())
    tok = meta.get("tokenizer", {})
    rows = [
        {
            "documents": meta["n_docs"],
            "tokens": meta["n_tokens"],
            "tokenizer": tok.get("name"),
            "vocab": tok.get("vocab_size"),
            "source": meta.get("source", {}).get("path", ""),
        }
    ]
    out = f"<h3>Token store {html.escape(store.name)}</h3>" + table(rows)
    png = store / "doc_lengths.png"
    return out + (img(png, f"{store.name} document lengths") if png.exists() else "")


def packed_section(packed: Path, root: Path) -> str:
    """A packed store: its method and sizes (meta.json), the diagnostics of ``contextlab data pack-stats``
    when it has run (pack_stats.json beside them) and their plot; else the command that makes them."""
    meta = json.loads((packed / "meta.json").read_text())
    stats_file = packed / "pack_stats.json"
    if not stats_file.is_file():
        row = {
            "packed store": str(packed.relative_to(root)),
            "method": (meta.get("config") or {}).get("method"),
            "sequences": meta.get("n_sequences"),
            "tokens": meta.get("n_tokens"),
            "held out for validation": _held_out(meta),
        }
        return table([row]) + muted(
            f"no diagnostics yet: `contextlab data pack-stats {packed}` writes them (documents per sequence, "
            "neighbour similarity, Zipf)"
        )
    st = json.loads(stats_file.read_text())
    row = {
        "packed store": str(packed.relative_to(root)),
        "method": st.get("method"),
        "retriever": st.get("retriever") or "",
        "sequences": st.get("n_sequences"),
        "docs/sequence": (st.get("docs_per_sequence") or {}).get("mean"),
        "neighbour similarity": st.get("mean_neighbour_similarity")
        if st.get("mean_neighbour_similarity") is not None
        else "",
        "sequences with >= 2 related docs": st.get("frac_sequences_ge2_related"),
        "directories/sequence": st.get("directories_per_sequence"),
        "zipf": (st.get("zipf") or {}).get("mean"),
        "held out for validation": _held_out(meta),
    }
    png = packed / "pack_stats.png"
    return table([row]) + (img(png, f"{packed.name} packing diagnostics") if png.exists() else "")


def _held_out(meta: dict) -> str:
    """The documents a packed store was packed without (``data pack --val-fraction``), in words."""
    held = meta.get("heldout")
    if not held:
        return "none (a run holds out sequences)"
    n = held["documents"]
    return f"{n:,} document{'s' * (n != 1)} (val_fraction {held['val_fraction']:g})"


def summary_section(root: Path) -> str:
    """OUT/summary.json (format contextlab-summary): a headline table, notes and figures, shown first."""
    doc = json.loads((root / "summary.json").read_text())
    parts = ["<h2>Headline</h2>", table(doc.get("headline") or [])]
    parts += [f'<p class="muted">{html.escape(n)}</p>' for n in doc.get("notes") or []]
    for name in doc.get("figures") or []:
        if (root / name).exists():
            parts.append(img(root / name, name))
    timing = doc.get("seconds_by_step") or {}
    if timing:
        parts.append(
            "<details><summary>wall time of each step (seconds)</summary>"
            + table([{"step": k, "seconds": v} for k, v in timing.items()])
            + "</details>"
        )
    return "\n".join(parts)


def _results(sweep: Path) -> list[dict]:
    with open(sweep / "results.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _stopped_note(sweep: Path, gone: list[str]) -> list[str]:
    """The line under a sweep's table for the runs ``_with_stopped_runs`` found stopped (none: [])."""
    if not gone:
        return []
    text = (
        f"stopped, not running: {', '.join(gone)} (results.csv says running, but the sweep that ran them "
        "was killed: its process is gone). They are unfinished and not in the analysis below; run the "
        f"sweep again (contextlab sweep {sweep / 'sweep.toml'}) to finish them and refresh both"
    )
    return [f"<p><b>{html.escape(text)}</b></p>"]


def _with_stopped_runs(sweep: Path, rows: list[dict]) -> tuple[list[dict], list[str]]:
    """``rows`` with "stopped" for each run results.csv says is running whose sweep process is gone
    (a sweep killed with ``kill -9`` has no way out to record it), and those runs' names."""
    gone = []
    for row in rows:
        name = row.get("run") or ""
        if (
            row.get("status") == "running"
            and recorded_status(sweep / "runs" / name).get("status") == "stopped"
        ):
            row["status"] = "stopped"
            gone.append(name)
    return rows, gone


def stale_runs(root: Path) -> set[str]:
    """The run names a sweep's results.csv marks stale (trained with another config than its sweep
    file's); empty outside a sweep folder."""
    if not (root / "results.csv").is_file():
        return set()
    return {r.get("run") for r in _results(root) if r.get("status") == "stale"}


def natural_key(path: Path) -> list:
    """A path's name split into text and numbers, so that context-64 sorts before context-128."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def validated_on(run: Path) -> str | None:
    """What the run's validation loss reads, in words: its held-out documents (how many, when its
    packed store says), held-out sequences, document tails or a validation store, and the first digits
    of the hash of its validation rows (runs with one hash score the same text). None without a config."""
    data = rundir.read_config(run).get("data") or {}
    if not data:
        return None
    if data.get("val_store"):
        what = f"data.val_store {Path(data['val_store']).name}"
    elif data.get("packed") or data.get("mixture"):
        held = _packs_held_out(run, data)
        what = held or f"{float(data.get('val_fraction', 0.02)):g} of its packed sequences"
    elif data.get("val_split") == "tail":
        what = f"the last {float(data.get('val_fraction', 0.02)):g} of each document"
    else:
        seed = data.get("split_seed", 0)
        what = f"{float(data.get('val_fraction', 0.02)):g} of the documents (split_seed {seed})"
    rows = (rundir.data_record(run) or {}).get("validation_rows")
    return what + (f", rows {rows[:8]}" if rows else "")


def _packs_held_out(run: Path, data: dict) -> str | None:
    """'8 documents held out by its pack' when every packed store of the run held documents out."""
    paths = [data["packed"]] if data.get("packed") else [m.get("packed") for m in data.get("mixture") or []]
    base = rundir.trained_in(run)
    counts = []
    for p in paths:
        path = Path(str(p))
        path = path if path.is_absolute() or base is None else base / path
        try:
            held = json.loads((path / "meta.json").read_text()).get("heldout")
        except (OSError, ValueError):
            return None
        if not held:
            return None
        counts.append(held["documents"])
    n = max(counts) if counts else 0
    return (
        f"{n:,} document{'s' * (n != 1)} held out by its pack{'s' * (len(counts) != 1)}" if counts else None
    )


def outside_grid(sweep: Path) -> list[Path]:
    """The runs in SWEEP/runs/ that are no row of its results.csv: runs of a grid value the sweep
    file no longer has. The sweep keeps their folders but leaves them out of its results and analysis."""
    if not (sweep / "results.csv").is_file() or not (sweep / "runs").is_dir():
        return []
    names = {row.get("run") for row in _results(sweep)}
    return sorted(p for p in (sweep / "runs").iterdir() if p.name not in names and rundir.is_run(p))


def sweep_section(sweep: Path) -> str:
    parts = ["<h2>Sweep results</h2>"]
    rows, gone = _with_stopped_runs(sweep, _results(sweep))
    parts += [table(rows), *_stopped_note(sweep, gone)]
    left_out = outside_grid(sweep)
    if left_out:
        names = ", ".join(str(p.relative_to(sweep)) for p in left_out)
        parts.append(
            muted(
                f"not in this sweep's grid (its sweep file has other values): {names}; their folders are "
                "kept and shown below, but they are in neither this table nor the compute-optimal analysis"
            )
        )
    rewritten = rewritten_evals(sweep)
    if rewritten:
        names = "; ".join(f"{run} ({', '.join(evals)})" for run, evals in rewritten.items())
        parts.append(
            "<p><b>"
            + html.escape(
                f"evaluations rewritten since the sweep made this table: {names}. This table and the "
                "analysis below hold the sweep's numbers, the runs' sections below the new files; run the "
                f"sweep again (contextlab sweep {sweep / 'sweep.toml'}) to evaluate them as its eval_args "
                "say and refresh both"
            )
            + "</b></p>"
        )
    co = sweep / "compute_optimal.json"
    if co.exists():
        res = json.loads(co.read_text())
        parts.append("<h2>Compute-optimal context</h2>")
        if res.get("warning"):  # ranked by a mean loss on request (contextlab.sweep.compute_optimal)
            parts.append(f"<p><b>{html.escape(res['warning'])}</b></p>")
        axis = res.get("budget_key") or "budget"
        size_key = res.get("size_key") or "model.size"
        model = "model" if size_key == "model.size" else size_key.split(".")[-1]  # n_embd for a grid over it
        best = [
            {
                axis: b if res.get("budget_key") else "all runs",
                model: o["best"]["size"],
                "context": o["best"]["context"],
                res["metric"]: o["best"]["loss"],
                **_margins(res, b, o["best"]["size"]),
            }
            for b, o in res["optimal"].items()
        ]
        parts.append(table(best))
        parts += [muted(f"note: {note}") for note in res.get("notes") or []]
        for name in ("u_curves.png", "optimal_context.png", "gap_curves.png"):
            if (sweep / name).exists():
                parts.append(img(sweep / name, name))
    if (sweep / "sweep.toml").exists():
        parts.append(
            "<details><summary>sweep file and command</summary>"
            + pre(f"contextlab sweep {shlex.quote(str(sweep / 'sweep.toml'))}")
            + pre((sweep / "sweep.toml").read_text())
            + "</details>"
        )
    return "\n".join(parts)


def _margins(res: dict, budget: str, size) -> dict:
    """The table's columns for the paired margins of the optimum (compute_optimal.json's ``paired``):
    the other contexts its interval cannot tell from it, and over how many documents ({} without)."""
    m = (res.get("paired") or {}).get(budget, {}).get(str(size))
    if not m:
        return {}
    if m.get("skipped"):
        return {"not told apart from it (paired, 95%)": f"not paired: {m['skipped']}"}
    from contextlab.sweep.compute_optimal import margins_parts

    how, parts = margins_parts(m)
    within = ", ".join(str(c) for c in m["within_noise"]) or "none"
    return {
        "not told apart from it (paired, 95%)": within,
        f"each other context - context {m['optimum']} (95%)": parts,
        "paired": how,
    }


def _format_of(meta: Path) -> str | None:
    """The ``format`` of a meta.json (None for one that is not a JSON object: not contextlab's)."""
    try:
        doc = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    return doc.get("format") if isinstance(doc, dict) else None


def data_sections(root: Path) -> list[str]:
    """The token stores, packed stores and sweep results found under ``root``."""
    body = []
    formats = {p.parent: _format_of(p) for p in root.rglob("meta.json")}
    stores = sorted(p for p, f in formats.items() if f == "contextlab-token-store")
    if stores:
        body.append("<h2>Data</h2>" + "".join(store_section(s) for s in stores))
    packs = sorted(p for p, f in formats.items() if f == "contextlab-packed-store")
    if packs:
        body.append("<h2>Packing</h2>" + "".join(packed_section(f, root) for f in packs))
    if (root / "results.csv").exists():
        body.append(sweep_section(root))
    body += [optimal_context_section(f, root) for f in optimal_context_results(root)]
    return body
