"""Tables of the rows a result holds beyond its summary: the entropy analysis per context, and an
``optimal-context`` sweep's grid.

``analyze entropy`` writes one row per visible context (CE, the Bayes risk and excess on parity, the
intrinsic entropies and dimensions) and one Pearson r per measure; its summary names only the best
measure, so without these tables a report shows none of the numbers the analysis is about. An
``optimal-context`` folder holds ``results.json`` (every cell's best validation loss, the Bayes risk
per context, the optimum per training-set size and the notes), which no other section reads. Both
are read from the result files alone, like every section of the report. Trade-off: the entropy table
shows every measure the analysis computed, so it is wide; the page's tables wrap, and one of more than
8 columns scrolls in its own box.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from contextlab.report.blocks import img, kv_table, muted, pre, table

OPTIMAL_CONTEXT_FORMAT = "contextlab-optimal-context"


def entropy_tables(doc: dict) -> str:
    """The per-context table and the Pearson r of each measure against the loss (and the Bayes risk)."""
    res = doc.get("results") if isinstance(doc.get("results"), dict) else {}
    per = res.get("contexts") or []
    if not per:
        return ""
    rows = []
    for r in per:
        row = {"context": r.get("context"), "CE": r.get("ce"), "CE se": r.get("ce_stderr")}
        for key in ("bayes_risk", "excess", "excess_stderr", "ce_task_weighted"):
            if key in r:
                row[key.replace("_", " ")] = r[key]
        row |= {f"S@{k}": v for k, v in (r.get("entropy") or {}).items()}
        row |= {f"dim@{k}": v for k, v in (r.get("dimension") or {}).items()}
        row |= {k: r[k] for k in ("kde_entropy", "twonn", "mle", "lpca") if k in r}
        rows.append(row)
    parts = ["<p>per visible context (a measure with no value at a context is empty: the notes say why)</p>"]
    parts.append(table(rows))
    fits = [("CE", res.get("fits_vs_ce") or {}), ("Bayes risk", res.get("fits_vs_bayes") or {})]
    r_rows = [
        {"measure": name, **{f"r vs {what}": (f.get(name) or {}).get("r") for what, f in fits if f}}
        for name in (res.get("fits_vs_ce") or {})
    ]
    if r_rows:
        parts += ["<p>Pearson r of each measure across the contexts</p>", table(r_rows)]
    return "\n".join(parts)


def infill_tables(doc: dict) -> str:
    """One row per span kind and mode: the spans, exact match with its Wilson interval (and of the first n
    lines for blocks), the true middle's loss, and how many generations agreed with the forced scores
    (the summary's bare rates hid that a kind rested on 4 spans, and every interval)."""
    from contextlab.report.blocks import shared_decimals, with_interval

    res = doc.get("results") if isinstance(doc.get("results"), dict) else {}
    modes = [m for k in (res.get("kinds") or {}).values() for m in (k.get("modes") or {}).values()]

    def column(key: str) -> int | None:  # one column's decimals: its rows align
        cells = [m.get(key) or {} for m in modes]
        return shared_decimals((c.get("accuracy"), c.get("ci95")) for c in cells)

    d_em, d_lines = column("exact_match"), column("exact_match_n_lines")
    rows = []
    for kind, k in (res.get("kinds") or {}).items():
        for mode, m in (k.get("modes") or {}).items():
            em, lines = m.get("exact_match") or {}, m.get("exact_match_n_lines") or {}
            check = m.get("generation_check") or {}
            row = {"kind": f"{kind}-line", "mode": mode, "spans": k.get("n")}
            row["exact match (95%)"] = with_interval(em.get("accuracy"), em.get("ci95"), d_em)
            if lines:
                row["first n lines (95%)"] = with_interval(lines.get("accuracy"), lines.get("ci95"), d_lines)
            row |= {"nats/token": m.get("nll_per_token"), "bits/byte": m.get("bits_per_byte")}
            row["generated, agreeing"] = f"{check.get('agree', 0)} of {check.get('generated', 0)}"
            rows.append(row)
    if not rows:
        return ""
    return "<p>per span kind and mode (exact match of greedy decoding, Wilson 95% interval)</p>" + table(rows)


DETAILS = {"entropy": entropy_tables, "infill": infill_tables}  # eval name -> the tables of its rows


def optimal_context_results(root: Path) -> list[Path]:
    """The ``results.json`` files of optimal-context sweeps under ``root`` (its own first)."""
    found = []
    for f in sorted(root.rglob("results.json")):
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if is_optimal_context(doc):
            found.append(f)
    return found


def is_optimal_context(doc) -> bool:
    """An optimal-context sweep's results (by its format, or its keys for files written before it)."""
    if not isinstance(doc, dict):
        return False
    return doc.get("format") == OPTIMAL_CONTEXT_FORMAT or {"cells", "optimal_context", "bayes_risk"} <= set(
        doc
    )


def optimal_context_section(f: Path, root: Path) -> str:
    """One sweep: the grid of best validation losses with the Bayes risk rows, the optimum per data size,
    its notes and plot, and the command that resumes or repeats it."""
    doc = json.loads(f.read_text(encoding="utf-8"))
    cfg, cells = doc.get("config") or {}, doc.get("cells") or {}
    contexts, sizes = cfg.get("contexts") or [], cfg.get("data_sizes") or []
    where = f.parent.relative_to(root) if f.parent != root else Path(f.parent.name)
    rows = [{"D": "Bayes risk", **{str(l): doc["bayes_risk"].get(str(l)) for l in contexts}}]
    if "bayes_on_validation" in doc:
        rows.append(
            {"D": "Bayes, validation set", **{str(l): doc["bayes_on_validation"][str(l)] for l in contexts}}
        )
    for D in sizes:
        best = (doc.get("optimal_context") or {}).get(str(D)) or {}
        row = {"D": D, **{str(l): (cells.get(f"{D}/{l}") or {}).get("best_val_loss") for l in contexts}}
        if best:
            from contextlab.sweep.optimal_context import optimum_words

            row["optimal l"] = optimum_words(best)
        rows.append(row)
    parts = [
        f"<h2>Optimal context vs training-set size: {html.escape(str(where))}</h2>",
        "<p>best validation CE (nats) per training-set size D (rows) and visible context l (columns)</p>",
        table(rows),
    ]
    text = doc.get("text") or []
    if text:
        parts.append("<ul>" + "".join(f"<li>{html.escape(str(t))}</li>" for t in text) + "</ul>")
    png = f.parent / "optimal_context.png"
    if png.is_file():
        parts.append(img(png, "optimal context plot"))
    parts.append("<p>run again (finished cells are skipped):</p>" + pre(_command(cfg, f.parent.resolve())))
    parts.append(muted("every option as the sweep recorded it; a changed one is refused for this out_dir"))
    parts.append("<details><summary>options</summary>" + kv_table(cfg) + "</details>")
    return "\n".join(parts)


def _command(cfg: dict, folder: Path) -> str:
    """``contextlab optimal-context`` with every recorded option (``--set key=value``), the folder last."""
    import shlex

    def value(v) -> str:
        if isinstance(v, list):
            return "[" + ",".join(str(x) for x in v) + "]"
        return str(v).lower() if isinstance(v, bool) else str(v)

    args = ["contextlab", "optimal-context"]
    for key, v in cfg.items():
        if key != "out_dir":
            args += ["--set", f"{key}={value(v)}"]
    return shlex.join([*args, "--set", f"out_dir={folder}"])  # where the results are now (resumes them)
