"""Many-shot in-context classification on TREC (the SPLICE paper's Table 1 protocol).

``--data`` is the TREC folder (train.txt, test.txt; lines "COARSE:fine question"). A prompt
holds k training questions with their coarse label written as a word ("Question: ...\\n
Type: location\\n\\n"), then a test question and "Type:". The prediction is the label word
with the highest log-likelihood after the prompt (all six scored in one batch), so no
generation or parsing is involved and the chance level is about 1/6. As in the paper,
results are averaged over several sets of in-context examples (``seeds``); accuracy is
reported against the number of shots and the resulting context length.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

import contextlab.eval.tasks as tasks
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.base import EvalOutput, accuracy_ci, require_file
from contextlab.eval.results import file_hash

LABELS = {
    "ABBR": "abbreviation",
    "DESC": "description",
    "ENTY": "entity",
    "HUM": "human",
    "LOC": "location",
    "NUM": "number",
}


@dataclass
class Options:
    shots: list[int] = opt(
        [0, 2, 8, 32],
        "numbers of in-context examples to test (prompts longer than a "
        "fixed-position model allows are skipped)",
    )
    n_test: int = opt(100, "test questions per set (the first ones of test.txt)")
    seeds: int = opt(3, "sets of in-context examples (drawn from train.txt) to average over")


def read_trec(path: Path) -> list[tuple[str, str]]:
    rows = []
    for line in path.read_bytes().decode("latin-1").splitlines():
        if ":" in line:
            label, rest = line.split(":", 1)
            q = rest.split(" ", 1)[1] if " " in rest else rest
            if label in LABELS:
                rows.append((q.strip(), LABELS[label]))
    if not rows:
        raise UserError(f"{path} has no TREC lines ('COARSE:fine question'); pass the trec_qc folder")
    return rows


def shot_text(q: str, label: str) -> str:
    return f"Question: {q}\nType: {label}\n\n"


def build_prompts(adapter, train, test, k: int, seed: int) -> list[tasks.Sample]:
    rng = np.random.default_rng(seed)
    shots = [train[i] for i in rng.choice(len(train), k, replace=False)] if k else []
    prefix = "".join(shot_text(q, a) for q, a in shots)
    labels = list(LABELS.values())
    cand_ids = {lab: adapter.encode(" " + lab) for lab in labels}
    out = []
    for q, a in test:
        ids = adapter.encode(prefix + f"Question: {q}\nType:")
        cands = [cand_ids[a]] + [cand_ids[lab] for lab in labels if lab != a]
        out.append(tasks.Sample(ids, a, cands, cell=(k,)))
    return out


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    folder = require_file(data, "icl", "../shared/data/trec_qc")
    train_f, test_f = (folder / "train.txt", folder / "test.txt") if folder.is_dir() else (folder, folder)
    train, test = read_trec(train_f), read_trec(test_f)[: options.n_test]
    per_shot, skipped = [], []
    for k in options.shots:
        row, too_long = _score_shots(adapter, train, test, k, options.seeds)
        if too_long:
            skipped.append(k)
        if row is not None:
            per_shot.append(row)
    if not per_shot:
        raise UserError("every shot count gives prompts longer than the model allows; lower --shots")
    res = {"summary": _summary(per_shot, test), "by_shots": per_shot, "skipped_shots": skipped}

    def plot(path):
        return _plot_accuracy(adapter.info.id, per_shot, path)

    return EvalOutput(
        res,
        {
            "folder": str(folder),
            "hash": file_hash(train_f, test_f),
            "n_train": len(train),
            "n_test": len(test),
        },
        plot=plot,
    )


def _score_shots(adapter, train, test, k: int, seeds: int) -> tuple[dict | None, bool]:
    """The accuracy row for ``k`` shots over ``seeds`` sets of examples (None when no set was
    scored), and whether a set gave prompts longer than the model allows (later sets are not run)."""
    correct, lengths = [], []
    too_long = False
    for seed in range(seeds):
        samples = build_prompts(adapter, train, test, k, seed)
        longest = max(len(s.prompt) + 4 for s in samples)
        if longest > adapter.context and not adapter.info.extends_beyond:
            too_long = True
            break
        rows = tasks.score_samples(adapter, samples, "likelihood")
        acc = float(np.mean([r["likelihood_correct"] for r in rows]))
        correct.append(acc)
        lengths += [r["prompt_tokens"] for r in rows]
    if not correct:
        return None, too_long
    row = {
        "shots": k,
        "accuracy": float(np.mean(correct)),
        "accuracy_per_set": correct,
        "set_std": float(np.std(correct)),
        "context_tokens": float(np.mean(lengths)),
        "n_test": len(test),
        "n_sets": len(correct),
    }
    return row, too_long


def _summary(per_shot: list[dict], test) -> dict:
    """Headline numbers: accuracy at the most shots, the best accuracy, chance and majority class."""
    best = max(per_shot, key=lambda r: r["accuracy"])
    return {
        "accuracy_max_shots": per_shot[-1]["accuracy"],
        "shots_max": per_shot[-1]["shots"],
        "best_accuracy": best["accuracy"],
        "best_shots": best["shots"],
        "chance": 1 / len(LABELS),
        "majority_class": accuracy_ci([a == _majority(test) for _, a in test])["accuracy"],
    }


def _plot_accuracy(model_id: str, per_shot: list[dict], path):
    """Accuracy against the prompt length in tokens, the shot counts in the axis label."""
    from contextlab.eval.plots import lines_png

    return lines_png(
        {model_id: ([r["context_tokens"] for r in per_shot], [r["accuracy"] for r in per_shot])},
        path,
        xlabel="context length (tokens; shots: " + ", ".join(str(r["shots"]) for r in per_shot) + ")",
        ylabel="accuracy",
        title="TREC many-shot in-context classification",
        logx=True,
        chance=1 / len(LABELS),
    )


def _majority(test) -> str:
    labels = [a for _, a in test]
    return max(set(labels), key=labels.count)
