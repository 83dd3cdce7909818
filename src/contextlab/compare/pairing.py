"""Which two evaluation results pair, and when they do not, the one line that says why.

Two results pair only when they were computed on the same data (the same content hash and
resolved sizes) with the same options, and their saved samples (pieces, cells, candidate sets,
token counts) are identical; otherwise the comparison is refused in one line naming what
differs and why: a setting whose default follows each model's context (contextwise's length,
the lengths of niah, passkey, vartrack and bayes-fit, vartrack's hops, kv's numbers of pairs and
distractors), read from each result, with both values and the option to set; an option given
differently; other data or changed data; models of different tokenizers. Options that change how a
sample is scored but not which samples there are (the scoring mode, ppl's window and stride, the
best-context window) may differ: they are listed as notes. Trade-off: results written before the
per-sample arrays existed cannot be compared (the error says to rerun the evaluation); recomputing
them here would need the models.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contextlab.errors import UserError
from contextlab.eval.results import RESULT_FORMAT

TASKS = ("niah", "kv", "passkey", "vartrack")
PATHS = ("store", "file", "folder", "haystack", "held_out_by")  # where the data was (or whose), not what
FREE = {  # options that change how samples are scored, not which samples there are
    "contextwise": ("best_fraction", "train_context"),
    "ppl": ("context", "stride"),
    "infill": ("modes", "scoring", "check_generations", "progress", "lm_loss"),
    **{t: ("scoring", "max_new_tokens") for t in TASKS},
}
RESOLVED = {  # settings whose default follows the model's context: (option, where the result records it)
    "contextwise": [("length", ("results", "length"))],
    "bayes-fit": [("lengths", ("results", "lengths"))],
    "niah": [("lengths", ("data", "lengths"))],
    "passkey": [("lengths", ("data", "lengths"))],
    "vartrack": [("lengths", ("data", "lengths")), ("hops", ("data", "hops"))],
    "kv": [
        ("n_pairs", ("data", "n_pairs")),
        ("positions", ("data", "positions")),
        ("distractors", ("data", "distractors")),
    ],
}
SAMPLE_KEYS = {
    "contextwise": ("pieces",),
    "ppl": ("doc_offsets",),
    "bayes-fit": ("targets",),
    "infill": ("doc_single", "start_single", "doc_multi", "start_multi"),
    **{t: ("cell", "group") for t in TASKS},
}


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

    def optional(self, key: str) -> np.ndarray | None:
        """One per-sample array that results of older versions lack (None then)."""
        files = self.doc.get("arrays") or {}
        path = self.folder / files[key] if key in files else None
        return np.load(path) if path is not None and path.is_file() else None


def eval_folder(path: str | Path) -> Path:
    """A run directory (its eval/ folder) or a folder of evaluation results itself."""
    p = Path(path)
    for d in (p / "eval", p):
        if d.is_dir() and any(_is_result(f) for f in d.glob("*.json")):
            return d
    raise UserError(
        f"{p} holds no evaluation results (no eval/NAME.json); run "
        f"`contextlab eval NAME --model {shlex.quote(str(p))}` first"
    )


def _is_result(f: Path) -> bool:
    try:
        return json.loads(f.read_text()).get("format") == RESULT_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def side(folder: Path, label: str, name: str) -> Side:
    f = folder / f"{name}.json"
    if not _is_result(f):
        raise UserError(f"{f} is missing or not an evaluation result; run `contextlab eval {name}` first")
    return Side(label, folder, json.loads(f.read_text()))


def labels(a: Path, b: Path) -> tuple[str, str]:
    """Short names of the two runs: their folder names (an eval/ folder goes by its run's)."""
    na, nb = [(p.parent if p.name == "eval" else p).name for p in (a, b)]
    return (na, nb) if na != nb else (str(a), str(b))


TRAINING_STORE = "training_store"  # a result's data key: read on the model's own training store


def check_pairing(name: str, a: Side, b: Side) -> list[str]:
    """Refuse unless A and B were computed on the same samples; return notes on the options that
    differ without changing the samples."""
    diffs, notes = [], []
    da, db = a.doc.get("data") or {}, b.doc.get("data") or {}
    # the held-out part's identity, where both record one, stands for its description (which names the
    # pack each run trained on: SPLICE's and EP's packs of one store hold out the same documents)
    worded = {"held_out"} if da.get("held_out_id") and db.get("held_out_id") else set()
    for k in sorted(set(da) | set(db)):
        if k not in PATHS and k not in worded and k != TRAINING_STORE and da.get(k) != db.get(k):
            diffs.append(f"data {k} {_short(da.get(k))} vs {_short(db.get(k))}")
    own = [s.label for s, d in ((a, da), (b, db)) if d.get(TRAINING_STORE)]
    if own:  # the same samples, but what they say of a model that trained on them is not generalization
        notes.append(
            f"{' and '.join(own)} {'was' if len(own) == 1 else 'were'} read on the token store "
            f"{'it' if len(own) == 1 else 'each'} trained on: the difference is partly of what "
            f"{'that model' if len(own) == 1 else 'they'} saw in training, not only of what "
            f"{'it' if len(own) == 1 else 'they'} learned"
        )
    la, lb = ((s.doc.get("model") or {}).get("lm_prefix") or [] for s in (a, b))
    if la != lb:  # one model read every input after its BOS (or mode token), the other without
        first = lambda s, lead: f"{s.label} after token(s) {lead}" if lead else f"{s.label} without one"
        notes.append(
            f"the two read their inputs differently ({first(a, la)}, {first(b, lb)}: each as it was "
            "trained, e.g. a Hugging Face model with its tokenizer's BOS and a run contextlab continued "
            "from it without): the difference is partly of that"
        )
    pa, pb = ((s.doc.get("model") or {}).get("dtype") for s in (a, b))
    if pa and pb and pa != pb:  # the same samples, computed at other precisions
        notes.append(
            f"{a.label} was read in {pa} and {b.label} in {pb}: the difference is partly of the precision "
            "(evaluate both with one --dtype)"
        )
    oa, ob = a.doc.get("options") or {}, b.doc.get("options") or {}
    same = _resolved_alike(name, a, b)  # a default on one side, the value it resolved to on the other
    for k in sorted(set(oa) | set(ob)):
        if oa.get(k) != ob.get(k) and k not in same:
            (notes if k in FREE.get(name, ()) else diffs).append(
                f"option {k} {_value(oa.get(k))} vs {_value(ob.get(k))}"
            )
    ta, tb = (_tokenizer(s).get("hash") for s in (a, b))
    if _other_tokenizers(a, b):  # the same text is other tokens: even prompts of one layout hold other text
        diffs.append(f"tokenizer {ta[:8]} vs {tb[:8]}")
    if not diffs and name in SAMPLE_KEYS:
        arr_a, arr_b = a.arrays(name, SAMPLE_KEYS[name]), b.arrays(name, SAMPLE_KEYS[name])
        diffs = [f"saved {k}" for k in SAMPLE_KEYS[name] if not np.array_equal(arr_a[k], arr_b[k])]
    if diffs:
        causes, fixes, tokenizers = _causes(name, a, b)
        why = f": {'; '.join(causes)}" if causes else ""
        rerun = f"rerun `contextlab eval {name}` on both with {' and '.join(fixes)}" if fixes else ""
        if tokenizers:  # no rerun makes two tokenizers' samples the same: options cannot fix it
            fix = "compare models of one tokenizer"
        else:
            fix = rerun or f"rerun `contextlab eval {name}` on both with the same --data and options"
        raise UserError(
            f"{name}: {a.label} and {b.label} were not computed on the same samples ({'; '.join(diffs)})"
            f"{why}; {fix}"
        )
    return notes


def _resolved_alike(name: str, a: Side, b: Side) -> set[str]:
    """The options of ``RESOLVED`` both results resolved to the same values, however each was given (left
    to its default, which follows the model's context, or set to what the default gives): they pair."""
    alike = set()
    for option, (part, key) in RESOLVED.get(name, []):
        va, vb = (a.doc.get(part) or {}).get(key), (b.doc.get(part) or {}).get(key)
        if va is not None and va == vb:
            alike.add(option)
    held = [(s.doc.get("data") or {}).get("held_out_by") for s in (a, b)]
    if held[0] and held[0] == held[1]:  # one run's held-out part: `--split run` on the run itself, and
        alike.add("heldout_of")  # `--heldout-of RUN` on another model, read the same documents
    return alike


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
        fix = f"the same {flag} (e.g. {flag} {_flag_value(_smaller(va, vb))}"
        if option == "length":  # the longer-context model is then read below its own best context
            fix += ": the longer-context model's best-context window then lies below its own context"
        fixes.append(fix + ")")
        named.add(option)
    alike = _resolved_alike(name, a, b)
    for k in sorted(set(oa) | set(ob)):
        if k not in FREE.get(name, ()) and k not in named | alike and oa.get(k) != ob.get(k):
            flag = "--" + k.replace("_", "-")
            causes.append(f"{flag} {_value(oa.get(k))} on {a.label} against {_value(ob.get(k))} on {b.label}")
            fixes.append(f"the same {flag}")
    data = _data_cause(a, b)
    if data:
        causes.append(data)
        fixes.append("the same --data")
    ta, tb = (_tokenizer(s).get("hash") for s in (a, b))
    tokenizers = _other_tokenizers(a, b)
    if tokenizers:
        causes.append(
            f"the models' tokenizers differ (hash {ta[:8]} on {a.label}, {tb[:8]} on {b.label}), so the same "
            "text makes other token sequences"
        )
    return causes, list(dict.fromkeys(fixes)), tokenizers


def _tokenizer(side: Side) -> dict:
    return (side.doc.get("model") or {}).get("tokenizer") or {}


def _other_tokenizers(a: Side, b: Side) -> bool:
    """Whether both results record a tokenizer and they encode differently (no hash in common: other
    files that encode alike, GPT-2's BPE as gpt2:DIR and as a tokenizer.json, share one)."""
    from contextlab.data.tokenizers import same_tokenizer

    ta, tb = _tokenizer(a), _tokenizer(b)
    return bool(ta.get("hash") and tb.get("hash") and not same_tokenizer(ta, tb))


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
    """A setting as a sentence shows it: 1023 -> '1,023', [128, 256] -> '128, 256', '' -> '(none)'."""
    if v is None or v == "":  # "--heldout-of  on A" read as a word missing
        return "(none)"
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


def config_differences(model_a: str | None, model_b: str | None, leave_out) -> dict | None:
    """The config keys whose values differ between the runs of models (or runs) ``model_a`` and
    ``model_b``: dotted key -> (value in A, value in B), keys ``leave_out(key)`` is true of left out;
    None when either is no contextlab run (or its config.toml is missing)."""
    from contextlab.config import flat_keys
    from contextlab.rundir import read_config, run_of

    if not model_a or not model_b:
        return None
    try:
        ca, cb = (read_config(run_of(m)) for m in (model_a, model_b))
    except (UserError, OSError, ValueError):
        return None
    if not ca or not cb:
        return None
    fa, fb = flat_keys(ca), flat_keys(cb)
    same = lambda k: json.dumps(fa.get(k), sort_keys=True) == json.dumps(fb.get(k), sort_keys=True)
    return {
        k: (fa.get(k), fb.get(k)) for k in sorted(fa.keys() | fb.keys()) if not leave_out(k) and not same(k)
    }
