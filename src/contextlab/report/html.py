"""``contextlab report DIR``: one self-contained HTML page for a run, a sweep or a quickstart.

The report reads result files only (metrics.jsonl, config.toml, eval/*.json and their PNGs,
results.csv, compute_optimal.json): it never imports a model or the trainer, so it can be
built anywhere the files are, long after the runs. Plots are embedded as base64 PNGs, so
the page is one file that can be mailed or archived. A small script marks the page once
every image has decoded (``data-images-ok``), which is how the test checks in a real
browser that every plot is displayed.
"""

from __future__ import annotations

import base64
import csv
import html
import json
from pathlib import Path

from contextlab.io import atomic_write_text
from contextlab.report.plots import loss_curve_png

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
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
    if isinstance(v, str) and v and v.lstrip("-").replace(".", "", 1).replace("e", "", 1).replace("-", "").isdigit():
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
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c, ''))}</td>" for c in columns) + "</tr>"
                   for r in rows[:limit])
    more = f'<p class="muted">{len(rows) - limit} more rows in the file</p>' if len(rows) > limit else ""
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def _pre(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


def _scalars(d: dict) -> dict:
    return {k: v for k, v in d.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool) and len(str(v)) < 80}


# ---------------------------------------------------------------------------- sections


def run_section(run: Path, title: str | None = None) -> tuple[str, dict]:
    """HTML for one training run directory, and its key numbers."""
    parts, key = [f"<h2>{html.escape(title or 'Run ' + run.name)}</h2>"], {}
    metrics = run / "metrics.jsonl"
    if metrics.exists():
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        if rows:
            last = rows[-1]
            vals = [r["val_loss"] for r in rows if "val_loss" in r]
            key = {"steps": last["step"], "train loss": last["loss"], **({"validation loss": vals[-1]} if vals else {})}
            parts.append("".join(f'<span class="key">{html.escape(k)} <b>{_fmt(v)}</b></span>' for k, v in key.items()))
            png = loss_curve_png(rows, run / "loss_curve.png", title=run.name)
            parts.append(_img(png, "loss curve"))
    eval_dir = run / "eval"
    for f in sorted(eval_dir.glob("*.json")) if eval_dir.exists() else []:
        try:
            data = json.loads(f.read_text())
        except ValueError:
            continue
        parts.append(f"<h3>Evaluation: {html.escape(f.stem)}</h3>")
        parts.append(_table([_scalars(data)]))
        for png in sorted(eval_dir.glob(f"{f.stem}*.png")):
            parts.append(_img(png, f"{f.stem} plot"))
        cmd = data.get("command") or f"contextlab eval {f.stem} --model {run}"
        parts.append(f"<details><summary>reproduce</summary>{_pre(cmd if isinstance(cmd, str) else ' '.join(cmd))}</details>")
    cfg = run / "config.toml"
    if cfg.exists():
        parts.append("<details><summary>resolved config and command</summary>"
                     + _pre(f"contextlab train {cfg}") + _pre(cfg.read_text()) + "</details>")
    return "\n".join(parts), key


def store_section(store: Path) -> str:
    meta = json.loads((store / "meta.json").read_text())
    tok = meta.get("tokenizer", {})
    rows = [{"documents": meta["n_docs"], "tokens": meta["n_tokens"], "tokenizer": tok.get("name"),
             "vocab": tok.get("vocab_size"), "source": meta.get("source", {}).get("path", "")}]
    out = f"<h3>Token store {html.escape(store.name)}</h3>" + _table(rows)
    png = store / "doc_lengths.png"
    return out + (_img(png, f"{store.name} document lengths") if png.exists() else "")


def sweep_section(sweep: Path) -> str:
    parts = ["<h2>Sweep results</h2>"]
    with open(sweep / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    parts.append(_table(rows))
    co = sweep / "compute_optimal.json"
    if co.exists():
        res = json.loads(co.read_text())
        parts.append("<h2>Compute-optimal context</h2>")
        best = [{"budget": b, "model": o["best"]["size"], "context": o["best"]["context"], res["metric"]: o["best"]["loss"]}
                for b, o in res["optimal"].items()]
        parts.append(_table(best))
        for name in ("u_curves.png", "optimal_context.png"):
            if (sweep / name).exists():
                parts.append(_img(sweep / name, name))
    if (sweep / "sweep.toml").exists():
        parts.append("<details><summary>sweep file and command</summary>"
                     + _pre(f"contextlab sweep {sweep / 'sweep.toml'}") + _pre((sweep / "sweep.toml").read_text())
                     + "</details>")
    return "\n".join(parts)


# ---------------------------------------------------------------------------- page


def find_runs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("metrics.jsonl"))


def build_report(directory: str | Path, out: str | Path | None = None, title: str | None = None,
                 headline: dict | None = None) -> Path:
    """Write DIR/report.html (or ``out``) for a run, a sweep, or any folder of runs and stores."""
    root = Path(directory)
    from contextlab.errors import UserError

    if not root.is_dir():
        raise UserError(f"report: {root} is not a directory")
    body = []
    if headline:
        body.append("<p>" + "".join(f'<span class="key">{html.escape(k)} <b>{_fmt(v)}</b></span>'
                                    for k, v in headline.items()) + "</p>")
    stores = sorted(p.parent for p in root.rglob("meta.json")
                    if json.loads(p.read_text()).get("format") == "contextlab-token-store")
    if stores:
        body.append("<h2>Data</h2>" + "".join(store_section(s) for s in stores))
    if (root / "results.csv").exists():
        body.append(sweep_section(root))
    runs = find_runs(root)
    summary = []
    for run in runs[:50]:
        section, key = run_section(run, f"Run {run.relative_to(root) if run != root else run.name}")
        body.append(section)
        summary.append({"run": str(run.relative_to(root)) if run != root else run.name, **key})
    if len(runs) > 1:
        body.insert(1 if headline else 0, "<h2>Runs</h2>" + _table(summary))
    if not body:
        raise UserError(f"report: nothing to report in {root} (no runs, token stores or sweep results)")
    title = title or f"contextlab report: {root.resolve().name}"
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p class='muted'>{html.escape(str(root.resolve()))}</p>" + "\n".join(body) + CHECK + "</body></html>")
    out = Path(out) if out else root / "report.html"
    atomic_write_text(out, page)
    return out
