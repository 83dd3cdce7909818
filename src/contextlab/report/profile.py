"""A profile folder in the report: what ``contextlab profile`` measured, from its files alone.

``OUT/profile.json`` (format ``contextlab-profile``) names the models, the data, the budget and
the context, lists each step with its status (done, failed, skipped, pending), time and error,
and carries the headline table; the evaluations themselves are ordinary result files in
``OUT/models/<label>/``, and the paired comparisons ``contextlab compare`` files in
``OUT/<compare>/`` (with any analysis of the pair, such as attention, beside them). The page
shows the headline, the steps (and which results are missing), each model's evaluations and
the comparisons.

Trade-off: the headline table is taken as profile.json states it (values, b - a, its interval)
and never recomputed from the result files, so the page and the command's printout agree; the
sections below it show the result files the numbers came from.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from contextlab.report.blocks import keys, muted, plain, pre, shared_decimals, table
from contextlab.report.blocks import with_interval as interval_text
from contextlab.report.evals import compare_sections, eval_folder_section, eval_sections, read_results

FORMAT = "contextlab-profile"
FILE = "profile.json"


def read_profile(root: Path) -> dict | None:
    """OUT/profile.json when ``root`` is a profile folder, else None."""
    try:
        doc = json.loads((root / FILE).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("format") == FORMAT else None


def labels(doc: dict) -> list[str]:
    return [str(m.get("label")) for m in doc.get("models") or [] if isinstance(m, dict)]


def title(doc: dict) -> str:
    return "contextlab profile: " + " vs ".join(labels(doc) or ["(no models)"])


def profile_sections(root: Path, doc: dict) -> list[str]:
    """The sections of a profile page, in reading order."""
    models = [m for m in doc.get("models") or [] if isinstance(m, dict)]
    setup = {
        "budget": doc.get("budget"),
        "data": doc.get("data"),
        "context": doc.get("context"),
        "created": doc.get("created"),
        "seconds": doc.get("seconds"),
    }
    parts = [
        keys({k: v for k, v in setup.items() if v is not None}),
        table([_model_row(m, doc) for m in models]),
    ]
    if doc.get("command"):
        parts.append("<p>command:</p>" + pre(str(doc["command"])))
    unfinished = unfinished_note(doc)
    if unfinished:
        parts.insert(0, f"<p><b>{html.escape(unfinished)}</b></p>")
    body = ["\n".join(parts), headline_section(doc), steps_section(root, doc)]
    for m in models:
        folder = root / str(m.get("results") or "")
        if m.get("results") and folder.is_dir():
            body.append(eval_folder_section(folder, f"Model {m.get('label')}: {m.get('path')}"))
        else:
            body.append(f"<h2>Model {html.escape(str(m.get('label')))}</h2>" + muted("no results yet"))
    body += pair_sections(root, doc, labels(doc))
    return body


def _model_row(m: dict, doc: dict) -> dict:
    """A model of the profile: label, path, results folder, and what the profile said of it (its
    attention window), when it said something."""
    row = {"model": m.get("label"), "path": m.get("path"), "results": m.get("results")}
    notes = doc.get("model_notes") if isinstance(doc.get("model_notes"), dict) else {}
    if notes:
        row["note"] = notes.get(str(m.get("label")), "")
    return row


def unfinished_note(doc: dict) -> str:
    """What a profile that stopped before its end lacks ("" for a finished one): a profile writes its
    time taken last, after its steps, the pairing of two models and the headline; a profile killed
    after its steps otherwise reads as done, every step "done" and the comparisons simply absent."""
    if doc.get("seconds") is not None:
        return ""
    steps = [s for s in doc.get("steps") or [] if isinstance(s, dict)]
    waiting = [s for s in steps if s.get("status") == "pending"]
    lacks = [f"{len(waiting)} of its {len(steps)} steps"] if waiting else []
    if len(labels(doc)) == 2 and doc.get("compare"):
        lacks.append("the pairing of the two models (contextlab compare of each evaluation)")
    lacks.append("its headline")
    return (
        "This profile did not finish: it lacks "
        + ", ".join(lacks[:-1])
        + (" and " if lacks[:-1] else "")
        + lacks[-1]
        + ". Run its command again (below) to finish it: the steps done are kept."
    )


def pair_sections(root: Path, doc: dict, names: list[str]) -> list[str]:
    """The comparisons of two models: ``contextlab compare`` files, an analysis of the pair written
    beside them (attention), and the evaluations not compared with the reason."""
    folder = root / str(doc.get("compare") or "")
    if not doc.get("compare") or not folder.is_dir():
        return []
    out = compare_sections(folder)
    found = read_results(folder)
    if found:
        out.append(
            f"<h2>Both models: {html.escape(' and '.join(names))}</h2>"
            + "\n".join(eval_sections(folder, found))
        )
    notes = doc.get("compare_notes") if isinstance(doc.get("compare_notes"), dict) else {}
    if notes:
        out.append(
            "<h3>Not compared</h3>"
            + "<ul>"
            + "".join(f"<li>{html.escape(f'{k}: {v}')}</li>" for k, v in notes.items())
            + "</ul>"
        )
    return out


def headline_section(doc: dict) -> str:
    """measure, unit, a value per model; with two models b - a, its 95% interval and which is better."""
    names = labels(doc)
    two = len(names) == 2
    rows = []
    for h in doc.get("headline") or []:
        if not isinstance(h, dict):
            continue
        values = h.get("values") if isinstance(h.get("values"), dict) else {}
        intervals = h.get("intervals") if isinstance(h.get("intervals"), dict) else {}
        row = {"measure": h.get("measure"), "unit": h.get("unit") or ""}
        d = shared_decimals((values.get(n), intervals.get(n)) for n in names)  # one measure, aligned
        row.update({n: with_interval(values.get(n), intervals.get(n), d) for n in names})
        if two:
            row[f"{names[1]} − {names[0]}"] = h.get("diff")
            row["95% interval"] = h.get("ci95")
            row["better"] = better(h, *names)
        else:
            row["better is"] = h.get("better") or ""
        chance = f"chance {plain(h['chance'])}" if h.get("chance") is not None else ""
        row["note"] = "; ".join(t for t in (chance, str(h.get("note") or "")) if t)
        rows.append(row)
    out = "<h2>Headline</h2>" + table(rows)
    if two and doc.get("compare"):
        out += muted(
            f"differences here are {names[1]} − {names[0]}; the comparisons below are A - B as "
            "`contextlab compare` writes them, with A and B named in each heading"
        )
    return out


def with_interval(value, interval, decimals: int | None = None):
    """A model's value, with its own 95% interval when the row has one, to the decimals the interval's
    width needs (``blocks.with_interval``: "10.84 [10.8, 10.8]" hid [10.823, 10.849]), or the row's
    ``decimals`` where those are more."""
    if value is None or not isinstance(interval, list):
        return value
    return interval_text(value, interval, decimals)


def better(h: dict, a: str, b: str) -> str:
    """Which model is better on one headline measure: the one its 95% interval of b - a points to,
    "no clear difference" when the interval holds 0, the sign alone (said so) without an interval."""
    diff, ci, lower = h.get("diff"), h.get("ci95"), h.get("better") == "lower"
    if not isinstance(diff, (int, float)) or h.get("better") not in ("lower", "higher"):
        return "—"
    word = f"({h['better']} is better)"
    b_wins = diff < 0 if lower else diff > 0
    if h.get("few_clusters"):  # a bootstrap over fewer than 10 clusters: its interval is too narrow
        ahead = "equal here" if diff == 0 else f"{b if b_wins else a} ahead"
        return f"too few sets to tell ({ahead}) {word}"
    if isinstance(ci, list) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci):
        if ci[0] <= 0 <= ci[1]:
            return f"no clear difference {word}"
        return f"{b if b_wins else a} {word}"
    if diff == 0:
        return "equal"
    return f"{b if b_wins else a}, by the sign alone (no interval) {word}"


def steps_section(root: Path, doc: dict) -> str:
    """Every step with its status and time; the results still missing said in one line."""
    steps = [s for s in doc.get("steps") or [] if isinstance(s, dict)]
    rows = [
        {
            "step": s.get("name"),
            "model": s.get("model") or "",
            "status": s.get("status"),
            "seconds": s.get("seconds"),
            "result": s.get("result") or "",
            "error or reason": s.get("error") or "",
        }
        for s in steps
    ]
    missing = [
        f"{s.get('name')}" + (f" of {s.get('model')}" if s.get("model") else "") + f" ({why})"
        for s in steps
        if (why := _missing(root, s))
    ]
    out = "<h2>Steps</h2>" + table(rows)
    if missing:
        out += f"<p><b>Missing:</b> {html.escape(', '.join(missing))}</p>"
    return out


def _missing(root: Path, step: dict) -> str:
    """Why a step's result is not on the page ("" when it is, or when the step writes none)."""
    if step.get("status") != "done":
        return str(step.get("status") or "not run")
    if step.get("result") and not (root / str(step["result"])).is_file():
        return f"done, but {step['result']} is not there"
    return ""
