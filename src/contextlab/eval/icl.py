"""Many-shot in-context classification on TREC (the SPLICE paper's Table 1 protocol).

``--data`` is the TREC folder (train.txt, test.txt; lines "COARSE:fine question"). A prompt
holds k training questions with their coarse label written as a word ("Question: ...\\n
Type: location\\n\\n"), then a test question and "Type:". The prediction is the label word
with the highest log-likelihood after the prompt (all six scored in one batch), so no
generation or parsing is involved. The test questions are label-balanced by default
(``n_test // 6`` of each label, the first ones of test.txt), so every label is the truth
equally often and a model that ignores the shots, always preferring one label word,
scores exactly 1/6 (on TREC's own test split the majority label alone would score 0.28).
As in the paper, results are averaged over several sets of in-context examples
(``seeds``); accuracy is reported with its Wilson interval over all (set, question)
samples against the number of shots and the resulting context length, and calibrated by
the zero-shot prompt: the log-likelihood of the true label with the shots minus without.
The label words' own prior (their length in tokens above all: on GPT-2's BPE " abbreviation"
is two tokens, the others one) decides a summed log-probability before any shot does, so each
shot count also gives the calibrated accuracy (the true label is the one the shots raise most)
and how often each label was picked, and the per-sample outcomes are saved as arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

import contextlab.eval.progress as progress
import contextlab.eval.scoring as scoring
import contextlab.eval.stats as stats
import contextlab.eval.tasks as tasks
from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.eval.base import TREC_DATA, EvalOutput, require_file
from contextlab.eval.results import file_hash

LABELS = {
    "ABBR": "abbreviation",
    "DESC": "description",
    "ENTY": "entity",
    "HUM": "human",
    "LOC": "location",
    "NUM": "number",
}


DEFAULT_SHOTS = (0, 2, 8, 32)  # the shot counts tried without --shots, as far as their prompts fit


@dataclass
class Options:
    shots: list[int] = opt(
        [],
        "numbers of in-context examples to test; default: 0, 2, 8 and 32, those whose prompts fit the "
        "model's context (given counts run past it on a RoPE model, with a warning, and are skipped by a "
        "fixed-position model)",
    )
    n_test: int = opt(
        54,
        "test questions per set; with balance, n_test // 6 of each label, the first ones of test.txt "
        "(TREC's test.txt has 9 abbreviation questions, so at most 54)",
    )
    seeds: int = opt(3, "sets of in-context examples (drawn from train.txt) to average over")
    balance: bool = opt(
        True, "label-balanced test questions (chance exactly 1/6); false = the first n_test of test.txt"
    )


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


def select_test(test: list[tuple[str, str]], n_test: int, balance: bool) -> list[tuple[str, str]]:
    """The test questions: the first n_test, or (balance) the first n_test // 6 of each label,
    interleaved label by label."""
    if not balance:
        return test[:n_test]
    labels = list(LABELS.values())
    per = n_test // len(labels)
    by = {lab: [row for row in test if row[1] == lab] for lab in labels}
    fewest = min(labels, key=lambda lab: len(by[lab]))
    if per < 1 or len(by[fewest]) < per:
        fix = (
            f"use --n-test between 6 and {6 * len(by[fewest])} or --balance false"
            if by[fewest]
            else "use --balance false (no balanced set can be drawn)"
        )
        raise UserError(
            f"a label-balanced test set of {n_test} questions needs {max(per, 1)} of each label, but the "
            f"test file has {len(by[fewest])} '{fewest}' questions; {fix}"
        )
    return [by[lab][i] for i in range(per) for lab in labels]


def build_prompts(adapter, train, test, k: int, seed: int) -> list[tasks.Sample]:
    """One sample per test question: k shots drawn with ``seed``, the six label words as candidates
    (the true one first) and the zero-shot prompt as its control."""
    rng = np.random.default_rng(seed)
    shots = [train[i] for i in rng.choice(len(train), k, replace=False)] if k else []
    prefix = "".join(shot_text(q, a) for q, a in shots)
    labels = list(LABELS.values())
    cand_ids = {lab: adapter.encode(" " + lab) for lab in labels}
    out = []
    for i, (q, a) in enumerate(test):
        ids = adapter.encode(prefix + f"Question: {q}\nType:")
        control = adapter.encode(f"Question: {q}\nType:")
        cands = [cand_ids[lab] for lab in candidate_order(a)]
        # a question asked with several sets of examples is one unit: its answers agree across sets
        out.append(tasks.Sample(ids, a, cands, cell=(k, seed), control=control, group=i, unit=i))
    return out


def candidate_order(truth: str) -> list[str]:
    """The label words in a sample's candidate order: the true one first, then the others."""
    return [truth] + [lab for lab in LABELS.values() if lab != truth]


def check_data(data: str) -> None:
    """One line, before any model loads, for a TREC folder without its train.txt or test.txt."""
    folder = Path(data)
    missing = [f for f in ("train.txt", "test.txt") if folder.is_dir() and not (folder / f).is_file()]
    if missing:
        raise UserError(
            f"--data {data} has no {' or '.join(missing)}; icl reads the TREC folder with train.txt and "
            f"test.txt: {TREC_DATA}"
        )


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    folder = require_file(data, "icl", f"the TREC folder, {TREC_DATA}")
    train_f, test_f = (folder / "train.txt", folder / "test.txt") if folder.is_dir() else (folder, folder)
    train = read_trec(train_f)
    test = select_test(read_trec(test_f), options.n_test, options.balance)
    built, skipped = {}, []
    fit = not options.shots or not adapter.info.extends_beyond  # defaults always fit the context
    for k in options.shots or DEFAULT_SHOTS:
        samples, too_long = _build_shots(adapter, train, test, k, options.seeds, fit)
        if too_long:
            skipped.append(k)
        if samples:
            built[k] = samples
    if not built:
        raise UserError("every shot count gives prompts longer than the model allows; lower --shots")
    everything = [s for samples in built.values() for s in samples]
    most = max(built, key=lambda k: max(len(s.prompt) for s in built[k]))
    tasks.check_longest(
        adapter, everything, "likelihood", f"the longest icl prompt ({most} shots)", "lower --shots"
    )
    progress.announce(
        "icl",
        {
            "shots": list(built),
            "skipped shots (too long)": skipped,
            "test questions": len(test),
            "example sets": options.seeds,
            "prompts": len(everything),
            "data": str(folder),
        },
    )
    scored = [_score_shots(adapter, samples, test, k) for k, samples in built.items()]
    per_shot = [row for row, _ in scored]
    arrays = _arrays([r for _, rows in scored for r in rows], everything)
    text = [f"{r['shots']} shots: " + _line(r) for r in per_shot]
    text += _prior_notes(per_shot)
    res = {"summary": _summary(per_shot, test), "by_shots": per_shot, "skipped_shots": skipped, "text": text}
    majority = res["summary"]["majority_class"]
    if majority > 1 / len(LABELS) + 1e-9:  # --balance false: "chance 1/6" is a uniform guess's only
        text.append(
            f"note: the test questions are not label-balanced: always answering the most common label "
            f"({_majority(test)}) scores {majority:.2f}, above a uniform guess's 1/{len(LABELS)} = "
            f"{1 / len(LABELS):.2f}; read accuracies against {majority:.2f} (or use --balance true)"
        )

    def plot(path):
        return _plot_accuracy(adapter.info.id, per_shot, path)

    data_info = {**data_record(folder, train_f, test_f), "n_train": len(train)}
    info = {**data_info, "n_test": len(test), "balanced": options.balance}
    return EvalOutput(res, info, arrays=arrays, plot=plot)


def data_record(folder: Path, train_f: Path, test_f: Path) -> dict:
    """What a result records of the TREC data it read: the folder, and the hash of its two files
    (``hashed_files``: a rerun compares them as they are then, so files changed in place are other data)."""
    return {
        "folder": str(folder),
        "hash": file_hash(train_f, test_f),
        "hashed_files": [str(train_f), str(test_f)],
    }


def _line(row: dict) -> str:
    text = stats.accuracy_line(
        "accuracy",
        row["accuracy"],
        row["ci95"],
        row["n"],
        1 / len(LABELS),
        row["calibrated"],
        n_effective=row.get("n_effective"),
    )
    if row["calibrated_accuracy"] is not None:
        lo, hi = row["calibrated_accuracy_ci95"]
        text += f"; calibrated accuracy {row['calibrated_accuracy']:.2f} [{lo:.2f}, {hi:.2f}]"
    return text


def _prior_notes(per_shot: list[dict]) -> list[str]:
    """A note for each shot count where one label word was picked for most questions: the model's
    prior for that word (a short one, a common one), not what the shots say."""
    notes = []
    for r in per_shot:
        label, count = max(r["predicted"].items(), key=lambda kv: kv[1])
        if count > r["n"] / 2:
            cal = (
                f"; calibrated accuracy (the label the shots raise most) is {r['calibrated_accuracy']:.2f}"
                if r["calibrated_accuracy"] is not None
                else ""
            )
            notes.append(
                f"note: at {r['shots']} shots '{label}' was the answer picked for {count} of {r['n']} "
                f"questions: the label word's own likelihood decides, not the examples{cal}"
            )
    return notes


def _build_shots(adapter, train, test, k: int, seeds: int, fit: bool) -> tuple[list[tasks.Sample], bool]:
    """The samples of ``k`` shots over ``seeds`` sets of examples, and whether a set gave prompts
    longer than the context (with ``fit``: that set and later ones are left out). Zero shots has no
    examples to draw: one set (its prompts scored once per seed would be counted as independent
    samples, an interval too narrow by sqrt(seeds))."""
    samples: list[tasks.Sample] = []
    for seed in range(seeds if k else 1):
        batch = build_prompts(adapter, train, test, k, seed)
        if fit and max(len(s.prompt) + 4 for s in batch) > adapter.context:
            return samples, True
        samples += batch
    return samples, False


def _score_shots(adapter, samples: list[tasks.Sample], test, k: int) -> tuple[dict, list[dict]]:
    """The accuracy row for ``k`` shots over the sets of ``samples``, and the scored samples. All sets
    are scored in one call, so each question's zero-shot control is scored once.

    Calibrated accuracy: the label the shots raise most over the zero-shot prompt is the true one
    (the label words' own prior, their length in tokens above all, cancels). At zero shots the
    prompt is its own control, every gain is 0 and there is nothing to calibrate: None."""
    rows = scoring.score_samples(adapter, samples, "likelihood", desc=f"icl: {k} shots")
    n_sets = len(samples) // len(test)
    clusters = np.tile(np.arange(len(test)), n_sets)

    def per_set(key: str) -> list[float]:
        values = [r[key] for r in rows]
        return [float(np.mean(values[i * len(test) : (i + 1) * len(test)])) for i in range(n_sets)]

    # a test question asked with several example sets is one cluster: its answers agree across sets
    p = stats.proportion([r["likelihood_correct"] for r in rows], clusters=clusters)
    cal, cal_se = stats.mean_stderr([r["gain_true"] for r in rows])
    row = {
        "shots": k,
        "accuracy": p["accuracy"],
        "ci95": p["ci95"],
        "n": p["n"],
        "n_effective": p["n_effective"],  # what the interval counts: a question's answers agree across sets
        "accuracy_per_set": per_set("likelihood_correct"),
        "calibrated_accuracy": None,
        "calibrated_accuracy_ci95": None,
        "calibrated": cal,
        "calibrated_stderr": cal_se,
        "calibrated_distractors": float(np.mean([r["gain_distractors"] for r in rows])),
        "predicted": _counts(rows, samples, "choice"),
        "context_tokens": float(np.mean([r["prompt_tokens"] for r in rows])),
        "n_test": len(test),
        "n_sets": n_sets,
    }
    row["set_std"] = float(np.std(row["accuracy_per_set"]))
    if k:
        c = stats.proportion([r["calibrated_correct"] for r in rows], clusters=clusters)
        row["calibrated_accuracy"], row["calibrated_accuracy_ci95"] = c["accuracy"], c["ci95"]
        row["calibrated_accuracy_per_set"] = per_set("calibrated_correct")
        row["calibrated_predicted"] = _counts(rows, samples, "calibrated_choice")
    return row, rows


def _picked(rows: list[dict], samples: list[tasks.Sample], key: str) -> list[str]:
    """The label word each sample's answer was (``key``: a row's candidate index)."""
    return [candidate_order(s.answer)[r[key]] for r, s in zip(rows, samples)]


def _counts(rows: list[dict], samples: list[tasks.Sample], key: str) -> dict[str, int]:
    """How often each label word was the answer picked."""
    picked = _picked(rows, samples, key)
    return {lab: picked.count(lab) for lab in LABELS.values()}


def _arrays(rows: list[dict], samples: list[tasks.Sample]) -> dict[str, np.ndarray]:
    """The per-sample outcomes, every shot count in order (``cell`` = (shots, example set), ``group``
    and ``unit`` = the test question): correctness both ways, the true label and the labels picked
    (indices into LABELS' order). At zero shots there is no calibrated answer: -1."""
    labels = list(LABELS.values())
    zero = [s.cell[0] == 0 for s in samples]
    out = tasks.sample_arrays(rows)
    out["correct_calibrated_correct"][np.asarray(zero, bool)] = -1
    out["label"] = np.asarray([labels.index(s.answer) for s in samples], np.int64)
    out["predicted"] = np.asarray([labels.index(w) for w in _picked(rows, samples, "choice")], np.int64)
    calibrated = _picked(rows, samples, "calibrated_choice")
    out["calibrated_predicted"] = np.asarray(
        [-1 if z else labels.index(w) for w, z in zip(calibrated, zero)], np.int64
    )
    return out


def _summary(per_shot: list[dict], test) -> dict:
    """Headline numbers: accuracy at the most shots (interval, n, calibration), the best accuracy,
    chance and the majority class's accuracy on these test questions."""
    best = max(per_shot, key=lambda r: r["accuracy"])
    last = per_shot[-1]
    return {
        "accuracy_max_shots": last["accuracy"],
        "accuracy_max_shots_ci95": last["ci95"],  # the report folds it into the accuracy
        "n_max_shots": last["n"],
        "n_effective_max_shots": last["n_effective"],
        "calibrated_max_shots": last["calibrated"],
        "calibrated_accuracy_max_shots": last["calibrated_accuracy"],
        "shots_max": last["shots"],
        "best_accuracy": best["accuracy"],
        "best_shots": best["shots"],
        "chance": 1 / len(LABELS),
        "majority_class": stats.proportion([a == _majority(test) for _, a in test])["accuracy"],
    }


def _plot_accuracy(model_id: str, per_shot: list[dict], path):
    """Accuracy against the prompt length in tokens, the shot counts in the axis label."""
    from contextlab.result_plots import lines_png

    return lines_png(
        {model_id: ([r["context_tokens"] for r in per_shot], [r["accuracy"] for r in per_shot])},
        path,
        xlabel="context length (tokens; shots: " + ", ".join(str(r["shots"]) for r in per_shot) + ")",
        ylabel="accuracy",
        title="TREC many-shot in-context classification",
        logx=True,
        chance=1 / len(LABELS),
        bands={model_id: [r["ci95"] for r in per_shot]},
    )


def _majority(test) -> str:
    labels = [a for _, a in test]
    return max(set(labels), key=labels.count)
