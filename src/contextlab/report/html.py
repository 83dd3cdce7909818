"""``contextlab report DIR``: one self-contained HTML page for a run, a sweep or a quickstart.

The report reads result files only (metrics.jsonl, config.toml, eval/*.json and their PNGs,
results.csv, compute_optimal.json, a packed store's pack_stats.json, a pipeline's summary.json
with its headline table and figures, ``contextlab compare``'s compare_*.json and plots): it never
imports a model or the trainer, so it can be built anywhere the files are, long after the runs.
Plots are embedded as base64 PNGs, so the page is one file that can be mailed or archived. A
small script marks the page once every image has decoded (``data-images-ok``), which is how the
test checks in a real browser that every plot is displayed.
"""

from __future__ import annotations

import base64
import csv
import html
import json
from pathlib import Path

from contextlab import rundir
from contextlab.io import atomic_write_text
from contextlab.report.plots import loss_curve_png

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1100px;margin:2em auto;
  padding:0 1em;color:#222}
h1{font-size:1.6em;margin-bottom:.2em} h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
h3{margin-bottom:.3em} table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right} th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left} img{max-width:100%;border:1px solid #eee;margin:.4em 0}
pre{background:#f7f7f7;padding:.6em;overflow:auto;font-size:.8em} .muted{color:#777}
.key{display:inline-block;margin:0 1.2em .4em 0}.key b{font-size:1.3em}
details{margin:.4em 0}
"""
CHECK = """
<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.every(function (i) { return i.complete && i.naturalWidth > 0; });
  document.body.setAttribute('data-images', String(imgs.length));
  document.body.setAttribute('data-images-ok', ok ? 'yes' : 'no');
});
</script>
"""


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _fmt(v) -> str:
    if (
        isinstance(v, str)
        and v
        and v.lstrip("-").replace(".", "", 1).replace("e", "", 1).replace("-", "").isdigit()
    ):
        try:
            v = float(v) if any(c in v for c in ".e") else int(v)
        except ValueError:
            pass
    if isinstance(v, float):
        return f"{v:.4g}"
    return html.escape(str(v))


def _table(rows: list[dict], columns: list[str] | None = None, limit: int = 200) -> str:
    if not rows:
        return '<p class="muted">(none)</p>'
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_fmt(r.get(c, ''))}</td>" for c in columns) + "</tr>" for r in rows[:limit]
    )
    more = f'<p class="muted">{len(rows) - limit} more rows in the file</p>' if len(rows) > limit else ""
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def _pre(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


def _scalars(d: dict) -> dict:
    return {
        k: v
        for k, v in d.items()
        if isinstance(v, (int, float, str)) and not isinstance(v, bool) and len(str(v)) < 80
    }


# ---------------------------------------------------------------------------- sections


def eval_scalars(doc: dict) -> dict:
    """The headline numbers of an eval/<name>.json: its results' summary, else its top-level scalars."""
    summary = (doc.get("results") or {}).get("summary") if isinstance(doc.get("results"), dict) else None
    if isinstance(summary, dict) and summary:
        out = _scalars(summary)
        if isinstance(doc.get("seconds"), (int, float)):
            out["seconds"] = doc["seconds"]
        return out
    return _scalars(doc)


def run_section(run: Path, title: str | None = None) -> tuple[str, dict]:
    """HTML for one training run directory, and its key numbers."""
    parts, key = [f"<h2>{html.escape(title or 'Run ' + run.name)}</h2>"], {}
    rows = rundir.read_metrics(run)
    if rows:
        s = rundir.summarize(rows)
        key = {
            "steps": s["steps"],
            "train loss": s["train_loss"],
            **({"validation loss": s["val_loss"]} if "val_loss" in s else {}),
            # the objective's own loss differs from the left-to-right one: show both
            **(
                {"left-to-right validation loss": s["val_lm_loss"]}
                if s.get("val_lm_loss") not in (None, s.get("val_loss"))
                else {}
            ),
        }
        parts.append(
            "".join(f'<span class="key">{html.escape(k)} <b>{_fmt(v)}</b></span>' for k, v in key.items())
        )
        png = loss_curve_png(rows, run / "loss_curve.png", title=run.name)
        parts.append(_img(png, "loss curve"))
    eval_dir = rundir.eval_dir(run)
    for name, data in rundir.read_evals(run).items():
        parts.append(f"<h3>Evaluation: {html.escape(name)}</h3>")
        parts.append(_table([eval_scalars(data)]))
        for png in sorted(eval_dir.glob(f"{name}*.png")):
            parts.append(_img(png, f"{name} plot"))
        cmd = data.get("command") or f"contextlab eval {name} --model {run}"
        cmd = cmd if isinstance(cmd, str) else " ".join(cmd)
        parts.append(f"<details><summary>reproduce</summary>{_pre(cmd)}</details>")
    cfg = run / rundir.CONFIG
    if cfg.exists():
        parts.append(
            "<details><summary>resolved config and command</summary>"
            + _pre(f"contextlab train {cfg}")
            + _pre(cfg.read_text())
            + "</details>"
        )
    return "\n".join(parts), key


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
    out = f"<h3>Token store {html.escape(store.name)}</h3>" + _table(rows)
    png = store / "doc_lengths.png"
    return out + (_img(png, f"{store.name} document lengths") if png.exists() else "")


def packed_section(stats_file: Path, root: Path) -> str:
    """A packed store's diagnostics (pack_stats.json written beside it) and its plot."""
    st = json.loads(stats_file.read_text())
    row = {
        "packed store": str(stats_file.parent.relative_to(root)),
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
    }
    png = stats_file.parent / "pack_stats.png"
    return _table([row]) + (
        _img(png, f"{stats_file.parent.name} packing diagnostics") if png.exists() else ""
    )


def summary_section(root: Path) -> str:
    """OUT/summary.json (format contextlab-summary): a headline table, notes and figures, shown first."""
    doc = json.loads((root / "summary.json").read_text())
    parts = ["<h2>Headline</h2>", _table(doc.get("headline") or [])]
    parts += [f'<p class="muted">{html.escape(n)}</p>' for n in doc.get("notes") or []]
    for name in doc.get("figures") or []:
        if (root / name).exists():
            parts.append(_img(root / name, name))
    timing = doc.get("seconds_by_step") or {}
    if timing:
        parts.append(
            "<details><summary>wall time of each step (seconds)</summary>"
            + _table([{"step": k, "seconds": v} for k, v in timing.items()])
            + "</details>"
        )
    return "\n".join(parts)


def sweep_section(sweep: Path) -> str:
    parts = ["<h2>Sweep results</h2>"]
    with open(sweep / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    parts.append(_table(rows))
    co = sweep / "compute_optimal.json"
    if co.exists():
        res = json.loads(co.read_text())
        parts.append("<h2>Compute-optimal context</h2>")
        if res.get("warning"):  # ranked by a mean loss on request (contextlab.sweep.compute_optimal)
            parts.append(f"<p><b>{html.escape(res['warning'])}</b></p>")
        axis = res.get("budget_key") or "budget"
        best = [
            {
                axis: b,
                "model": o["best"]["size"],
                "context": o["best"]["context"],
                res["metric"]: o["best"]["loss"],
            }
            for b, o in res["optimal"].items()
        ]
        parts.append(_table(best))
        for name in ("u_curves.png", "optimal_context.png", "gap_curves.png"):
            if (sweep / name).exists():
                parts.append(_img(sweep / name, name))
    if (sweep / "sweep.toml").exists():
        parts.append(
            "<details><summary>sweep file and command</summary>"
            + _pre(f"contextlab sweep {sweep / 'sweep.toml'}")
            + _pre((sweep / "sweep.toml").read_text())
            + "</details>"
        )
    return "\n".join(parts)


def compare_sections(root: Path) -> list[str]:
    """One section per folder of ``contextlab compare`` results under ``root``: a line per result
    (A - B with its 95% interval), the notes, and the plots."""
    docs: dict[Path, list[dict]] = {}
    for f in sorted(root.rglob("compare_*.json")):
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("format") == "contextlab-compare":
            docs.setdefault(f.parent, []).append(doc)
    out = []
    for folder, found in docs.items():
        a, b = found[0]["a"]["label"], found[0]["b"]["label"]
        parts = [f"<h2>Comparison {html.escape(a)} - {html.escape(b)}</h2>", "<ul>"]
        parts += [f"<li>{html.escape(line)}</li>" for d in found for line in d.get("lines", [])]
        parts.append("</ul>")
        parts += [f'<p class="muted">{html.escape(n)}</p>' for d in found for n in d.get("notes", [])]
        parts += [_img(png, png.stem) for d in found if (png := folder / f"compare_{d['eval']}.png").exists()]
        out.append("\n".join(parts))
    return out


# ---------------------------------------------------------------------------- page


KEY_METRICS = {"contextwise": ("best_context_loss",), "niah": ("likelihood_accuracy", "contains_match")}


def eval_key(run: Path) -> dict:
    """One headline number per known evaluation of a run, for the runs table."""
    out = {}
    for name, keys in KEY_METRICS.items():
        try:
            summary = rundir.read_eval(run, name)["results"]["summary"]
        except (KeyError, TypeError):
            continue
        key = next((k for k in keys if isinstance(summary.get(k), (int, float))), None)
        if key:
            out[f"{name}.{key}"] = summary[key]
    return out


def build_report(
    directory: str | Path,
    out: str | Path | None = None,
    title: str | None = None,
    headline: dict | None = None,
) -> Path:
    """Write DIR/report.html (or ``out``) for a run, a sweep, or any folder of runs and stores."""
    root = Path(directory)
    from contextlab.errors import UserError

    if not root.is_dir():
        raise UserError(f"report: {root} is not a directory")
    body = []
    summary_file = root / "summary.json"
    if summary_file.exists() and json.loads(summary_file.read_text()).get("format") == "contextlab-summary":
        body.append(summary_section(root))
    if headline:
        body.append(_headline(headline))
    lead = len(body)  # the runs table goes right after the headline
    body += _data_sections(root)
    runs = rundir.find_runs(root)
    sections, summary = _run_sections(root, runs[:50])
    body += sections + compare_sections(root)
    if len(runs) > 1:
        body.insert(lead, "<h2>Runs</h2>" + _table(summary))
    if not body:
        raise UserError(f"report: nothing to report in {root} (no runs, token stores or sweep results)")
    title = title or f"contextlab report: {root.resolve().name}"
    out = Path(out) if out else root / "report.html"
    atomic_write_text(out, _page(title, root, body))
    return out


def _headline(headline: dict) -> str:
    """The headline numbers as one paragraph of key/value spans."""
    return (
        "<p>"
        + "".join(f'<span class="key">{html.escape(k)} <b>{_fmt(v)}</b></span>' for k, v in headline.items())
        + "</p>"
    )


def _data_sections(root: Path) -> list[str]:
    """The token stores, packed stores and sweep results found under ``root``."""
    body = []
    stores = sorted(
        p.parent
        for p in root.rglob("meta.json")
        if json.loads(p.read_text()).get("format") == "contextlab-token-store"
    )
    if stores:
        body.append("<h2>Data</h2>" + "".join(store_section(s) for s in stores))
    packs = sorted(root.rglob("pack_stats.json"))
    if packs:
        body.append("<h2>Packing</h2>" + "".join(packed_section(f, root) for f in packs))
    if (root / "results.csv").exists():
        body.append(sweep_section(root))
    return body


def _run_sections(root: Path, runs: list[Path]) -> tuple[list[str], list[dict]]:
    """One section per run, and the row of each run in the runs table."""
    sections, summary = [], []
    for run in runs:
        section, key = run_section(run, f"Run {run.relative_to(root) if run != root else run.name}")
        sections.append(section)
        summary.append(
            {"run": str(run.relative_to(root)) if run != root else run.name, **key, **eval_key(run)}
        )
    return sections, summary


def _page(title: str, root: Path, body: list[str]) -> str:
    """The whole HTML page around the sections."""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p class='muted'>{html.escape(str(root.resolve()))}</p>"
        + "\n".join(body)
        + CHECK
        + "</body></html>"
    )
