"""The plots of ``contextlab compare``: differences A - B with their 95% intervals, drawn from the JSON.

Each function takes a ``compare_NAME.json`` document and writes one PNG (``figures.save_png``):
points with error bars against a zero line, so a reader sees at once which differences exclude
0. For icl a second panel holds the histogram of the per-set differences (the TREC delta of
each set of in-context examples). Trade-off: drawn from the JSON alone (no arrays), so the
report or a later session can redraw them; a difference without an interval is drawn as a
hollow point.
"""

from __future__ import annotations

from pathlib import Path

from contextlab.figures import pyplot, save_png


def _errorbars(ax, x: list, rows: list[dict], color: str = "C0") -> None:
    """Points at (x, diff) with their intervals; hollow where there is none."""
    for xi, r in zip(x, rows):
        ci = r.get("interval95")
        if ci is None:
            ax.plot([xi], [r["diff"]], "o", mfc="none", color=color)
        else:
            err = [[r["diff"] - ci[0]], [ci[1] - r["diff"]]]
            ax.errorbar([xi], [r["diff"]], yerr=err, fmt="o", color=color, capsize=3)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.grid(alpha=0.3)


def _fit_difference(name: str, d: dict) -> str:
    """``gamma +0.066 [-0.161, +0.319]``, or ``C0 +0.067 (no interval: ...)`` where neither fit was
    bootstrapped: a bare difference read beside the points' intervals looks settled."""
    ci = d.get("interval95")
    if ci is None:
        return f"{name} {d['diff']:+.3f} (no interval: {d.get('no_interval') or 'not bootstrapped'})"
    return f"{name} {d['diff']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]"


def _wrapped(text: str, width: int = 80) -> str:
    """``text`` in lines of at most ``width`` characters: a title wider than the figure was cut off."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def _title(doc: dict, what: str) -> str:
    return f"{what}: {doc['a']['label']} - {doc['b']['label']} (95% intervals)"


def contextwise_png(doc: dict, out: str | Path) -> Path:
    """Loss difference per 2^i bucket (log x at each bucket's start) and the best-context one."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    r = doc["results"]
    _errorbars(ax, [b["from"] for b in r["buckets"]], r["buckets"])
    best = r["best_context"]
    _errorbars(ax, [best["window_a"][0]], [best], color="C3")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("position bucket start (context length); red: best-context window")
    ax.set_ylabel("loss A - B (nats/token; < 0: A better)")
    ax.set_title(_title(doc, "contextwise"), fontsize=9)
    return save_png(fig, out)


def ppl_png(doc: dict, out: str | Path) -> Path:
    """Each document's mean loss difference, and the overall one (per token) on the right."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    per = doc["results"]["per_document"]["diff"]
    ax.plot(range(len(per)), per, "o", color="C0", alpha=0.6, label="document mean")
    _errorbars(ax, [len(per)], [doc["results"]["loss"]], color="C3")
    ax.set_xlabel("document (red, right: all tokens)")
    ax.set_ylabel("loss A - B (nats/token; < 0: A better)")
    ax.set_title(_title(doc, "perplexity"), fontsize=9)
    return save_png(fig, out)


def task_png(doc: dict, out: str | Path) -> Path:
    """Accuracy difference per cell, then overall."""
    plt = pyplot()
    r = doc["results"]
    rows = r["by_cell"] + [r["overall"]]
    fig, ax = plt.subplots(figsize=(max(6.5, 0.45 * len(rows)), 4.0))
    _errorbars(ax, list(range(len(rows))), rows)
    names = [", ".join(f"{v:g}" for v in c["cell"]) for c in r["by_cell"]] + ["all"]
    ax.set_xticks(range(len(rows)), names, rotation=60, fontsize=7)
    ax.set_xlabel(" x ".join(r["cell_parts"]))
    ax.set_ylabel("accuracy A - B (" + r["metric"].replace("_correct", "") + ")")
    same = "no spread: every candidate set scores alike for both (as for two models blind to the context)"
    ax.set_title(_title(doc, doc["eval"]) + ("\n" + _wrapped(same) if r.get("no_spread") else ""), fontsize=9)
    return save_png(fig, out)


def bayes_fit_png(doc: dict, out: str | Path) -> Path:
    """Loss difference at each visible length (log x), the C0 and gamma differences in the title."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    r = doc["results"]
    _errorbars(ax, [p["length"] for p in r["by_length"]], r["by_length"])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("visible context l (tokens)")
    ax.set_ylabel("last-token loss A - B (nats; < 0: A better)")
    fits = "\n".join(_wrapped(_fit_difference(p, r["fit"][p])) for p in ("C0", "gamma"))
    ax.set_title(_title(doc, "bayes-fit") + f"\nfit A - B:\n{fits}", fontsize=8)
    return save_png(fig, out)


def infill_png(doc: dict, out: str | Path) -> Path:
    """Middle loss difference per span kind and mode pair, then the left-to-right loss."""
    plt = pyplot()
    r = doc["results"]
    rows = [p["loss"] for p in r["pairs"]] + ([r["lm"]] if "lm" in r else [])
    names = [f"{p['kind']}\n{p['mode_a']} - {p['mode_b']}" for p in r["pairs"]] + (
        ["l2r loss"] if "lm" in r else []
    )
    fig, ax = plt.subplots(figsize=(max(6.5, 0.8 * len(rows)), 4.0))
    _errorbars(ax, list(range(len(rows))), rows)
    ax.set_xticks(range(len(rows)), names, fontsize=7)
    ax.set_ylabel("loss A - B (nats/token; < 0: A better)")
    ax.set_title(_title(doc, "infill"), fontsize=9)
    return save_png(fig, out)


def icl_png(doc: dict, out: str | Path) -> Path:
    """Left: accuracy difference per number of shots; right: histogram of the per-set differences."""
    plt = pyplot()
    fig, (ax, hx) = plt.subplots(1, 2, figsize=(9.0, 4.0))
    per = doc["results"]["by_shots"]
    _errorbars(ax, list(range(len(per))), per)
    ax.set_xticks(range(len(per)), [str(p["shots"]) for p in per])
    ax.set_xlabel("shots")
    ax.set_ylabel("accuracy A - B")
    ax.set_title(_title(doc, "icl"), fontsize=9)
    for p in per:
        hx.hist(p["per_set"], bins=min(20, max(3, len(p["per_set"]))), alpha=0.5, label=f"{p['shots']} shots")
    hx.axvline(0, color="black", linewidth=0.8)
    hx.set_xlabel("accuracy A - B of one set of examples (TREC delta)")
    hx.set_ylabel("sets")
    hx.legend(fontsize=8)
    return save_png(fig, out)


PLOTS = {
    "contextwise": contextwise_png,
    "ppl": ppl_png,
    "bayes-fit": bayes_fit_png,
    "niah": task_png,
    "kv": task_png,
    "passkey": task_png,
    "vartrack": task_png,
    "icl": icl_png,
    "infill": infill_png,
}
