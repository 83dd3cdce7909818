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
# config keys a replicate pair may differ in from another pair whatever it compares: where it ran, its
# seeds, and paths (two pairs' packs of other --split-seed are other folders, compared by key only)
FREE_KEYS = ("out_dir", "seed", "split_seed", "store", "packed", "val_store", "mixture", "init_from")


def check_pairs(pairs: list[tuple[str, str]]) -> None:
    """One line for pairs that cannot be pooled: a pair that repeats another (counted twice, it narrows
    the interval for nothing) or that reads one model as both A and B."""
    seen: dict[tuple, int] = {}
    for i, (a, b) in enumerate(pairs, start=1):
        key = (str(Path(a).resolve()), str(Path(b).resolve()))
        if key[0] == key[1]:
            which = f"pair {i} reads" if len(pairs) > 1 else "RUN_A and RUN_B are both"
            raise UserError(f"{which} {a}{' as both A and B' if len(pairs) > 1 else ''}; compare two models")
        if key in seen:
            raise UserError(
                f"pair {i} ({a}, {b}) repeats pair {seen[key]}: a pair counted twice narrows the pooled "
                "interval for nothing; give each replicate pair once"
            )
        seen[key] = i


def shared_runs(pairs: list[tuple[str, str]]) -> list[str]:
    """A note for each run that more than one pair reads: such pairs are not independent replicates (a
    shared A carries its own seed's luck into each), so the pooled interval is narrower than it should be."""
    where: dict[str, list[int]] = {}
    for i, pair in enumerate(pairs, start=1):
        for run in pair:
            where.setdefault(str(Path(run).resolve()), []).append(i)
    return [
        f"{run} is in pairs {', '.join(map(str, ps))}: pairs sharing a run are not independent replicates, "
        "so the pooled interval is narrower than the replicates' noise; give each pair runs of its own"
        for run, ps in where.items()
        if len(set(ps)) > 1
    ]


def pool(pairs: list[list[dict]]) -> tuple[dict, list[str], list[str]]:
    """(results, lines, notes) of the compare documents of every pair (``pairs[i]``: pair i's documents,
    one per evaluation): each headline of an evaluation every pair has, pooled over the pairs."""
    from contextlab.eval.paired_stats import interval_text, mean_t

    by_eval = [{d["eval"]: d for d in docs} for docs in pairs]
    _check_same_contrast([docs[0] for docs in pairs])
    common = [name for name in by_eval[0] if all(name in e for e in by_eval[1:])]
    results, lines, notes = {}, [], []
    for name in common:
        docs = [e[name] for e in by_eval]
        differs = _options_that_differ(docs)
        if differs:
            raise UserError(
                f"{name}: the pairs were evaluated with other options ({differs}), so their differences "
                f"measure different things; evaluate every run with the same `contextlab eval {name}` options"
            )
        for what, path in HEADLINES.get(name, []):
            found = [_at(d["results"], path) for d in docs]
            if any(f is None for f in found):
                if any(f is not None for f in found):
                    without = ", ".join(str(i + 1) for i, f in enumerate(found) if f is None)
                    notes.append(f"{name} {what} not pooled: pair(s) {without} have none (older results)")
                continue
            per_pair = [{"diff": f["diff"], "interval95": f.get("interval95")} for f in found]
            res = {**mean_t([f["diff"] for f in found]), "per_pair": per_pair}
            if len({round(f["diff"], 12) for f in found}) == 1:
                notes.append(
                    f"{name} {what}: every pair gave the same difference, so the pooled interval has no "
                    "width; replicates of other seeds differ (a rerun of one seed reproduces its numbers)"
                )
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


def _check_same_contrast(docs: list[dict]) -> None:
    """One line when two pairs do not compare the same A with the same B: a config key both pairs'
    runs differ in, with other values (pair 2 comparing context 128 with 64 where pair 1 compares 64
    with 128: swapped). Keys of ``FREE_KEYS`` and models that are no contextlab run are not read."""
    contrasts = [_contrast(d.get("a", {}).get("model"), d.get("b", {}).get("model")) for d in docs]
    if any(c is None for c in contrasts):
        return
    for i, c in enumerate(contrasts[1:], start=2):
        for key in sorted(set(contrasts[0]) & set(c)):
            if c[key] != contrasts[0][key]:
                (a1, b1), (a2, b2) = contrasts[0][key], c[key]
                swapped = (a2, b2) == (b1, a1)
                raise UserError(
                    f"pair {i} compares {key} {a2} with {b2} where pair 1 compares {a1} with {b1}"
                    + (": its A and B are swapped; give them the other way round" if swapped else "")
                    + "; every pair must compare the same setup A with the same setup B"
                )


def _contrast(a: str | None, b: str | None) -> dict | None:
    """The config keys whose values differ between the runs of models ``a`` and ``b`` (dotted key ->
    (value in a, value in b), as JSON), ``FREE_KEYS`` and the keys that change no number (threads,
    logging, checkpoint cadence: ``RESUME_FREE``) left out; None when either is no contextlab run."""
    from contextlab.compare.pairing import config_differences
    from contextlab.train.config import RESUME_FREE

    free = {f"{section}.{key}" for section, key in RESUME_FREE}  # how a run ran, not what it computed
    differ = config_differences(a, b, lambda k: k.split(".")[-1] in FREE_KEYS or k in free)
    if differ is None:
        return None
    return {k: tuple(json.dumps(v, sort_keys=True) for v in vs) for k, vs in differ.items()}


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


def check_pooled_rerun(out: Path, pairs: list[tuple[str, str]], overwrite: bool) -> None:
    """One line before OUT/pooled.json is replaced by a pooling of other pairs (unless ``overwrite``); a
    file there that is no pooled comparison is refused always. The same pairs again reproduce it."""
    from contextlab.outputs import earlier_result

    doc = earlier_result(out / "pooled.json", FORMAT, "a pooled `contextlab compare` result")
    if doc is None or overwrite:
        return
    was = [(p.get("a"), p.get("b")) for p in doc.get("pairs") or []]
    now = [(str(a), str(b)) for a, b in pairs]
    if was != now:
        raise UserError(
            f"{out / 'pooled.json'} pools other pairs ({len(was)} pairs, {len(now)} given now, or others); "
            "pass --overwrite to replace it, or give another --out to keep both (nothing was written)"
        )


def drop_stale_pairs(out: Path, k: int) -> None:
    """Remove the comparisons of pairs past the ``k`` pooled now (OUT/pair_N, N > k, of an earlier
    pooling of more pairs, which a report would show beside these): only contextlab's own files, and
    the folder when they were all it held."""
    from contextlab.compare.paired import FORMAT as PAIR_FORMAT

    for folder in sorted(out.glob("pair_*")):
        n = folder.name.removeprefix("pair_")
        if not (folder.is_dir() and n.isdigit() and int(n) > k):
            continue
        for f in folder.glob("compare_*.json"):
            try:
                ours = json.loads(f.read_text()).get("format") == PAIR_FORMAT
            except (OSError, ValueError, AttributeError):
                ours = False
            if ours:
                f.with_suffix(".png").unlink(missing_ok=True)
                f.unlink()
        try:
            folder.rmdir()
        except OSError:  # something else is in it: left as it is
            pass


def write_pooled(out: Path, pairs: list[tuple[str, str]], pooled: tuple[dict, list[str], list[str]]) -> dict:
    """Write OUT/pooled.json of ``pooled`` (what ``pool`` gave for ``pairs``); return it."""
    results, lines, notes = pooled
    notes = shared_runs(pairs) + notes
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
