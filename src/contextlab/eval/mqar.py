"""Multi-query associative recall (MQAR): accuracy by number of pairs and by key-to-query distance.

Reads an MQAR store (``contextlab data synthetic mqar``; it must share the model's tokenizer).
With ``pairs`` empty the store's own first ``sequences`` sequences are scored; with pair
counts given, fresh sequences are drawn from the store's config with each count (the same
vocabulary, seed ``seed``), so one model is tested at and beyond the pairs it saw.

Two measures:

* ``vocab_accuracy``, the MQAR metric of the literature: at every answer of every sequence
  (one forward per sequence), is the argmax over the whole vocabulary the true value? With
  a Wilson interval, overall and per pair count (``by_pairs``).
* the prompt-task machinery of the other retrieval tasks (``tasks.py``): the queries of a
  sequence are split into balanced candidate sets of 1 + ``distractors`` (their values are
  the candidates); each member is asked once, its prompt being the sequence up to its query
  key, so a model that ignores the pairs scores exactly 1/k. The control prompt is the same
  prompt with the set's pairs removed (from the pairs and from any earlier query of the
  set): no candidate is left in the context, so the control's accuracy
  (``control_accuracy``, the removed-pairs control) must sit at chance for any model, and
  the calibrated gain (true answer vs distractors, with vs without the pairs) is the part
  of the score that comes from reading the pair. Cells are (pairs, distance bin), the
  distance being query position minus key position in tokens.

Trade-off: the candidate scores cost 2k forwards per query (prompt and control, one per
candidate, as in the other tasks) where the vocabulary accuracy costs one forward per
sequence; the candidate test is what pairs with the other tasks and has the control.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np

import contextlab.eval.progress as progress
import contextlab.eval.scoring as scoring
import contextlab.eval.stats as stats
import contextlab.eval.tasks as tasks
from contextlab.config import opt
from contextlab.data import mqar
from contextlab.errors import UserError
from contextlab.eval.base import EvalOutput, open_store


@dataclass
class Options:
    pairs: list[int] = opt(
        [], "pair counts to test on fresh sequences of the store's config; empty = the store's own sequences"
    )
    sequences: int = opt(16, "sequences per pair count (every query of each is scored)")
    distractors: int = opt(
        3, "other values of the same prompt scored against the true one (a set of 1 + this)"
    )
    distance_bins: int = opt(4, "equal-width bins of the key-to-query distance (the cells of the plot)")
    scoring: Literal["likelihood", "generate", "both"] = opt(
        "likelihood", "likelihood of the candidates, greedy generation of the answer, or both"
    )
    seed: int = opt(
        1234,
        "seed of the fresh sequences and of the candidate sets' distractors (when 1 + --distractors equals "
        "the values a sequence asks, every set holds them all and the seed changes nothing)",
    )


def sequences(store, cfg: mqar.MQARConfig, o: Options) -> list[tuple[mqar.MQARConfig, np.ndarray]]:
    """(config, (n, T) rows) per pair count: the store's first rows, or fresh rows of each count."""
    if not o.pairs:
        n = min(o.sequences, store.n_docs)
        return [(cfg, np.stack([np.asarray(store.doc(i), np.int64) for i in range(n)]))]
    out = []
    for p in o.pairs:
        q = 0 if cfg.queries in (0, cfg.pairs) else min(cfg.queries, p)
        ctx = 0 if cfg.context == 0 else max(cfg.context * p // cfg.pairs, 4 * p)
        try:
            c = dataclasses.replace(cfg, pairs=p, queries=q, context=ctx, docs=o.sequences, seed=o.seed)
        except ValueError as e:
            raise UserError(f"eval mqar: --pairs {p} does not fit the store's vocabulary ({e})") from None
        out.append((c, mqar.to_tokens(mqar.sample(c, o.sequences, np.random.default_rng([o.seed, p])), c)))
    return out


def vocab_hits(adapter, rows: np.ndarray, keys: int, batch: int = 64) -> np.ndarray:
    """(n_answers,) bool over all answers of ``rows`` in row order: the argmax over the vocabulary is the
    true value (``batch`` rows per forward)."""
    answers = mqar.answer_positions(rows, keys)  # (n, T) bool
    hits = []
    for a in progress.bar(range(0, len(rows), batch), desc="mqar: vocabulary", unit="batch"):
        best = adapter.logits(rows[a : a + batch, :-1]).argmax(-1).cpu().numpy()  # (b, T-1): t predicts t + 1
        at = answers[a : a + batch]
        hits.append(best[at[:, 1:]] == rows[a : a + batch][at])
    return np.concatenate(hits)


def build(cfg: mqar.MQARConfig, rows: np.ndarray, o: Options, rng: np.random.Generator, group0: int):
    """Balanced candidate sets over the queries of each row -> (samples, control samples)."""
    s = mqar.parse_rows(rows, cfg)
    k = 1 + o.distractors
    if k > cfg.n_queries:
        raise UserError(f"eval mqar: --distractors {o.distractors} needs >= {k} queries per sequence")
    width = -(-cfg.length // o.distance_bins)
    dist = mqar.distances(s)  # (n, Q)
    samples, controls = [], []
    for i, row in enumerate(rows):
        order = rng.permutation(cfg.n_queries)
        for g in range(cfg.n_queries // k):
            members = np.sort(order[g * k : (g + 1) * k])  # query indices of the set, in row order
            pairs = s.asked[i, members]
            drop = {int(2 * p + d) for p in pairs for d in (0, 1)}  # the set's pairs ...
            values = [[int(s.values[i, p])] for p in pairs]
            group = group0 + len(samples) // k
            for j, cands in zip(members, tasks.rotations(values)):
                end = int(s.slots[i, j]) + 1  # the prompt ends with the query key
                cut = drop | {
                    int(s.slots[i, m]) + d for m in members if s.slots[i, m] < end - 1 for d in (0, 1)
                }
                prompt = row[:end].tolist()
                control = [t for x, t in enumerate(prompt) if x not in cut]  # ... and their earlier queries
                cell = (cfg.pairs, int(dist[i, j]) // width * width)
                answer = value_name(cands[0][0], cfg)
                samples.append(tasks.Sample(prompt, answer, cands, cell, 1, {}, control, group))
                controls.append(tasks.Sample(control, answer, cands, cell, 1, {}, None, group))
    return samples, controls


def value_name(token: int, cfg: mqar.MQARConfig) -> str:
    """The vocabulary name of a value id (``v07``), what greedy generation must reproduce."""
    w = len(str(max(cfg.keys, cfg.values) - 1))
    return f"v{token - cfg.keys:0{w}d}"


def check_data(data: str) -> None:
    """One line, before any model loads, for --data that is no MQAR store."""
    from contextlab.data.store import TokenStore

    mqar.mqar_of_store(TokenStore(data))


def _check_vocabulary(adapter, data: str | None) -> None:
    """One line for a model whose tokenizer is not the MQAR store's synthetic vocabulary (keys, values,
    no text): no ingest can make the data for it, only a model trained on such a store takes it."""
    from contextlab.data.store import TokenStore, is_store

    if not data or not is_store(data):
        return  # open_store says what is wrong with the path
    store = TokenStore(data)
    if store.meta.get("mqar") and adapter.tokenizer.spec().get("hash") != store.tokenizer_hash:
        raise UserError(
            f"eval mqar: {store.path} is written in a synthetic vocabulary of keys and values "
            f"({store.vocab_size} ids, no text) that {adapter.info.id} does not speak; evaluate a model "
            "trained on such a store (`contextlab data synthetic mqar --out STORE`, then `contextlab train` "
            "on it), or use kv, passkey or niah for a text model"
        )


def run(adapter, options: Options, data: str | None) -> EvalOutput:
    _check_vocabulary(adapter, data)
    store = open_store(data, adapter, "mqar", kinds=("mqar",))
    cfg = mqar.mqar_of_store(store)
    if options.distance_bins < 1 or options.sequences < 1:
        raise UserError("eval mqar needs --distance-bins >= 1 and --sequences >= 1")
    rng = np.random.default_rng(options.seed)
    rows_all, ctrl_all, by_pairs, vocab = [], [], [], []
    todo = sequences(store, cfg, options)
    longest = max(todo, key=lambda t: t[0].length)[0]
    adapter.check_length(
        longest.length - 1,
        f"mqar's longest sequences ({longest.pairs} pairs)",
        "choose fewer --pairs",
    )
    progress.announce(
        "mqar",
        {
            "pairs": [c.pairs for c, _ in todo],
            "sequences": [len(rows) for _, rows in todo],
            "tokens per sequence": [c.length for c, _ in todo],
            "candidates": 1 + options.distractors,
            "scoring": options.scoring,
            "data": data,
        },
    )
    for c, rows in todo:
        hits = vocab_hits(adapter, rows, c.keys)
        vocab.append(hits)
        samples, controls = build(c, rows, options, rng, len(rows_all))
        scored = scoring.score_samples(adapter, samples, options.scoring, desc=f"mqar: {c.pairs} pairs")
        ctrl = scoring.score_samples(adapter, controls, "likelihood", desc=f"mqar: {c.pairs} pairs, control")
        rows_all += scored
        ctrl_all += ctrl
        p = stats.proportion(hits)
        cp = stats.proportion([r["likelihood_correct"] for r in ctrl])
        entry = {
            "pairs": c.pairs,
            "context": c.length,
            "vocab_accuracy": p["accuracy"],
            "vocab_ci95": p["ci95"],
        }
        entry |= {"answers": int(len(hits)), "control_accuracy": cp["accuracy"], "control_ci95": cp["ci95"]}
        entry |= {k: v for k, v in tasks.summarize(scored, 1 + options.distractors)["summary"].items()}
        by_pairs.append(entry)
    res = tasks.summarize(rows_all, 1 + options.distractors)
    hits = np.concatenate(vocab)
    p, cp = stats.proportion(hits), stats.proportion([r["likelihood_correct"] for r in ctrl_all])
    first, eliminating = no_binding(by_pairs)
    res["summary"] = {
        "vocab_accuracy": p["accuracy"],
        "vocab_accuracy_ci95": p["ci95"],
        "vocab_chance": 1 / cfg.values,  # the argmax over the whole vocabulary: 1/V of a blind guess
        "vocab_no_binding": [first, eliminating],  # a value of the prompt unbound to its key: 1/N, H_N/N
        **res["summary"],
    }
    res["summary"] |= {"control_accuracy": cp["accuracy"], "control_ci95": cp["ci95"]}
    res["by_pairs"] = by_pairs
    res["text"] = [
        f"vocabulary accuracy {p['accuracy']:.3f} [{p['ci95'][0]:.3f}, {p['ci95'][1]:.3f}] "
        f"of {len(hits)} answers (a blind guess among the {cfg.values} values: {1 / cfg.values:.3f}; a "
        f"model that answers with a value of the prompt but binds none to its key: {first:.3f}, and "
        f"{eliminating:.3f} if it leaves out the values of keys asked already; the candidate accuracy's "
        f"chance is 1/{1 + options.distractors})",
        *res["text"],
        f"removed-pairs control {cp['accuracy']:.3f} [{cp['ci95'][0]:.3f}, {cp['ci95'][1]:.3f}], "
        f"chance {1 / (1 + options.distractors):.3f}",
    ]
    arrays = tasks.sample_arrays(rows_all) | {
        "control_correct": np.asarray([r["likelihood_correct"] for r in ctrl_all], np.int8),
        "vocab_correct": hits.astype(np.int8),
    }
    # the store by its place and content (a store ingested again at the path is another one, and one the
    # model trained on is told by its hash), as the other store-reading evaluations record it
    info = {"store": str(data), "hash": store.hash, "config": dataclasses.asdict(cfg)}
    return EvalOutput(res, info, arrays=arrays, plot=_plot(res, options, adapter.info.id))


def no_binding(by_pairs: list[dict]) -> tuple[float, float]:
    """The vocabulary accuracy of a model that answers with a value of the prompt but binds none to its
    key (docs/mqar.md): 1/N a guess, H_N/N over a sequence's N answers when it leaves out the values of
    the keys asked already; averaged over the pair counts by their answers."""
    n = np.array([e["pairs"] for e in by_pairs], float)
    w = np.array([e["answers"] for e in by_pairs], float)
    harmonic = np.array([np.sum(1.0 / np.arange(1, k + 1)) for k in n.astype(int)])
    return float(np.sum(w / n) / w.sum()), float(np.sum(w * harmonic / n) / w.sum())


def _plot(res: dict, o: Options, model_id: str):
    """Accuracy (likelihood, 1 + distractors candidates) by distance, one line per pair count."""
    series, bands = {}, {}
    for n in sorted({c["cell"][0] for c in res["by_cell"]}):
        cells = [c for c in res["by_cell"] if c["cell"][0] == n and "likelihood_correct" in c]
        label = f"{n} pairs"
        series[label] = ([c["cell"][1] for c in cells], [c["likelihood_correct"] for c in cells])
        bands[label] = [c["likelihood_accuracy_ci95"] for c in cells]

    def plot(path):
        from contextlab.result_plots import lines_png

        return lines_png(
            series,
            path,
            xlabel="key-to-query distance (tokens, bin start)",
            ylabel="accuracy (likelihood)",
            title=f"MQAR: {model_id}",
            chance=1 / (1 + o.distractors),
            bands=bands,
        )

    return plot
