"""Scoring the prompt tasks' samples (``tasks.Sample``), deterministically, in one or both ways.

* likelihood: the summed log-probability of each candidate after the prompt (candidates
  of one prompt share its prefill: ``ModelAdapter.score_continuations``); correct when the true
  answer scores highest. Exact ties go to the candidate with the smallest token ids, an order
  that does not depend on which member of a balanced set is true, so a tie never lifts a model
  above 1/k. This works even for tiny models that cannot yet generate the answer;
* calibration, when the sample has a ``control`` prompt (the same prompt with the evidence
  removed: the needle, the queried pair, the shots): ``gain_true`` = log p(true | prompt)
  - log p(true | control), and ``gain_distractors`` the same for the wrong candidates
  (their mean), so a shift that raises every candidate is told apart from retrieval
  (``calibrated_specific`` = their difference). A shorter prompt moves every candidate's
  log-likelihood even in a model that retrieves nothing (a random-init GPT), so read the
  true answer's gain beside the distractors'. The control prompt of a set is scored once
  per call, however many members share it;
* generation: greedy decoding of up to ``max_new_tokens``; ``exact`` when the generated
  text (whitespace-trimmed) starts with the answer, ``contains`` when it holds it anywhere,
  and ``keyword_recall``, the SPLICE paper's needle metric: the fraction of the answer's
  keywords (its words less stopwords) found among the generated words.

With both ways (the tasks' default), where does a long prompt's prefill go? Apart, the candidates
share one prefill and the answers are generated a batch at a time (a second, batched prefill); on
a CPU one prefill of each prompt serves its candidates and its answer (``shares_prefill``), which
measured 1.7x faster at 2,048-token prompts and 1.1x at 512 (benchmarks/retrieval_scoring.py),
with the same rows. On a GPU the batched decoding wins, so there they stay apart.

``visible`` keeps only the most recent k prompt tokens (k < 1: that fraction of the
prompt), the knob of the visible-context sweep. Trade-off: the control prompts cost one extra
forward per candidate per distinct control, in exchange for a score that reads 0 for a model that
does not use the evidence.
"""

from __future__ import annotations

import math
import re

import numpy as np

import contextlab.eval.progress as progress
from contextlab.eval.tasks import Sample

_STOP = (
    "a an the and or but of in on at to is are was were be been it its this that for with by as from "
    "into than then there their they he she we you i"
)
STOPWORDS = frozenset(_STOP.split())
WORD = re.compile(r"\w+(?:[-']\w+)*")


def keywords(text: str) -> list[str]:
    """The words of ``text`` that carry its content: lower-cased, punctuation and stopwords dropped."""
    words = WORD.findall(text.lower())
    return [w for w in words if w not in STOPWORDS] or words


def keyword_recall(generated: str, answer: str) -> float:
    """Fraction of the answer's keywords that occur among the generated words (SPLICE, appendix N)."""
    want = keywords(answer)
    if not want:
        return float("nan")
    have = set(WORD.findall(generated.lower()))
    return sum(w in have for w in want) / len(want)


def truncate(prompt: list[int], visible: float | None) -> list[int]:
    if visible is None or visible <= 0:
        return prompt
    k = int(math.ceil(visible * len(prompt))) if visible < 1 else int(visible)
    return prompt[-k:] if k < len(prompt) else prompt


def winner(scores: np.ndarray, candidates: list[list[int]]) -> int:
    """Index of the best-scoring candidate; exact ties go to the smallest token ids."""
    best = scores.max()
    return min((i for i in range(len(scores)) if scores[i] == best), key=lambda i: list(candidates[i]))


def _likelihood(adapter, s: Sample, prompt: list[int], visible, cache: dict, with_=None) -> dict:
    """Likelihood fields of one sample (``with_``: its candidates' scores when already computed);
    control-prompt scores are read from / written to ``cache``."""
    cands = [list(c) for c in s.candidates]
    if with_ is None:
        with_ = adapter.score_continuations(prompt, cands)
    control = truncate(s.control, visible) if s.control is not None else None
    if control is not None:
        ck = tuple(control)
        need = [c for c in cands if (ck, tuple(c)) not in cache]
        if need:
            for c, v in zip(need, adapter.score_continuations(control, need)):
                cache[(ck, tuple(c))] = float(v)
    choice = winner(with_, cands)
    row: dict = {
        "likelihood_correct": choice == 0,
        "choice": choice,  # the candidate picked (0 = the true one)
        "rank": int((with_[1:] >= with_[0]).sum()),
        "margin": float(with_[0] - with_[1:].max()) if len(cands) > 1 else 0.0,
    }
    if control is not None:
        gain = with_ - np.array([cache[(ck, tuple(c))] for c in cands])
        row["gain_true"] = float(gain[0])
        row["gain_distractors"] = float(gain[1:].mean()) if len(cands) > 1 else 0.0
        # the candidate the evidence raises most: the candidates' own prior (their length, their words)
        # cancels, which a summed log-probability keeps (a 24-token answer loses to an 18-token one)
        row["calibrated_choice"] = winner(gain, cands)
        row["calibrated_correct"] = row["calibrated_choice"] == 0
    return row


def score_samples(
    adapter,
    samples: list[Sample],
    mode: str = "both",
    max_new_tokens: int = 16,
    visible: float | None = None,
    desc: str = "",
) -> list[dict]:
    """One dict per sample: likelihood_correct / rank / margin / gain_true / gain_distractors and/or
    generated / exact / contains / keyword_recall. ``desc`` labels the progress bar (the task's name).
    Samples go ``adapter.batch_size`` at a time: each scores its candidates (``_likelihood``), then the
    batch generates its answers together (``adapter.generate_many``, greedy, left-padded). With both
    ways on a CPU, one prefill of a prompt serves its candidates and its answer (``shares_prefill``)."""
    out, cache = [], {}
    share = mode == "both" and shares_prefill(adapter)
    with progress.bar(total=len(samples), desc=desc, unit="prompt") as bar:
        for a in range(0, len(samples), adapter.batch_size):
            batch = samples[a : a + adapter.batch_size]
            prompts = [truncate(s.prompt, visible) for s in batch]
            rows, unanswered = [], []
            for i, (s, prompt) in enumerate(zip(batch, prompts)):
                unit = s.unit if s.unit >= 0 else s.group
                row: dict = {
                    "cell": list(s.cell),
                    "prompt_tokens": len(prompt),
                    "group": s.group,
                    "unit": unit,
                }
                both = None
                if share and s.candidates:
                    both = adapter.score_and_generate(prompt, s.candidates, s.max_new or max_new_tokens)
                if mode in ("likelihood", "both") and s.candidates:
                    scores = None if both is None else both[0]
                    row.update(_likelihood(adapter, s, prompt, visible, cache, scores))
                if both is not None:
                    _answer(row, adapter.tokenizer.decode(both[1]), s.answer)
                elif mode in ("generate", "both"):
                    unanswered.append(i)
                rows.append(row)
            if unanswered:
                todo = [(batch[i], prompts[i], rows[i]) for i in unanswered]
                _generated(adapter, *map(list, zip(*todo)), max_new_tokens)
            out += rows
            bar.update(len(batch))
    return out


def shares_prefill(adapter) -> bool:
    """Whether scoring and generation share each prompt's prefill (``score_and_generate``): on a CPU,
    where the prompt's forward pass dominates (measured in benchmarks/retrieval_scoring.py); on a GPU
    the batch's decoding steps, which then run one prompt at a time, would cost more than it saves."""
    device = getattr(adapter, "device", None)
    return hasattr(adapter, "score_and_generate") and getattr(device, "type", "") == "cpu"


def _answer(row: dict, generated: str, answer: str) -> None:
    """The generation fields of one row."""
    row["generated"] = generated
    said = _norm(generated)
    # an answer the prompt writes quoted (kv's JSON values) is generated with its opening quote
    row["exact"] = said.startswith(_norm(answer)) or said.lstrip("\"'").startswith(_norm(answer))
    row["contains"] = _norm(answer) in _norm(generated)
    row["keyword_recall"] = keyword_recall(generated, answer)


def _generated(
    adapter, batch: list[Sample], prompts: list[list[int]], rows: list[dict], max_new: int
) -> None:
    """Greedy answers of a batch of samples into their rows, generated together: as many new tokens as
    the batch's longest answer, each row then cut to its own (greedy decoding is the same token by
    token whatever the limit, so the cut rows are what each sample's own limit gives). When that would
    make a forward pass longer than any sample's own (the longest prompt wanting the fewest tokens),
    the samples go in groups of one limit instead, so no pass runs past what was checked."""
    wants = [s.max_new or max_new for s in batch]
    own = max(len(p) + n - 1 for p, n in zip(prompts, wants))
    if max(len(p) for p in prompts) + max(wants) - 1 <= own:
        groups = [list(range(len(batch)))]
    else:
        groups = [[i for i, n in enumerate(wants) if n == want] for want in sorted(set(wants))]
    for group in groups:
        limit = max(wants[i] for i in group)
        for i, ids in zip(group, adapter.generate_many([prompts[i] for i in group], limit)):
            _answer(rows[i], adapter.tokenizer.decode(ids[: wants[i]]), batch[i].answer)


def _norm(text: str) -> str:
    return " ".join(text.strip().split()).lower()
