"""Paired differences pooled over replicate pairs (``contextlab compare A1 B1 --and A2 B2 ...``).

One pair of runs says how A and B differ on the documents or prompts they were read on; its
interval covers which samples were drawn, not which seed trained the models or which documents
were held out. Two runs of one seed can differ by more than that interval from another pair's
difference (docs/results.md, the essays study: a context-gain difference of -0.047 [-0.076, -0.018]
on one draw of the held-out essays, -0.002 [-0.019, +0.015] on another). Given k pairs that differ
only in such a choice (``train.seed``, ``data.split_seed``, ``--split-seed`` of the packs), each
pair is compared as ``compare_runs`` compares two runs, and every headline difference is pooled:
the mean of the k pair differences with a Student-t 95% interval on k - 1 degrees of freedom. Its
spread is that of whole pairs, so it holds the training and split noise the pair intervals leave
out (and the sampling noise within each). Trade-off: with few pairs the t quantile is large (12.7
for 2 pairs, 4.3 for 3): the interval is honest about how little k pairs can settle.

Headlines pooled: contextwise best-context loss and context gain, ppl loss, and the overall
accuracy of niah, kv, passkey and vartrack; bayes-fit, infill and icl are compared per pair only.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from contextlab.errors import UserError
from contextlab.eval.results import code_version, jsonable
from contextlab.io import atomic_write_text

FORMAT = "contextlab-compare-pooled"
TASK_HEADLINE = [("accuracy", ("overall",))]
HEADLINES = {  # eval -> (what, the path in a compare document's results to {"diff", "interval95", ...})
    "contextwise": [("best-context loss", ("best_context",)), ("context gain", ("context_gain",))],
    "ppl": [("loss", ("loss",))],
    **{name: TASK_HEADLINE for name in ("niah", "kv", "passkey", "vartrack")},
}
SAMPLE_KEYS = ("data", "split", "heldout_of", "model", "out", "seed")  # options that may differ between pairs


def pool(pairs: list[list[dict]]) -> tuple[dict, list[str], list[str]]:
    """(results, lines, notes) of the compare documents of every pair (``pairs[i]``: pair i's documents,
    one per evaluation): each headline of an evaluation every pair has, pooled over the pairs."""
    from contextlab.eval.paired_stats import interval_text, mean_t

    by_eval = [{d["eval"]: d for d in docs} for docs in pairs]
    common = [name for name in by_eval[0] if all(name in e for e in by_eval[1:])]
    results, lines, notes = {}, [], []
    for name in common:
        docs = [e[name] for e in by_eval]
        differs = _options_that_differ(docs)
        if differs:
            notes.append(f"{name}: the pairs were evaluated with other options ({differs}); pooled anyway")
        for what, path in HEADLINES.get(name, []):
            found = [_at(d["results"], path) for d in docs]
            if any(f is None for f in found):
                if any(f is not None for f in found):
                    without = ", ".join(str(i + 1) for i, f in enumerate(found) if f is None)
                    notes.append(f"{name} {what} not pooled: pair(s) {without} have none (older results)")
                continue
            per_pair = [{"diff": f["diff"], "interval95": f.get("interval95")} for f in found]
            res = {**mean_t([f["diff"] for f in found]), "per_pair": per_pair}
            results.setdefault(name, {})[what] = res
            digits = 2 if path == ("overall",) else 3
            each = "; ".join(interval_text(p, digits) for p in per_pair)
            lines.append(
                f"{name} {what} A - B pooled over {len(found)} pairs: {interval_text(res, digits)} "
                f"(each pair: {each})"
            )
    left = sorted({n for e in by_eval for n in e} - set(HEADLINES) & set(common))
    if left:
        notes.append(f"compared per pair only (no pooled headline): {', '.join(left)}")
    if not lines:
        raise UserError(
            "the pairs share no evaluation whose difference can be pooled "
            f"({', '.join(HEADLINES)}); evaluate every run with the same `contextlab eval NAME`"
        )
    return results, lines, notes


def _at(results: dict, path: tuple[str, ...]) -> dict | None:
    for key in path:
        results = results.get(key) if isinstance(results, dict) else None
    return results if isinstance(results, dict) and "diff" in results else None


def _options_that_differ(docs: list[dict]) -> str:
    """The evaluation options (of each pair's A result) that differ between pairs, but for those that say
    which samples were read (the point of replicates), in words; "" when none."""
    options = []
    for d in docs:
        try:
            options.append(json.loads(Path(d["a"]["result"]).read_text()).get("options") or {})
        except (OSError, ValueError, KeyError, TypeError):
            return ""
    keys = sorted({k for o in options for k in o} - set(SAMPLE_KEYS))
    return ", ".join(k for k in keys if len({json.dumps(o.get(k), sort_keys=True) for o in options}) > 1)


def write_pooled(out: Path, pairs: list[tuple[str, str]], docs: list[list[dict]]) -> dict:
    """Pool the pairs' compare documents and write OUT/pooled.json; return it."""
    results, lines, notes = pool(docs)
    doc = jsonable(
        {
            "format": FORMAT,
            **code_version(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "difference": "A - B",
            "pairs": [{"a": a, "b": b, "folder": f"pair_{i + 1}"} for i, (a, b) in enumerate(pairs)],
            "interval": "Student t over the pairs' differences (k - 1 degrees of freedom)",
            "notes": notes,
            "lines": lines,
            "results": results,
        }
    )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "pooled.json", json.dumps(doc, indent=2, allow_nan=False) + "\n")
    return doc
