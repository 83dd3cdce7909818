"""Key-value retrieval on the lost-in-the-middle data: accuracy by the gold pair's position.

Each example of ``kv-retrieval-{75,140}_keys.jsonl.gz`` (Liu et al. 2023) is a JSON object
of UUID keys and values plus the key to look up. As in that paper, the gold pair is moved
to each position in ``positions`` in turn (the other pairs keep their order), the prompt
is the paper's template, and a model answers after "Corresponding value:". ``n_pairs``
keeps only that many pairs (the gold one included) so that small-context models can take
the task; the prompt text is tokenized with the model's own tokenizer. Scoring: generated
text containing the value, and the likelihood of the true value against values of other
keys of the same object.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from typing import Literal

import numpy as np

import contextlab.eval.tasks as tasks
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.base import EvalOutput, require_file
from contextlab.eval.results import file_hash


@dataclass
class Options:
    n_examples: int = opt(20, "examples to use (the first ones of the file)")
    n_pairs: int = opt(0, "key-value pairs per prompt (the gold pair kept); 0 = all of the example's")
    positions: list[int] = opt(
        [], "gold positions (0-based) to test; empty = 5 evenly spaced from first to last"
    )
    distractors: int = opt(4, "wrong values scored against the true one (likelihood)")
    scoring: Literal["likelihood", "generate", "both"] = opt("both", "how the answer is scored")
    seed: int = opt(0, "seed for choosing pairs and distractors")


def kv_prompt(records: list[tuple[str, str]], key: str) -> str:
    """The lost-in-the-middle prompt: every pair written once, then the query key."""
    pairs = ",\n ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in records)
    return (
        "Extract the value corresponding to the specified key in the JSON object below.\n\n"
        f"JSON data:\n{{{pairs}}}\n\nKey: {json.dumps(key)}\nCorresponding value:"
    )


def read_examples(path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if not rows or "ordered_kv_records" not in rows[0]:
        raise UserError(
            f"{path} is not a key-value retrieval file (no ordered_kv_records); pass "
            "../shared/data/lost_in_the_middle/kv-retrieval-75_keys.jsonl.gz"
        )
    return rows


def place_gold(records: list, gold_index: int, position: int) -> list:
    rest = records[:gold_index] + records[gold_index + 1 :]
    return rest[:position] + [records[gold_index]] + rest[position:]


def build(adapter, o: Options, data: str | None) -> tuple[list[tasks.Sample], dict]:
    path = require_file(data, "kv", "../shared/data/lost_in_the_middle/kv-retrieval-75_keys.jsonl.gz")
    rows = read_examples(path)[: o.n_examples]
    rng = np.random.default_rng(o.seed)
    tok = adapter.tokenizer
    samples = []
    n = min(len(r["ordered_kv_records"]) for r in rows) if not o.n_pairs else o.n_pairs
    positions = o.positions or sorted({int(round(x)) for x in np.linspace(0, n - 1, 5)})
    for ex in rows:
        records = [tuple(kv) for kv in ex["ordered_kv_records"]]
        gold = next(i for i, (k, _) in enumerate(records) if k == ex["key"])
        if o.n_pairs and o.n_pairs < len(records):
            others = sorted(
                rng.choice([i for i in range(len(records)) if i != gold], o.n_pairs - 1, replace=False)
            )
            keep = sorted([gold, *others])
            records, gold = [records[i] for i in keep], keep.index(gold)
        wrong = [
            records[i][1]
            for i in rng.choice(
                [i for i in range(len(records)) if i != gold],
                min(o.distractors, len(records) - 1),
                replace=False,
            )
        ]
        cands = [tok.encode(" " + json.dumps(v)) for v in [ex["value"], *wrong]]
        for p in positions:
            if p >= len(records):
                raise UserError(
                    f"gold position {p} does not exist with {len(records)} pairs; lower --positions"
                )
            ids = tok.encode(kv_prompt(place_gold(records, gold, p), ex["key"]))
            adapter.check_length(
                len(ids) + len(cands[0]), "the key-value prompt", "use fewer pairs (--n-pairs)"
            )
            samples.append(tasks.Sample(ids, ex["value"], cands, cell=(p,), max_new=len(cands[0]) + 4))
    return samples, {
        "file": str(path),
        "hash": file_hash(path),
        "n_examples": len(rows),
        "n_pairs": n,
        "positions": positions,
    }


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    samples, info = build(adapter, options, data)
    rows = tasks.score_samples(adapter, samples, options.scoring)
    res = tasks.summarize(rows, 1 + options.distractors)
    res["prompt_tokens"] = float(np.mean([len(s.prompt) for s in samples]))
    _key, cell_key = tasks.headline_metric(res["summary"])
    res["by_position"] = {
        "positions": info["positions"],
        "metric": cell_key,
        "accuracy": [c[cell_key] for c in res["by_cell"]],
    }

    def plot(path):
        from contextlab.eval.plots import lines_png

        return lines_png(
            {adapter.info.id: (info["positions"], res["by_position"]["accuracy"])},
            path,
            xlabel="position of the gold key-value pair",
            ylabel=cell_key,
            title=f"key-value retrieval, {info['n_pairs']} pairs",
            chance=res["summary"].get("chance"),
        )

    return EvalOutput(res, info, plot=plot)
