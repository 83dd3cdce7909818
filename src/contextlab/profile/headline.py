"""The profile's first table: one row per measure, read back from the result files.

Each row: the measure and its unit, which direction is better, each model's value with its
95% interval, and with two models the paired difference (second model minus first) with its
95% interval from ``contextlab compare`` (whose files hold first minus second: the sign and
the interval are turned here, once). A measure whose step failed or was skipped is left out
of the values and says why in ``note``.

Trade-off: the rows are computed when the profile ends and stored in ``profile.json``, so the
report only reads them; rebuilding the table means rerunning the (resumed, instant) profile.
"""

from __future__ import annotations

import json
from pathlib import Path


def _read(f: Path) -> dict | None:
    try:
        return json.loads(f.read_text())
    except (OSError, ValueError):
        return None


def _turn(d: dict | None) -> tuple[float | None, list[float] | None]:
    """A - B (compare's sign) -> B - A with its interval."""
    if not d or d.get("diff") is None:
        return None, None
    iv = d.get("interval95")
    return 0.0 - d["diff"], None if iv is None else [0.0 - iv[1], 0.0 - iv[0]]  # 0.0 - x: never -0.0


ONE_DOCUMENT = (  # why a loss or gain has no interval: its unit is the document, and there was one
    "no interval: every target came from one document, the interval's unit; give data of several "
    "documents (a text file of many is cut by --doc-start REGEX)"
)


IN_SAMPLE = "read on its own training store (in-sample)"  # results' data.training_store


def _contextwise(s: dict) -> dict:
    return {"value": s["best_context_loss"], "ci95": s.get("best_context_loss_interval95")}


def _gain(s: dict) -> dict:
    return {"value": s.get("context_gain"), "ci95": s.get("context_gain_interval95")}


def _task(s: dict) -> dict:
    from contextlab.eval.tasks import headline_metric

    key, _ = headline_metric(s)
    return {"value": s.get(key), "ci95": s.get(f"{key}_ci95"), "chance": s.get("chance")}


# measure, unit, better, evaluation, how to read one model's summary, how to read compare_<eval>.json
MEASURES = [
    (
        "best-context loss",
        "nats/token",
        "lower",
        "contextwise",
        _contextwise,
        lambda r: r.get("best_context"),
    ),
    (
        "context gain (contextwise's late targets, 1 vs all visible)",
        "nats/token",
        "higher",
        "contextwise",
        _gain,
        lambda r: r.get("context_gain"),
    ),
    (
        "context gain (random targets, 1 vs the context visible)",
        "nats/token",
        "higher",
        "bayes-fit",
        _gain,
        lambda r: r.get("context_gain"),
    ),
    ("needle accuracy", "fraction", "higher", "niah", _task, lambda r: r.get("overall")),
    ("passkey accuracy", "fraction", "higher", "passkey", _task, lambda r: r.get("overall")),
    ("key-value accuracy", "fraction", "higher", "kv", _task, lambda r: r.get("overall")),
]


def headline(out: Path, manifest: dict) -> list[dict]:
    """The rows of the profile's headline table (module docstring)."""
    labels = [m["label"] for m in manifest["models"]]
    steps = {(s["name"], s["model"]): s for s in manifest["steps"]}
    rows = []
    for measure, unit, better, name, read, paired in MEASURES:
        row = {
            "measure": measure,
            "unit": unit,
            "better": better,
            "eval": name,
            "values": {},
            "intervals": {},
        }
        why = []
        for label in labels:
            doc = _read(out / "models" / label / f"{name}.json")
            if doc is None:
                st = steps.get((name, label), {})
                why.append(
                    f"{label}: {st.get('status', 'not run')}"
                    + (f" ({st['error']})" if st.get("error") else "")
                )
                continue
            got = read(doc["results"]["summary"])
            row["values"][label], row["intervals"][label] = got["value"], got["ci95"]
            if read in (_gain, _contextwise) and got["value"] is not None and got["ci95"] is None:
                why.append(f"{label}: {ONE_DOCUMENT}")  # the best-context loss's unit is the document too
            if (doc.get("data") or {}).get("training_store"):
                why.append(f"{label}: {IN_SAMPLE}")
            if got.get("chance") is not None:
                row["chance"] = got["chance"]
        if len(labels) == 2:
            comp = _read(out / "compare" / f"compare_{name}.json")
            d = paired(comp["results"]) if comp else None
            row["diff"], row["ci95"] = _turn(d)
            if comp and (comp["results"].get("few_clusters")):  # its bootstrap interval is too narrow
                n = comp["results"]["overall"]["n_clusters"]
                row["few_clusters"] = n
                why.append(
                    f"only {n} {comp['results'].get('cluster', 'candidate set')}s: too few to name the better"
                )
            if comp is None:
                why.append(manifest.get("compare_notes", {}).get(name, "not compared"))
        if why:
            row["note"] = "; ".join(why)
        rows.append(row)
    rows.append(_attention(out, manifest, labels))
    return rows


def _attention(out: Path, manifest: dict, labels: list[str]) -> dict:
    """Attention's mean distance (tokens): from the pair's analysis with two models when it ran (with the
    difference), else each model's own (a pair that could not share rows: each as far as it could)."""
    row = {"measure": "attention mean distance", "unit": "tokens", "better": "neither", "eval": "attention"}
    row.update(values={}, intervals={})
    pair = _read(out / "compare" / "attention.json") if len(labels) == 2 else None
    if pair is not None:
        s = pair["results"]["summary"]
        for key, label in zip(("a", "b"), labels):
            if key in s:
                row["values"][label], row["intervals"][label] = s[key]["mean_distance"], None
        if "a_vs_b" in s:
            row["diff"], row["ci95"] = _turn(
                {
                    "diff": s["a_vs_b"]["mean_distance_diff"],
                    "interval95": s["a_vs_b"]["mean_distance_diff_interval95"],
                }
            )
        return row
    why = []
    for label in labels:  # each model's own analysis: its summary is keyed "a", the one model it ran on
        doc = _read(out / "models" / label / "attention.json")
        if doc is not None and "a" in doc["results"]["summary"]:
            row["values"][label], row["intervals"][label] = (
                doc["results"]["summary"]["a"]["mean_distance"],
                None,
            )
            continue
        st = next(
            (
                x
                for x in manifest["steps"]
                if x["name"] == "attention" and x["model"] in (label, "+".join(labels))
            ),
            {},
        )
        reason = st.get("error") or st.get("status", "not run")
        why.append(f"{label}: {reason}" if len(labels) == 2 else reason)
    if why:
        row["note"] = "; ".join(why)
    return row
