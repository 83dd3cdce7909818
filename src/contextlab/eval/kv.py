"""Key-value retrieval on the lost-in-the-middle data: accuracy by the queried pair's position.

Each example of ``kv-retrieval-{75,140}_keys.jsonl.gz`` (Liu et al. 2023) is a JSON object
of UUID keys and values plus the key to look up. A candidate set is k keys of one example
(the file's own key among them in the first set); the queried key rotates over them: for
every position in ``positions`` and every key of the set, that key's pair is moved to the
position (the other pairs keep their order) and asked for, its value being the true
candidate and the set's other values the wrong ones. So every value is the answer exactly
once per position, and a model with a fixed preference among value strings scores 1/k,
not a rate set by which value the file happened to query. The prompt is the paper's
template and a model answers after "Corresponding value:" (``query="restated"`` instead ends
the prompt with the key as the JSON wrote it, ``"KEY":``, so the value follows as it does in
the context: associative recall of one pair rather than a lookup by key). ``n_pairs`` keeps only that
many pairs (the set's among them) so that small-context models can take the task; the
prompt text is tokenized with the model's own tokenizer. Scoring: the likelihood of the
true value against the set's others, calibrated by the same prompt without the queried
pair; generated text containing the value.

Default number of pairs: as many as fit the model's context with the answer. A 75-key prompt
is about 5,800 tokens of a BPE tokenizer, so a 512-token model would otherwise run every prompt
at ten times its context. Each prompt keeps a seeded random subset of its example's pairs (the
candidate set's keys always among them) in the file's order, and the queried pair is still moved
from the first to the last position: the paper's task, with fewer distractor pairs (the paper
itself varies their number: 75, 140 and 300 keys). The count is the largest whose every built
prompt fits: guessed from the examples' mean pair, then moved one pair at a time (each move builds
the prompts again: tokenizing, no model). Trade-off: fewer pairs make the task easier than the
paper's 75, so results of models with different contexts compare only at one ``--n-pairs`` (the
result records ``n_pairs``; ``contextlab compare`` says so when they differ).

Default number of distractors: 4 (candidate sets of 5 keys), fewer when even 5 pairs with the answer
are longer than the model's context (a 255-token model of a BPE tokenizer fits 2 or 3 UUID pairs), down
to 1 (chance 1/2); the settings line's note says so and the result records ``distractors``. An explicit
``--distractors`` that does not fit is one line, as is a context too short for 2 pairs.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

import contextlab.eval.progress as progress
import contextlab.eval.scoring as scoring
import contextlab.eval.tasks as tasks
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.base import KV_DATA, EvalOutput, require_file
from contextlab.eval.results import file_hash


@dataclass
class Options:
    n_examples: int = opt(20, "examples to use (the first ones of the file)")
    n_pairs: int = opt(
        0,
        "key-value pairs per prompt (the set's kept, the others a seeded random subset of the example's); "
        "0 = as many as fit the model's context with the answer (all of the example's when they fit)",
    )
    positions: list[int] = opt(
        [], "positions (0-based) of the queried pair to test; empty = 5 evenly spaced from first to last"
    )
    distractors: int = opt(
        0,
        "wrong values scored against the true one: candidate sets of 1 + this many keys; 0 = 4, or as many "
        "as fit when 5 pairs with the answer are longer than the model's context (with --n-pairs: 4)",
    )
    sets: int = opt(1, "candidate sets per example (each asked at every position with each key queried)")
    scoring: Literal["likelihood", "generate", "both"] = opt("both", "how the answer is scored")
    query: Literal["question", "restated"] = opt(
        "question",
        "how the key is asked for: 'question' is the paper's template (Key: ... Corresponding value:), a "
        "lookup by key; 'restated' ends the prompt with the key written as the JSON wrote it, so the value "
        "follows as in the context: associative recall of one pair, which an in-context copier solves",
    )
    seed: int = opt(0, "seed for choosing pairs and distractors")


def kv_prompt(records: list[tuple[str, str]], key: str, query: str = "question") -> str:
    """The lost-in-the-middle prompt: every pair written once, then the query key (``query``: see
    ``Options.query``)."""
    pairs = ",\n ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in records)
    head = (
        "Extract the value corresponding to the specified key in the JSON object below.\n\n"
        f"JSON data:\n{{{pairs}}}\n\n"
    )
    if query == "restated":
        return head + f"The pair of that key, as written above:\n{json.dumps(key)}:"
    return head + f"Key: {json.dumps(key)}\nCorresponding value:"


EXTRA_NEW = 4  # tokens generated past the value
DISTRACTORS = 4  # the default number of wrong values (fewer when the context holds no set of 5 pairs)

KV_FORMAT = (
    "one JSON object a line with 'key' and 'ordered_kv_records' (a list of [key, value] string pairs "
    "holding that key), as in the lost-in-the-middle key-value files"
)


EXAMPLE = KV_DATA


def kv_file(data: str | None) -> Path:
    """The key-value file ``data`` names; one line for none, a missing path, or a folder (naming the file
    of that folder to pass: the lost-in-the-middle folder holds two, and other data besides)."""
    path = require_file(data, "kv", EXAMPLE)
    if not path.is_dir():
        return path
    files = [f for f in path.iterdir() if f.name.endswith((".jsonl", ".jsonl.gz")) and f.is_file()]
    kv = sorted((f for f in files if f.name.startswith("kv-")), key=_natural)
    if not files:
        raise UserError(
            f"--data {data} is a folder with no .jsonl or .jsonl.gz file; kv reads one key-value file: "
            f"pass --data FILE, e.g. {EXAMPLE}"
        )
    if not kv:  # a user's own files: which of them hold key-value examples is theirs to say
        raise UserError(
            f"--data {data} is a folder; kv reads one key-value file: pass the file of it that holds "
            f"key-value examples, e.g. --data {sorted(files, key=_natural)[0]}"
        )
    first, *others = kv
    also = f" (or {', '.join(f.name for f in others)} beside it)" if others else ""
    raise UserError(f"--data {data} is a folder; kv reads one key-value file: pass --data {first}{also}")


def _natural(f: Path) -> list:
    """'kv-retrieval-75_keys' before 'kv-retrieval-140_keys': numbers compared as numbers."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", f.name)]


def check_data(data: str) -> None:
    """One line for a --data that is no key-value file, before any model loads (``kv_file``)."""
    kv_file(data)


def read_examples(path) -> list[dict]:
    """The examples of a key-value retrieval file (.jsonl or .jsonl.gz), every line checked: a
    damaged file or line is one line naming the file, the line and what was expected."""
    import zlib

    opener = gzip.open if str(path).endswith(".gz") else open
    rows = []
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    rows.append(_kv_example(line, path, n))
    except (EOFError, gzip.BadGzipFile, zlib.error, UnicodeDecodeError) as exc:
        raise UserError(
            f"{path} cannot be read to its end ({type(exc).__name__}: {str(exc)[:120]}); expected {KV_FORMAT}"
        ) from None
    if not rows:
        raise UserError(f"{path} holds no examples; expected {KV_FORMAT}")
    return rows


def _kv_example(line: str, path, n: int) -> dict:
    where = f"{path} line {n}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{where} is not JSON ({exc.msg} at column {exc.colno}); expected {KV_FORMAT}"
        ) from None
    if not isinstance(row, dict) or "ordered_kv_records" not in row or "key" not in row:
        raise UserError(f"{where} has no 'key' and 'ordered_kv_records'; expected {KV_FORMAT}")
    records = row["ordered_kv_records"]
    if not isinstance(records, list) or not records:
        raise UserError(f"{where}: 'ordered_kv_records' is not a non-empty list; expected {KV_FORMAT}")
    for i, kv in enumerate(records):
        if not (isinstance(kv, list) and len(kv) == 2 and all(isinstance(x, str) for x in kv)):
            raise UserError(
                f"{where}: record {i} is {json.dumps(kv)[:60]}, not a [key, value] pair of strings"
            )
    if not any(k == row["key"] for k, _ in records):
        raise UserError(f"{where}: its key {json.dumps(row['key'])[:60]} is not among its records")
    return row


def place_gold(records: list, gold_index: int, position: int) -> list:
    rest = records[:gold_index] + records[gold_index + 1 :]
    return rest[:position] + [records[gold_index]] + rest[position:]


def _draw_set(rng, records: list, gold: int, o: Options, first: bool) -> tuple[list, list[int]]:
    """(the pairs of one prompt, indices of the set's keys among them): the file's key is in the first set."""
    n = len(records)
    k = min(o.distractors + 1, o.n_pairs or n, n)
    others = [i for i in range(n) if i != gold]
    members = ([gold] if first else []) + list(rng.choice(others, k - first, replace=False))
    keep = list(range(n))
    if o.n_pairs and o.n_pairs < n:
        rest = [i for i in range(n) if i not in members]
        keep = sorted(members + list(rng.choice(rest, o.n_pairs - k, replace=False)))
    return [records[i] for i in keep], [keep.index(i) for i in members]


SYNTHETIC_PAIRS = 300  # pairs an example when no file is given: the paper's largest file has 300 keys


def examples(data: str | None, n_examples: int) -> tuple[list[dict], dict]:
    """The first ``n_examples`` examples of the key-value file ``data`` and what to record of it; with no
    file, as many examples of ``SYNTHETIC_PAIRS`` random UUID pairs made in memory from seed 0 (the
    paper's files are random UUIDs too: ``data.kv_synthetic``), recorded by the hash of their lines (a
    file written by ``write_kv_file`` with the same counts, uncompressed, has that hash)."""
    if data is not None:
        path = kv_file(data)
        return read_examples(path)[:n_examples], {"file": str(path), "hash": file_hash(path)}
    from contextlab.data.kv_synthetic import kv_examples, kv_lines

    rows = kv_examples(n_examples, SYNTHETIC_PAIRS, seed=0)
    made = f"random UUID pairs, {SYNTHETIC_PAIRS} an example (seed 0; no --data)"
    return rows, {"synthetic": made, "hash": hashlib.sha256(kv_lines(rows)).hexdigest()}


def build(adapter, o: Options, data: str | None) -> tuple[list[tasks.Sample], dict]:
    rows, source = examples(data, o.n_examples)
    if o.distractors < 0 or o.sets < 1:
        raise UserError("kv needs --distractors >= 1 (or 0: fitted to the context) and --sets >= 1")
    in_file = min(len(r["ordered_kv_records"]) for r in rows)
    asked = o
    if o.n_pairs:
        o = dataclasses.replace(o, distractors=o.distractors or DISTRACTORS)
        samples, positions = _samples(adapter, rows, o, o.n_pairs)
        n = min(o.n_pairs, in_file)
        o = dataclasses.replace(o, distractors=min(o.distractors, n - 1))  # a set is at most the prompt
    else:
        n, samples, positions, distractors = _fitting(adapter, rows, o, in_file)
        o = dataclasses.replace(o, distractors=distractors)
    fix = "use fewer pairs (--n-pairs), or leave --n-pairs out: the default number of pairs fits"
    if o.n_pairs and not _default_fits(adapter, rows, asked, in_file):  # no kv prompt fits: none to advise
        fix = "even 2 pairs, the fewest a set holds, run past the context, so this kv measures extrapolation"
    tasks.check_longest(adapter, samples, o.scoring, f"the longest kv prompt ({n} pairs)", fix)
    return samples, {
        **source,
        "n_examples": len(rows),
        "n_pairs": n,
        "n_pairs_in_file": in_file,
        "positions": positions,
        "distractors": o.distractors,
        "query": o.query,
    }


def _samples(adapter, rows: list[dict], o: Options, n_pairs: int) -> tuple[list[tasks.Sample], list[int]]:
    """Every prompt with ``n_pairs`` pairs (0, or more than an example has: all of its pairs), and the
    positions tested."""
    rng = np.random.default_rng(o.seed)
    kept_o = dataclasses.replace(o, n_pairs=n_pairs)
    n = min(min(n_pairs or len(r["ordered_kv_records"]), len(r["ordered_kv_records"])) for r in rows)
    positions = o.positions or sorted({int(round(x)) for x in np.linspace(0, n - 1, 5)})
    samples: list[tasks.Sample] = []
    for unit, ex in enumerate(rows):  # an example asked at every position: one unit of the intervals
        records = [tuple(kv) for kv in ex["ordered_kv_records"]]
        gold = next(i for i, (k, _) in enumerate(records) if k == ex["key"])
        for s in range(o.sets):
            kept, members = _draw_set(rng, records, gold, kept_o, s == 0)
            pool = [adapter.encode(" " + json.dumps(kept[m][1])) for m in members]
            for p in positions:
                if p >= len(kept):
                    raise UserError(f"position {p} does not exist with {len(kept)} pairs; lower --positions")
                group = len(samples) // len(pool)
                for m, cands in zip(members, tasks.rotations(pool)):
                    samples.append(_sample(adapter, kept, m, p, cands, group, o.query, unit))
    return samples, positions


def _default_fits(adapter, rows, o: Options, in_file: int) -> bool:
    """Whether the default (pairs fitted to the context) finds a set that fits."""
    try:
        _fitting(adapter, rows, dataclasses.replace(o, n_pairs=0), in_file)
    except UserError:
        return False
    return True


def _fitting(
    adapter, rows: list[dict], o: Options, in_file: int
) -> tuple[int, list[tasks.Sample], list[int], int]:
    """(the most pairs whose every prompt fits the model's context with its answer, those prompts, the
    positions, the distractors): a first guess from the examples' mean pair, then one pair up or down at
    a time. Without --distractors, a context that holds no candidate set of 1 + ``DISTRACTORS`` pairs
    takes one distractor fewer at a time, down to 1."""
    enc, ctx = adapter.encode, adapter.context
    records = [tuple(kv) for r in rows for kv in r["ordered_kv_records"]]
    pair = float(np.mean([len(enc(f"{json.dumps(k)}: {json.dumps(v)},\n ")) for k, v in records]))
    value = max(len(enc(" " + json.dumps(v))) for _, v in records)
    room = tasks.answer_room(value, o.scoring, value + EXTRA_NEW)
    fixed = max(len(enc(kv_prompt([], r["key"], o.query))) for r in rows)
    distractors = o.distractors or DISTRACTORS

    def built(n: int) -> tuple[list[tasks.Sample], list[int], int]:
        kept = dataclasses.replace(o, distractors=distractors)
        samples, positions = _samples(adapter, rows, kept, 0 if n == in_file else n)  # 0: every pair
        return samples, positions, tasks.longest_forward(samples, o.scoring)

    k = min(distractors + 1, in_file)
    n = min(in_file, max(k, int((ctx - room - fixed) / pair)))
    samples, positions, longest = built(n)
    while longest > ctx:  # too many: one fewer until they fit
        if n <= k and (o.distractors or k <= 2):
            raise _no_set_fits(o, k, longest, ctx)
        if n <= k:  # the default set is too large: one distractor fewer
            k -= 1
            distractors = k - 1
        n -= 1
        samples, positions, longest = built(n)
    while n < in_file:  # they fit: one more while that fits too
        more = built(n + 1)
        if more[2] > ctx:
            break
        n, (samples, positions, longest) = n + 1, more
    return n, samples, positions, distractors


def _no_set_fits(o: Options, k: int, longest: int, ctx: int) -> UserError:
    """The one line of a context too short for the prompts of one candidate set of ``k`` pairs."""
    if o.distractors:
        return UserError(
            f"kv: even {k} pairs (a candidate set of 1 + --distractors {o.distractors}) make prompts of "
            f"{longest:,} tokens with the answer, more than the model's context of {ctx:,}; lower "
            "--distractors (or leave it out: the default fits), or pass --n-pairs to run past the context "
            "(the model then extrapolates)"
        )
    return UserError(
        f"kv: the model's context ({ctx:,} tokens) is too short for key-value retrieval: even {k} pairs (the "
        f"true one and 1 distractor, the fewest) make prompts of {longest:,} tokens with the answer; pass "
        f"--n-pairs {k} to run it past the context (the model then extrapolates)"
    )


def _sample(
    adapter, kept: list, member: int, position: int, cands: list, group: int, query: str, unit: int
) -> tasks.Sample:
    """The prompt asking for pair ``member`` of ``kept`` moved to ``position``, and its control."""
    key, value = kept[member]
    placed = place_gold(kept, member, position)
    ids = adapter.encode(kv_prompt(placed, key, query))
    control = adapter.encode(kv_prompt([r for r in placed if r[0] != key], key, query))
    return tasks.Sample(ids, value, cands, (position,), len(cands[0]) + EXTRA_NEW, {}, control, group, unit)


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    samples, info = build(adapter, options, data)
    d = info["distractors"]
    fewer = not options.distractors and d < DISTRACTORS
    asked = options.distractors or DISTRACTORS
    clipped = bool(options.n_pairs) and d < asked  # --n-pairs holds fewer pairs than a set of them
    of = f" (of {info['n_pairs_in_file']}, fitted to the context {adapter.context:,})"
    fitted = "" if options.n_pairs else of
    progress.announce(
        "kv",
        {
            "examples": info["n_examples"],
            "pairs": f"{info['n_pairs']}{fitted}",
            "positions": info["positions"],
            "keys per set": len(samples[0].candidates),
            "sets per example": options.sets,
            "prompts": len(samples),
            "longest prompt": f"{max(len(s.prompt) for s in samples):,} tokens "
            f"({tasks.longest_forward(samples, options.scoring):,} with its answer)",
            "scoring": options.scoring,
            **({"file": info["file"]} if "file" in info else {"data": info["synthetic"]}),
            "note": (
                f"{d} distractor{'s' if d > 1 else ''}, not {asked}: a prompt of --n-pairs "
                f"{info['n_pairs']} holds a candidate set of {d + 1} keys at most"
                if clipped
                else f"{d} distractor{'s' if d > 1 else ''}, not {DISTRACTORS}: a set of {DISTRACTORS + 1} "
                f"pairs with the answer is longer than the model's {adapter.context:,}-token context "
                "(--distractors sets it)"
                if fewer
                else tasks.shorter(adapter, options.n_pairs, "--n-pairs")
            ),
        },
    )
    rows = scoring.score_samples(adapter, samples, options.scoring, desc="kv")
    res = tasks.summarize(rows, len(samples[0].candidates))
    res["samples"] = tasks.sample_rows(rows, samples)
    res["prompt_tokens"] = float(np.mean([len(s.prompt) for s in samples]))
    _key, cell_key = tasks.headline_metric(res["summary"])
    res["by_position"] = {
        "positions": info["positions"],
        "metric": cell_key,
        "accuracy": [c[cell_key] for c in res["by_cell"]],
        "ci95": [c[tasks.interval_key(cell_key)] for c in res["by_cell"]],
    }

    longest = tasks.longest_forward(samples, options.scoring)
    past = (
        f"prompts of up to {longest:,} tokens run past the model's {adapter.context:,}-token context"
        if longest > adapter.context
        else ""
    )

    def plot(path):
        from contextlab.result_plots import lines_png

        return lines_png(
            {adapter.info.id: (info["positions"], res["by_position"]["accuracy"])},
            path,
            xlabel="position of the queried key-value pair (0 = first in the prompt)",
            ylabel=f"accuracy ({tasks.SCORED_BY.get(cell_key, cell_key)})",
            title=f"key-value retrieval ({options.query}), {info['n_pairs']} pairs",
            chance=res["summary"].get("chance"),
            bands={adapter.info.id: res["by_position"]["ci95"]},
            band_label="95% interval (Wilson)",
            note=past,
        )

    return EvalOutput(res, info, arrays=tasks.sample_arrays(rows), plot=plot)
