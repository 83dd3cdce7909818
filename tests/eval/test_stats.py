"""Wilson intervals, keyword recall, balanced scoring (ties, calibration) and label-balanced ICL sets."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from contextlab.errors import UserError
from contextlab.eval import icl, needle, scoring, stats, tasks
from tests.conftest import TREC


@pytest.mark.parametrize("k,n", [(0, 30), (6, 30), (15, 30), (30, 30), (101, 500), (1, 1)])
def test_wilson_matches_scipy(k, n):
    ref = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    lo, hi = stats.wilson(k, n)
    assert lo == pytest.approx(ref.low, abs=1e-9) and hi == pytest.approx(ref.high, abs=1e-9)
    p = stats.proportion([True] * k + [False] * (n - k))
    assert p["n"] == n and p["accuracy"] == k / n and p["ci95"] == [lo, hi]


def test_wilson_of_nothing_and_mean_stderr():
    assert all(np.isnan(stats.wilson(0, 0)))
    assert stats.wilson(0, 7)[0] == 0.0 and stats.wilson(7, 7)[1] == 1.0  # exact ends, no 1.7e-18 of rounding
    m, se = stats.mean_stderr([1.0, 2.0, 3.0, 4.0])
    assert m == 2.5 and se == pytest.approx(np.std([1, 2, 3, 4], ddof=1) / 2)
    assert stats.accuracy_line("accuracy", 0.2, [0.16, 0.25], 500, 0.2, 0.01) == (
        "accuracy 0.20 [0.16, 0.25] of n=500, chance 0.20, calibrated +0.01 nats"
    )


def test_keyword_recall_counts_the_answers_content_words():
    assert scoring.keywords(needle.ANSWER) == ["eat", "sandwich", "sit", "dolores", "park", "sunny", "day"]
    assert scoring.keyword_recall("Eat a sandwich, then the park.", needle.ANSWER) == pytest.approx(3 / 7)
    assert scoring.keyword_recall(" 12345 is it", "12345") == 1.0
    assert scoring.keyword_recall("1234", "12345") == 0.0


class FakeAdapter:
    """score_spans from a function of (prompt, candidate); records every scored item."""

    batch_size = 8

    def __init__(self, fn):
        self.fn, self.items = fn, []

    def score_continuations(self, prompt, candidates):
        return self.score_spans([(list(prompt) + list(c), len(prompt)) for c in candidates])

    def score_spans(self, items):
        self.items += [(tuple(ids[:start]), tuple(ids[start:])) for ids, start in items]
        return np.array([self.fn(list(ids[:start]), list(ids[start:])) for ids, start in items], dtype=float)


def balanced_set() -> list[tasks.Sample]:
    """Three prompts [9, evidence, 8], the evidence being candidate j's token; control [9, 8]."""
    pool = [[1], [2], [3]]
    return [
        tasks.Sample([9, *pool[j], 8], str(j), cands, control=[9, 8], group=0)
        for j, cands in enumerate(tasks.rotations(pool))
    ]


@pytest.mark.parametrize(
    "fn,correct,gain_true,gain_distractors",
    [
        (lambda p, c: 2.0 * (c[0] in p) + 0.5, [True] * 3, 2.0, 0.0),  # reads the evidence
        (lambda p, c: 0.0, [True, False, False], 0.0, 0.0),  # ignores everything: ties
        (lambda p, c: float(c[0]), [False, False, True], 0.0, 0.0),  # a fixed preference
        (lambda p, c: 0.3 * len(p), [True, False, False], 0.3, 0.3),  # longer prompt, all shifted
    ],
)
def test_balanced_sets_give_a_context_blind_model_one_in_k(fn, correct, gain_true, gain_distractors):
    adapter = FakeAdapter(fn)
    rows = scoring.score_samples(adapter, balanced_set(), "likelihood")
    assert [r["likelihood_correct"] for r in rows] == correct
    assert [r["gain_true"] for r in rows] == pytest.approx([gain_true] * 3)
    assert [r["gain_distractors"] for r in rows] == pytest.approx([gain_distractors] * 3)
    assert sum(p == (9, 8) for p, _ in adapter.items) == 3  # the shared control: once per candidate
    s = tasks.summarize(rows, 3)
    assert s["summary"]["n"] == 3 and s["summary"]["chance"] == pytest.approx(1 / 3)
    assert s["summary"]["likelihood_accuracy_ci95"] == list(stats.wilson(sum(correct), 3))
    assert s["summary"]["calibrated"] == pytest.approx(gain_true)
    assert s["text"][0].startswith(f"likelihood accuracy {sum(correct) / 3:.2f} [")


def test_ties_go_to_the_smallest_candidate_ids():
    scores = np.array([1.0, 1.0, 0.5])
    assert scoring.winner(scores, [[5, 1], [4, 9], [0]]) == 1
    assert scoring.winner(scores, [[4], [4, 9], [0]]) == 0


def test_icl_label_balanced_test_sets(tmp_path):
    rows = icl.read_trec(TREC / "train.txt")
    picked = icl.select_test(rows, 12, True)
    labels = [a for _, a in picked]
    assert len(picked) == 12 and all(labels.count(lab) == 2 for lab in icl.LABELS.values())
    assert icl.select_test(rows, 12, False) == rows[:12]
    with pytest.raises(UserError, match="has 2 'abbreviation' questions; use --n-test between 6 and 12"):
        icl.select_test(rows, 18, True)
    with pytest.raises(UserError, match="'abbreviation'"):
        icl.select_test(icl.read_trec(TREC / "test.txt"), 6, True)  # the cut test file has no ABBR line


def test_a_clustered_proportion_widens_by_the_clusters_agreement_and_never_narrows():
    """ICL's interval took one test question asked with 3 example sets as 3 independent answers (a
    user's bootstrap over questions: [0.111, 0.247] where Wilson said [0.122, 0.239]); retrieval's the
    rotations of one candidate set. Outcomes of one cluster that agree now widen it."""
    from contextlab.eval.stats import effective_n, proportion, wilson

    rng = np.random.default_rng(0)
    per_question = rng.random(60) < 0.3
    agree = np.tile(per_question, 3)  # every question answered alike in all 3 sets
    questions = np.tile(np.arange(60), 3)
    p = proportion(agree, clusters=questions)
    assert p["n_effective"] == pytest.approx(60, rel=0.05)  # 180 answers, 60 independent ones
    assert p["ci95"] == pytest.approx(list(wilson(agree.mean() * p["n_effective"], p["n_effective"])))
    plain = proportion(agree)["ci95"]
    assert p["ci95"][0] < plain[0] and p["ci95"][1] > plain[1]
    balanced = np.tile([1, 0, 0, 0, 0], 20)  # a context-blind model: exactly 1 of 5 in every set
    sets = np.repeat(np.arange(20), 5)
    assert effective_n(balanced.astype(float), sets) == 100  # no spread between sets: independent's n
    assert proportion(balanced, clusters=np.arange(100))["ci95"] == list(wilson(20, 100))
    # the interval's coverage over repeated draws of clustered data holds near 95%
    hits = 0
    for seed in range(400):
        r = np.random.default_rng(seed)
        q = r.random(50) < 0.3
        flips = r.random(150) < 0.1
        data = np.tile(q, 3) ^ flips
        lo, hi = proportion(data, clusters=np.tile(np.arange(50), 3))["ci95"]
        hits += lo <= 0.3 * 0.9 + 0.7 * 0.1 <= hi
    assert hits / 400 > 0.92
