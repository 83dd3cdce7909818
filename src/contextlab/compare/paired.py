"""Paired comparisons of two models' evaluation results (``contextlab compare RUN_A RUN_B``).

Reads the result files both runs already have (``RUN/eval/NAME.json`` and the arrays saved
beside them) and computes A - B on the *same* windows and samples, so the noise of which
documents or prompts were drawn cancels and only the models' difference is left:

* contextwise: per 2^i position bucket and for the best-context loss, the mean over pieces
  of loss_A - loss_B (exactly the difference of the two reported numbers), with a 95%
  cluster t interval over documents (``eval.paired_stats.cluster_t``; the docstring there says
  why a t interval and not a bootstrap);
* ppl: the loss per token A - B over the same tokens, documents as clusters, and each
  document's mean difference;
* bayes-fit: per visible length the loss A - B of the same target tokens (documents as
  clusters), and the fitted C0 and gamma differences with a bootstrap over documents
  (compare/fit.py);
* infill: per span kind and prompt mode pair, the true middle's loss and exact match A - B,
  files as clusters, and the left-to-right loss of the same files (compare/infill.py);
* niah, kv, passkey, vartrack: per cell and overall, the accuracy difference with a seeded
  bootstrap interval over balanced candidate sets and McNemar's discordant counts;
* icl: per number of shots, the accuracy difference of each set of in-context examples (the
  SPLICE paper's TREC delta) with a bootstrap interval over sets, and their histogram.

Two results pair only when they were computed on the same data (the same content hash and
resolved sizes) with the same options, and their saved samples (pieces, cells, candidate sets,
token counts) are identical; otherwise the comparison is refused in one line naming what
differs and why: a setting whose default follows each model's context (contextwise's length,
the lengths of niah, passkey, vartrack and bayes-fit, kv's number of pairs), read from each
result, with both values and the option to set; an option given differently; other data or
changed data; models of different tokenizers. Options that change how a sample is scored but
not which samples there are (the scoring mode, ppl's window and stride, the best-context
window) may differ: they are listed as notes. Trade-off: results written before the per-sample
arrays existed cannot be compared (the error says to rerun the evaluation); recomputing them
here would need the models.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import contextlab.eval.paired_stats as cs
from contextlab.compare.fit import bayes_fit
from contextlab.compare.infill import infill
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.results import RESULT_FORMAT, code_version, jsonable
from contextlab.io import atomic_write_text

FORMAT = "contextlab-compare"
TASKS = ("niah", "kv", "passkey", "vartrack")
PATHS = ("store", "file", "folder", "haystack")  # data fields that say where the data was, not what
FREE = {  # options that change how samples are scored, not which samples there are
    "contextwise": ("best_fraction", "train_context"),
    "ppl": ("context", "stride"),
    "infill": ("modes", "scoring", "check_generations", "progress", "lm_loss"),
    **{t: ("scoring", "max_new_tokens") for t in TASKS},
}
CELL_PARTS = {
    "niah": ["depth", "length"],
    "passkey": ["depth", "length"],
    "kv": ["position"],
    "vartrack": ["length"],
}
METRIC_NAMES = {"likelihood_correct": "likelihood", "contains": "substring-match", "exact": "exact-match"}
RESOLVED = {  # settings whose default follows the model's context: (option, where the result records it)
    "contextwise": [("length", ("results", "length"))],
    "bayes-fit": [("lengths", ("results", "lengths"))],
    "niah": [("lengths", ("data", "lengths"))],
    "passkey": [("lengths", ("data", "lengths"))],
    "vartrack": [("lengths", ("data", "lengths"))],
    "kv": [("n_pairs", ("data", "n_pairs")), ("positions", ("data", "positions"))],
}
SAMPLE_KEYS = {
    "contextwise": ("pieces",),
    "ppl": ("doc_offsets",),
    "bayes-fit": ("targets",),
    "infill": ("doc_single", "start_single", "doc_multi", "start_multi"),
    **{t: ("cell", "group") for t in TASKS},
}


@dataclass
class Options:
    resamples: int = opt(2000, "bootstrap resamples for the accuracy intervals (retrieval tasks, icl)")
    seed: int = opt(0, "seed of the bootstrap (the same files and seed give the same intervals)")


@dataclass
class Side:
    """One run's result of one evaluation: its JSON, its folder, and a label."""

    label: str
    folder: Path
    doc: dict

    def arrays(self, name: str, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
        files = self.doc.get("arrays") or {}
        missing = [k for k in keys if k not in files or not (self.folder / files[k]).is_file()]
        if missing:
            raise UserError(
                f"{self.folder / (name + '.json')} has no per-sample arrays ({', '.join(missing)}): it was "
                f"written before `compare` existed or its .npy files were moved; rerun `contextlab eval "
                f"{name}` on that model, then compare"
            )
        return {k: np.load(self.folder / files[k]) for k in keys}


def eval_folder(path: str | Path) -> Path:
    """A run directory (its eval/ folder) or a folder of evaluation results itself."""
    p = Path(path)
    for d in (p / "eval", p):
        if d.is_dir() and any(_is_result(f) for f in d.glob("*.json")):
            return d
    raise UserError(
        f"{p} holds no evaluation results (no eval/NAME.json); run `contextlab eval NAME --model {p}` first"
    )


def _is_result(f: Path) -> bool:
    try:
        return json.loads(f.read_text()).get("format") == RESULT_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _side(folder: Path, label: str, name: str) -> Side:
    f = folder / f"{name}.json"
    if not _is_result(f):
        raise UserError(f"{f} is missing or not an evaluation result; run `contextlab eval {name}` first")
    return Side(label, folder, json.loads(f.read_text()))


def labels(a: Path, b: Path) -> tuple[str, str]:
    """Short names of the two runs: their folder names (an eval/ folder goes by its run's)."""
    na, nb = [(p.parent if p.name == "eval" else p).name for p in (a, b)]
    return (na, nb) if na != nb else (str(a), str(b))


def check_pairing(name: str, a: Side, b: Side) -> list[str]:
    """Refuse unless A and B were computed on the same samples; return notes on the options that
    differ without changing the samples."""
    diffs, notes = [], []
    da, db = a.doc.get("data") or {}, b.doc.get("data") or {}
    for k in sorted(set(da) | set(db)):
        if k not in PATHS and da.get(k) != db.get(k):
            diffs.append(f"data {k} {_short(da.get(k))} vs {_short(db.get(k))}")
    oa, ob = a.doc.get("options") or {}, b.doc.get("options") or {}
    for k in sorted(set(oa) | set(ob)):
        if oa.get(k) != ob.get(k):
            (notes if k in FREE.get(name, ()) else diffs).append(f"option {k} {oa.get(k)} vs {ob.get(k)}")
    if not diffs and name in SAMPLE_KEYS:
        arr_a, arr_b = a.arrays(name, SAMPLE_KEYS[name]), b.arrays(name, SAMPLE_KEYS[name])
        diffs = [f"saved {k}" for k in SAMPLE_KEYS[name] if not np.array_equal(arr_a[k], arr_b[k])]
    if diffs:
        causes, fixes, tokenizers = _causes(name, a, b)
        why = f": {'; '.join(causes)}" if causes else ""
        rerun = f"rerun `contextlab eval {name}` on both with {' and '.join(fixes)}" if fixes else ""
        if tokenizers:
            fix = "; ".join([x for x in (rerun, "compare models of one tokenizer") if x])
        else:
            fix = rerun or f"rerun `contextlab eval {name}` on both with the same --data and options"
        raise UserError(
            f"{name}: {a.label} and {b.label} were not computed on the same samples ({'; '.join(diffs)})"
            f"{why}; {fix}"
        )
    return notes


def _causes(name: str, a: Side, b: Side) -> tuple[list[str], list[str], bool]:
    """(why A's and B's samples differ, the flags that make them the same, whether the models'
    tokenizers differ), read from both results: the settings whose default follows the model's
    context, the options given differently, the data, the models' tokenizers."""
    causes, fixes, named = [], [], set()
    oa, ob = a.doc.get("options") or {}, b.doc.get("options") or {}
    for option, (part, key) in RESOLVED.get(name, []):
        va, vb = (a.doc.get(part) or {}).get(key), (b.doc.get(part) or {}).get(key)
        if va is None or vb is None or va == vb:
            continue
        flag = "--" + option.replace("_", "-")
        line = f"{name} was run with {option} {_value(va)} on {a.label} and {_value(vb)} on {b.label}"
        if oa.get(option) == ob.get(option) and not oa.get(option):
            line += f" (the default {flag} follows each model's context)"
        causes.append(line)
        fixes.append(f"the same {flag} (e.g. {flag} {_flag_value(_smaller(va, vb))})")
        named.add(option)
    for k in sorted(set(oa) | set(ob)):
        if k not in FREE.get(name, ()) and k not in named and oa.get(k) != ob.get(k):
            flag = "--" + k.replace("_", "-")
            causes.append(f"{flag} was {_value(oa.get(k))} on {a.label} and {_value(ob.get(k))} on {b.label}")
            fixes.append(f"the same {flag}")
    data = _data_cause(a, b)
    if data:
        causes.append(data)
        fixes.append("the same --data")
    ta, tb = (((s.doc.get("model") or {}).get("tokenizer") or {}).get("hash") for s in (a, b))
    tokenizers = bool(ta and tb and ta != tb)
    if tokenizers:
        causes.append(
            f"the models' tokenizers differ (hash {ta[:8]} on {a.label}, {tb[:8]} on {b.label}), so the same "
            "text makes other token sequences"
        )
    return causes, list(dict.fromkeys(fixes)), tokenizers


def _data_cause(a: Side, b: Side) -> str:
    """Why the data of A and B differ ('' when their content hashes agree or are not recorded)."""
    da, db = a.doc.get("data") or {}, b.doc.get("data") or {}
    ha, hb = da.get("hash"), db.get("hash")
    if not ha or not hb or ha == hb:
        return ""
    pa, pb = (next((d[k] for k in PATHS if d.get(k)), None) for d in (da, db))
    content = f"content hash {_short(ha)} vs {_short(hb)}"
    if pa and pa == pb:
        return f"the data at {pa} changed between the two runs ({content})"
    if pa and pb:
        return f"{a.label} read {pa} and {b.label} read {pb} ({content})"
    return f"the data differ ({content})"


def _value(v) -> str:
    """A setting as a sentence shows it: 1023 -> '1,023', [128, 256] -> '128, 256'."""
    if isinstance(v, bool) or not isinstance(v, (int, list, tuple)):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    return ", ".join(str(x) for x in v) if v else "[]"


def _flag_value(v) -> str:
    """A setting as its flag takes it: 1023 -> '1023', [128, 256] -> '128,256'."""
    return ",".join(str(x) for x in v) if isinstance(v, (list, tuple)) else str(v)


def _smaller(va, vb):
    """Of two values of a setting, the one that fits both models: the smaller (lists: by their largest)."""
    key = (lambda v: max(v, default=0)) if isinstance(va, list) else (lambda v: v)
    return min(va, vb, key=key)


def _short(v) -> str:
    s = str(v)
    return s[:12] if isinstance(v, str) and len(s) == 64 else s  # a sha256 is told apart by its start


# ---------------------------------------------------------------------------- one evaluation each


def contextwise(a: Side, b: Side, o: Options) -> dict:
    keys = ("pieces", "piece_bucket_loss", "piece_best_loss")
    xa, xb = a.arrays("contextwise", keys), b.arrays("contextwise", keys)
    docs = xa["pieces"][:, 0]
    bk_a = a.doc["results"]["buckets"]

    def paired(d: np.ndarray) -> dict:
        return cs.cluster_t(*cs.per_cluster(d, docs))

    per_bucket = [
        {"from": bk["from"], "to": bk["to"], "a": float(ya.mean()), "b": float(yb.mean()), **paired(ya - yb)}
        for bk, ya, yb in zip(bk_a, xa["piece_bucket_loss"].T, xb["piece_bucket_loss"].T)
    ]
    best = {
        "a": float(xa["piece_best_loss"].mean()),
        "b": float(xb["piece_best_loss"].mean()),
        "window_a": [a.doc["results"]["best_context"][k] for k in ("from", "to")],
        "window_b": [b.doc["results"]["best_context"][k] for k in ("from", "to")],
        **paired(xa["piece_best_loss"] - xb["piece_best_loss"]),
    }
    n_docs = best["n_clusters"]
    line = (
        f"contextwise best-context loss A - B = {cs.interval_text(best)} over {n_docs} documents "
        f"({len(docs)} pieces; A {best['a']:.3f}, B {best['b']:.3f})"
    )
    results = {"unit": "piece", "cluster": "document", "n_pieces": len(docs), "n_documents": n_docs}
    have = [set(s.doc.get("arrays") or {}) for s in (a, b)]
    lines = [line]
    if all("piece_one_token_loss" in h for h in have):  # the context gain (1 vs all visible), A - B, paired
        one = ("piece_one_token_loss",)
        ga = a.arrays("contextwise", one)[one[0]] - xa["piece_best_loss"]
        gb = b.arrays("contextwise", one)[one[0]] - xb["piece_best_loss"]
        results["context_gain"] = {"a": float(ga.mean()), "b": float(gb.mean()), **paired(ga - gb)}
        lines.append(
            f"contextwise context gain A - B = {cs.interval_text(results['context_gain'])} over {n_docs} "
            f"documents (A {ga.mean():.3f}, B {gb.mean():.3f})"
        )
    notes = []
    if best["window_a"] != best["window_b"]:  # models of different training contexts
        notes.append(
            f"best-context windows differ (A {best['window_a']}, B {best['window_b']}): each model's own"
        )
    return {
        "lines": lines,
        "results": {**results, "best_context": best, "buckets": per_bucket},
        "notes": notes,
    }


def ppl(a: Side, b: Side, o: Options) -> dict:
    keys = ("token_losses", "doc_offsets")
    xa, xb = a.arrays("ppl", keys), b.arrays("ppl", keys)
    offsets = xa["doc_offsets"]
    diff = xa["token_losses"].astype(np.float64) - xb["token_losses"].astype(np.float64)  # (tokens,)
    counts = np.diff(offsets).astype(np.float64)  # (docs,)
    sums = np.add.reduceat(diff, offsets[:-1]) if len(diff) else np.zeros(0)
    total = cs.cluster_t(sums, counts)
    sa, sb = a.doc["results"]["summary"], b.doc["results"]["summary"]
    total.update(a=sa["loss"], b=sb["loss"], perplexity_a=sa["perplexity"], perplexity_b=sb["perplexity"])
    line = (
        f"ppl loss A - B = {cs.interval_text(total)} nats/token over {len(counts)} documents "
        f"({len(diff)} tokens; perplexity A {sa['perplexity']:.2f}, B {sb['perplexity']:.2f})"
    )
    per_doc = {"diff": (sums / counts).tolist(), "tokens": counts.astype(int).tolist()}
    return {
        "lines": [line],
        "results": {"unit": "token", "cluster": "document", "loss": total, "per_document": per_doc},
    }


def task(name: str):
    """The comparison of one retrieval task (niah, kv, passkey, vartrack)."""

    def run(a: Side, b: Side, o: Options) -> dict:
        metric = _common_metric(name, a, b)
        keys = (f"correct_{metric}", "cell", "group")
        xa, xb = a.arrays(name, keys), b.arrays(name, keys)
        ca, cb, group, cell = xa[keys[0]], xb[keys[0]], xa["group"], xa["cell"]
        overall = _accuracy_diff(ca, cb, group, o)
        by_cell = []
        for c in np.unique(cell, axis=0):
            m = (cell == c).all(1)
            by_cell.append({"cell": c.tolist(), **_accuracy_diff(ca[m], cb[m], group[m], o)})
        mc = overall["mcnemar"]
        line = (
            f"{name} {METRIC_NAMES[metric]} accuracy A - B = {cs.interval_text(overall, 2)} over {len(ca)} "
            f"samples in {overall['n_clusters']} candidate sets (A {overall['a']:.2f}, B {overall['b']:.2f}; "
            f"only A right {mc['only_a_right']}, only B right {mc['only_b_right']}, "
            f"McNemar p={mc['p_value']:.2g})"
        )
        results = {"metric": metric, "cluster": "candidate set", "cell_parts": CELL_PARTS[name]}
        return {"lines": [line], "results": {**results, "overall": overall, "by_cell": by_cell}}

    return run


def _common_metric(name: str, a: Side, b: Side) -> str:
    have = [set(s.doc.get("arrays") or {}) for s in (a, b)]
    for m in ("likelihood_correct", "contains", "exact"):
        if all(f"correct_{m}" in h for h in have):
            return m
    raise UserError(
        f"{name}: {a.label} and {b.label} share no scored accuracy (per-sample arrays correct_*); rerun "
        f"`contextlab eval {name}` on both with the same --scoring"
    )


def _accuracy_diff(ca: np.ndarray, cb: np.ndarray, group: np.ndarray, o: Options) -> dict:
    sums, counts = cs.per_cluster(ca.astype(np.float64) - cb, group)
    out = cs.cluster_bootstrap(sums, counts, o.resamples, o.seed)
    return {**out, "a": float(ca.mean()), "b": float(cb.mean()), "n": len(ca), "mcnemar": cs.mcnemar(ca, cb)}


def icl(a: Side, b: Side, o: Options) -> dict:
    rows_a = {r["shots"]: r for r in a.doc["results"]["by_shots"]}
    rows_b = {r["shots"]: r for r in b.doc["results"]["by_shots"]}
    shots = sorted(set(rows_a) & set(rows_b))
    if not shots:
        raise UserError(
            f"icl: {a.label} and {b.label} have no number of shots in common; use the same --shots"
        )
    per = [_icl_shots(k, rows_a[k]["accuracy_per_set"], rows_b[k]["accuracy_per_set"], o) for k in shots]
    lines = [
        f"icl accuracy A - B at {p['shots']} shots = {cs.interval_text(p, 3)} over {len(p['per_set'])} "
        f"example sets (TREC delta; A {p['a']:.3f}, B {p['b']:.3f})"
        for p in per
    ]
    notes = []
    if set(rows_a) ^ set(rows_b):
        notes.append(f"shots only one side scored (prompts too long): {sorted(set(rows_a) ^ set(rows_b))}")
    if min(len(p["per_set"]) for p in per) < 10:
        notes.append(
            "fewer than 10 example sets: a percentile bootstrap over so few sets is too narrow; raise --seeds"
        )
    return {"lines": lines, "results": {"cluster": "example set", "by_shots": per}, "notes": notes}


def _icl_shots(k: int, pa: list[float], pb: list[float], o: Options) -> dict:
    """Per-set accuracy differences at ``k`` shots, over the sets both scored (a set whose prompts
    were too long for a model was not scored), with their bootstrap interval."""
    n = min(len(pa), len(pb))
    d = np.asarray(pa[:n], np.float64) - np.asarray(pb[:n], np.float64)  # (sets,)
    boot = cs.cluster_bootstrap(d, np.ones(n), o.resamples, o.seed)
    return {
        "shots": k,
        "a": float(np.mean(pa[:n])),
        "b": float(np.mean(pb[:n])),
        "per_set": d.tolist(),
        **boot,
    }


COMPARERS = {
    "contextwise": contextwise,
    "ppl": ppl,
    "bayes-fit": bayes_fit,
    **{t: task(t) for t in TASKS},
    "icl": icl,
    "infill": infill,
}


# ---------------------------------------------------------------------------- both runs, every evaluation


def compare_runs(
    run_a: str | Path, run_b: str | Path, evals: list[str] | None, options: Options, out: str | Path | None
) -> tuple[Path, list[dict]]:
    """Compare every evaluation both runs have (or ``evals``); write OUT/compare_NAME.json and .png for
    each and return OUT and the written documents. OUT defaults to RUN_A/compare/<B's name>."""
    if options.resamples < 100:
        raise UserError(f"--resamples {options.resamples} is too few for a 95% interval; use 1000 or more")
    fa, fb = eval_folder(run_a), eval_folder(run_b)
    la, lb = labels(fa, fb)
    both = sorted({f.stem for f in fa.glob("*.json")} & {f.stem for f in fb.glob("*.json")} & set(COMPARERS))
    names = list(dict.fromkeys(evals)) if evals else both
    unknown = [n for n in names if n not in COMPARERS]
    if unknown:
        raise UserError(f"compare does not know {', '.join(unknown)}; choose from {', '.join(COMPARERS)}")
    if not names:
        raise UserError(
            f"{run_a} and {run_b} have no evaluation in common that compare knows ({', '.join(COMPARERS)}); "
            "run the same `contextlab eval NAME` on both"
        )
    sides = [(name, _side(fa, la, name), _side(fb, lb, name)) for name in names]
    notes = {name: check_pairing(name, a, b) for name, a, b in sides}  # refuse before writing anything
    out = Path(out) if out else Path(run_a) / "compare" / lb.replace("/", "_")
    return out, [_write(out, name, a, b, options, notes[name]) for name, a, b in sides]


def _write(out: Path, name: str, a: Side, b: Side, options: Options, notes: list[str]) -> dict:
    """Compare one evaluation, write its JSON and plot; return the JSON document."""
    from contextlab.compare.plots import PLOTS

    t0 = time.perf_counter()
    got = COMPARERS[name](a, b, options)
    doc = {
        "format": FORMAT,
        "eval": name,
        **code_version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seconds": round(time.perf_counter() - t0, 3),
        "a": _describe(a, name),
        "b": _describe(b, name),
        "difference": "A - B",
        "options": vars(options),
        "paired_on": {k: v for k, v in (a.doc.get("data") or {}).items() if k not in PATHS},
        "notes": notes + got.get("notes", []),
        "lines": got["lines"],
        "results": got["results"],
    }
    doc = jsonable(doc)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"compare_{name}.json", json.dumps(doc, indent=2, allow_nan=False) + "\n")
    PLOTS[name](doc, out / f"compare_{name}.png")
    return doc


def _describe(s: Side, name: str) -> dict:
    model = s.doc.get("model") or {}
    return {
        "label": s.label,
        "result": str(s.folder / f"{name}.json"),
        "model": model.get("path"),
        "step": model.get("step"),
        "created": s.doc.get("created"),
    }
