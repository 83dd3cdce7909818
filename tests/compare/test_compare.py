"""Paired comparisons: synthetic results with known answers, the refusal, tiny trained models end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from contextlab.cli import main
from contextlab.compare.paired import Options, compare_runs
from contextlab.errors import UserError
from contextlab.eval.paired_stats import cluster_bootstrap, cluster_t, per_cluster
from contextlab.eval.results import write_result

BUCKETS = [{"from": 1, "to": 1}, {"from": 2, "to": 3}, {"from": 4, "to": 7}]


def contextwise_result(
    run,
    bucket_loss,
    best_loss,
    pieces,
    *,
    hash_="a" * 64,
    resolved_length=None,
    one_token=None,
    data_extra=None,
    best_window=(6, 7),
    **options,
) -> None:
    """A contextwise result file in RUN/eval with the given per-piece arrays (``resolved_length``: the
    length the run resolved, recorded as results.length)."""
    n = len(pieces)
    length = {} if resolved_length is None else {"length": resolved_length}
    write_result(
        run / "eval",
        "contextwise",
        results={
            "summary": {"best_context_loss": float(np.mean(best_loss))},
            "buckets": BUCKETS,
            "best_context": {"from": best_window[0], "to": best_window[1], "loss": float(np.mean(best_loss))},
            **length,
        },
        options={"length": 8, "max_docs": 0, "pieces_per_doc": 0, "best_fraction": 0.1, **options},
        model={"id": run.name, "path": str(run)},
        data={"store": str(run / "store"), "hash": hash_, "pieces": n, **(data_extra or {})},
        seconds=0.0,
        arrays={
            "pieces": np.asarray(pieces, np.int64),
            "piece_bucket_loss": np.asarray(bucket_loss, np.float64),
            "piece_best_loss": np.asarray(best_loss, np.float64),
            **({} if one_token is None else {"piece_one_token_loss": np.asarray(one_token, np.float64)}),
        },
    )


def niah_result(run, correct, group, cell, *, lengths=(32, 64), tokenizer="t" * 64, **options) -> None:
    write_result(
        run / "eval",
        "niah",
        results={"summary": {"likelihood_accuracy": float(np.mean(correct))}},
        options={"samples": 2, "scoring": "likelihood", **options},
        model={"id": run.name, "tokenizer": {"hash": tokenizer}},
        data={"haystack": "x", "hash": "h" * 64, "lengths": list(lengths)},
        seconds=0.0,
        arrays={
            "correct_likelihood_correct": np.asarray(correct, np.int8),
            "group": np.asarray(group, np.int64),
            "cell": np.asarray(cell, np.float64),
        },
    )


def test_identical_runs_give_zero_with_an_interval_containing_zero(tmp_path):
    rng = np.random.default_rng(0)
    pieces = [(d, 0) for d in range(20)]
    loss, best = rng.normal(5, 0.3, (20, 3)), rng.normal(4.5, 0.3, 20)
    group = np.repeat(np.arange(8), 5)
    correct = rng.integers(0, 2, 40)
    cell = np.repeat([[0, 32], [100, 64]], 20, axis=0)
    for run in (tmp_path / "a", tmp_path / "b"):
        contextwise_result(run, loss, best, pieces)
        niah_result(run, correct, group, cell)
    out, docs = compare_runs(tmp_path / "a", tmp_path / "b", None, Options(), None)
    assert out == tmp_path / "a" / "compare" / "b" and [d["eval"] for d in docs] == ["contextwise", "niah"]
    cw, niah = (d["results"] for d in docs)
    for r in [cw["best_context"], *cw["buckets"], niah["overall"], *niah["by_cell"]]:
        assert r["diff"] == 0 and r["interval95"][0] <= 0 <= r["interval95"][1]
    assert niah["overall"]["mcnemar"]["only_a_right"] == niah["overall"]["mcnemar"]["only_b_right"] == 0
    assert (out / "compare_contextwise.png").stat().st_size > 1000 and (out / "compare_niah.png").is_file()
    assert json.loads((out / "compare_niah.json").read_text())["format"] == "contextlab-compare"


def test_a_shifted_run_gives_the_shift_and_the_paired_t_interval(tmp_path):
    rng = np.random.default_rng(1)
    pieces = [(d, 0) for d in range(30)]  # one piece per document: the ordinary paired t interval
    loss_b, best_b = rng.normal(5, 0.5, (30, 3)), rng.normal(4.5, 0.5, 30)
    noise = rng.normal(0, 0.02, 30)
    contextwise_result(tmp_path / "a", loss_b - 0.1, best_b - 0.1 + noise, pieces)
    contextwise_result(tmp_path / "b", loss_b, best_b, pieces)
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", ["contextwise"], Options(), tmp_path / "o")
    best = doc["results"]["best_context"]
    ref = stats.ttest_rel(best_b - 0.1 + noise, best_b).confidence_interval(0.95)
    assert best["diff"] == pytest.approx(-0.1 + noise.mean())
    assert best["interval95"] == pytest.approx([ref.low, ref.high])
    assert best["interval95"][1] < 0 and best["interval95"][0] < -0.1 < best["interval95"][1]
    assert [b["diff"] for b in doc["results"]["buckets"]] == pytest.approx([-0.1] * 3)
    assert (
        doc["lines"][0].startswith("contextwise best-context loss A - B = -0.1")
        and "over 30 documents" in (doc["lines"][0])
    )


def test_the_context_gain_is_paired_piece_by_piece(tmp_path):
    """A's best-context loss is 0.1 lower on the same one-token losses: its context gain is 0.1 larger."""
    rng = np.random.default_rng(2)
    pieces = [(d, 0) for d in range(20)]
    bucket, best, one = rng.normal(5, 0.5, (20, 3)), rng.normal(4.5, 0.5, 20), rng.normal(6, 0.5, 20)
    noise = rng.normal(0, 0.02, 20)
    contextwise_result(tmp_path / "a", bucket, best - 0.1 + noise, pieces, one_token=one)
    contextwise_result(tmp_path / "b", bucket, best, pieces, one_token=one)
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", ["contextwise"], Options(), tmp_path / "o")
    gain = doc["results"]["context_gain"]
    ref = stats.ttest_rel(one - (best - 0.1 + noise), one - best).confidence_interval(0.95)
    assert gain["diff"] == pytest.approx(0.1 - noise.mean()) and gain["a"] - gain["b"] == pytest.approx(
        gain["diff"]
    )
    assert gain["interval95"] == pytest.approx([ref.low, ref.high])
    assert doc["lines"][1].startswith(f"contextwise context gain A - B = {gain['diff']:+.3f} [")
    contextwise_result(
        tmp_path / "c", bucket, best, pieces
    )  # written before the one-token losses: no gain pair
    _, (old,) = compare_runs(tmp_path / "a", tmp_path / "c", ["contextwise"], Options(), tmp_path / "o2")
    assert "context_gain" not in old["results"]


def test_pieces_of_one_document_are_one_cluster():
    """Two identical pieces per document: the same interval as one value per document, not narrower."""
    x = np.random.default_rng(2).normal(0.1, 1.0, 12)
    one = cluster_t(*per_cluster(x, np.arange(12)))
    two = cluster_t(*per_cluster(np.repeat(x, 2), np.repeat(np.arange(12), 2)))
    assert two["diff"] == pytest.approx(one["diff"]) and two["interval95"] == pytest.approx(one["interval95"])
    assert cluster_t(np.array([1.0]), np.array([2.0]))["interval95"] is None  # one document: no interval


def test_retrieval_shift_counts_and_a_seeded_bootstrap_over_candidate_sets(tmp_path):
    rng = np.random.default_rng(3)
    group = np.repeat(np.arange(40), 5)
    cell = np.repeat([[0, 32], [50, 32], [0, 64], [50, 64]], 50, axis=0)
    b = rng.random(200) < 0.2
    a = b | (rng.random(200) < 0.5)  # A right wherever B is, and on about half the rest
    niah_result(tmp_path / "a", a, group, cell)
    niah_result(tmp_path / "b", b, group, cell)
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", ["niah"], Options(), tmp_path / "o")
    overall = doc["results"]["overall"]
    assert overall["diff"] == pytest.approx(a.mean() - b.mean()) and overall["n_clusters"] == 40
    assert (
        overall["mcnemar"]["only_a_right"] == int((a & ~b).sum()) and overall["mcnemar"]["only_b_right"] == 0
    )
    lo, hi = overall["interval95"]
    assert 0 < lo < overall["diff"] < hi
    assert [c["cell"] for c in doc["results"]["by_cell"]] == [[0, 32], [0, 64], [50, 32], [50, 64]]
    _, (again,) = compare_runs(tmp_path / "a", tmp_path / "b", ["niah"], Options(), tmp_path / "o2")
    assert again["results"]["overall"]["interval95"] == overall["interval95"]  # seeded
    assert cluster_bootstrap(np.ones(3), np.ones(3), 100, 0)["interval95"] == [1.0, 1.0]


def test_sets_that_score_alike_for_both_say_why_the_interval_has_no_width(tmp_path):
    """A user's kv and niah comparisons of two models that do not retrieve read `+0.00 [+0.00, +0.00]`,
    a certain tie, unexplained: each balanced set gave each model exactly 1 of its 5."""
    group = np.repeat(np.arange(8), 5)
    cell = np.repeat([[0, 32], [100, 64]], 20, axis=0)
    a = np.tile([1, 0, 0, 0, 0], 8)
    b = np.tile([0, 0, 1, 0, 0], 8)  # other prompts right, the same number in each set
    niah_result(tmp_path / "a", a, group, cell)
    niah_result(tmp_path / "b", b, group, cell)
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", ["niah"], Options(), tmp_path / "o")
    lo, hi = doc["results"]["overall"]["interval95"]
    assert lo < 0 < hi and doc["results"]["no_spread"] is True  # not a certain tie: Newcombe's interval
    assert doc["notes"][0].startswith("niah: every candidate set scores alike for A and B")
    niah_result(tmp_path / "c", np.tile([1, 1, 0, 0, 0], 8), group, cell)
    _, (other,) = compare_runs(tmp_path / "c", tmp_path / "b", ["niah"], Options(), tmp_path / "o2")
    assert "no_spread" not in other["results"] and [n.split(" (")[0] for n in other["notes"]] == [
        "niah: every candidate set differs by the same amount between A and B"  # +1 of 5 in each set
    ]
    niah_result(tmp_path / "d", np.tile([1, 1, 0, 0, 0], 4).tolist() + [1] * 20, group, cell)
    _, (third,) = compare_runs(tmp_path / "d", tmp_path / "b", ["niah"], Options(), tmp_path / "o3")
    assert [n.split(",")[0] for n in third["notes"]] == [
        "niah: only 8 candidate sets"  # a bootstrap over 8 sets is too narrow: said
    ]


def test_ppl_pairs_the_same_tokens_with_documents_as_clusters(tmp_path):
    rng = np.random.default_rng(4)
    offsets = np.array([0, 50, 120, 200, 260])
    base = rng.normal(4, 1, 260).astype(np.float32)
    for run, shift in (("a", 0.0), ("b", 0.25)):
        losses = base + np.float32(shift)
        write_result(
            tmp_path / run / "eval",
            "ppl",
            results={"summary": {"loss": float(losses.mean()), "perplexity": float(np.exp(losses.mean()))}},
            options={"context": 64 if run == "a" else 32, "stride": 0, "max_docs": 0, "max_tokens": 0},
            model={"id": run},
            data={"store": run, "hash": "s" * 64, "n_docs": 4},
            seconds=0.0,
            arrays={"token_losses": losses, "doc_offsets": offsets},
        )
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", None, Options(), None)
    assert doc["results"]["loss"]["diff"] == pytest.approx(-0.25, abs=1e-6)
    assert doc["results"]["per_document"]["diff"] == pytest.approx([-0.25] * 4, abs=1e-6)
    assert doc["notes"] == ["option context 64 vs 32"]  # a different window scores the same tokens


def test_ppl_pieces_of_one_document_are_one_cluster(tmp_path):
    """A packed run's held-out part holds several pieces of one book: ppl scores each from its own start,
    and the comparison's unit of resampling is the book (``doc_ids``), not the piece."""
    rng = np.random.default_rng(5)
    offsets = np.array([0, 50, 100, 150, 200, 250, 300])
    base = rng.normal(4, 1, 300).astype(np.float32)
    shift = np.repeat(np.float32([0.1, 0.1, 0.5, 0.5, 0.9, 0.9]), 50)  # pieces of a book alike
    for run, losses in (("a", base + shift), ("b", base)):
        write_result(
            tmp_path / run / "eval",
            "ppl",
            results={"summary": {"loss": float(losses.mean()), "perplexity": float(np.exp(losses.mean()))}},
            options={"context": 64, "stride": 0, "max_docs": 0, "max_tokens": 0},
            model={"id": run},
            data={"store": run, "hash": "s" * 64, "n_docs": 3},
            seconds=0.0,
            arrays={"token_losses": losses, "doc_offsets": offsets, "doc_ids": np.array([7, 7, 2, 2, 9, 9])},
        )
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", None, Options(), None)
    loss = doc["results"]["loss"]
    assert loss["diff"] == pytest.approx(0.5, abs=1e-6) and loss["n_clusters"] == 3
    assert doc["results"]["per_document"]["diff"] == pytest.approx([0.5, 0.1, 0.9], abs=1e-6)  # ids 2, 7, 9
    assert "over 3 documents" in doc["lines"][0]


def icl_result(run, by_shots: list[dict], seeds: int, arrays: dict | None = None) -> None:
    """An icl result of ``run`` (a folder under which eval/ is written) on one TREC folder."""
    write_result(
        run / "eval",
        "icl",
        results={"by_shots": by_shots},
        options={"shots": [r["shots"] for r in by_shots], "n_test": 54, "seeds": seeds, "balance": True},
        model={"id": run.name},
        data={"folder": run.name, "hash": "t" * 64, "n_train": 100, "n_test": 54, "balanced": True},
        seconds=0.0,
        arrays=arrays,
    )


def test_icl_per_set_difference_and_histogram(tmp_path):
    for run, per_set in (("a", [0.5, 0.6, 0.4, 0.55] * 3), ("b", [0.45, 0.5, 0.4, 0.5] * 3)):
        icl_result(tmp_path / run, [{"shots": 8, "accuracy_per_set": per_set}], 12)
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", ["icl"], Options(), tmp_path / "o")
    row = doc["results"]["by_shots"][0]
    assert row["diff"] == pytest.approx(0.05) and row["per_set"] == pytest.approx([0.05, 0.1, 0.0, 0.05] * 3)
    assert 0 < row["interval95"][0] <= 0.05 <= row["interval95"][1] and row["cluster"] == "example set"
    assert doc["notes"] == [  # results from before the per-sample arrays: the sets only, and it says so
        "icl: a result without per-sample arrays (an older icl): its interval resamples the example sets "
        "only, not the test questions they share, so it is too narrow; rerun `contextlab eval icl` on both"
    ]
    assert (tmp_path / "o" / "compare_icl.png").stat().st_size > 1000
    assert "calibrated" not in row  # results from before calibrated accuracy: only the accuracy is paired


def test_icl_pairs_the_calibrated_accuracy_per_set_too(tmp_path):
    for run, per_set, cal in (("a", [0.5, 0.6], [0.7, 0.8]), ("b", [0.5, 0.5], [0.4, 0.6])):
        shots = [
            {"shots": 0, "accuracy_per_set": [0.2]},
            {"shots": 8, "accuracy_per_set": per_set, "calibrated_accuracy_per_set": cal},
        ]
        icl_result(tmp_path / run, shots, 2)
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", ["icl"], Options(), tmp_path / "o")
    zero, eight = doc["results"]["by_shots"]
    assert "calibrated" not in zero and eight["calibrated"]["per_set"] == pytest.approx([0.3, 0.2])
    assert eight["calibrated"]["diff"] == pytest.approx(0.25)
    assert any(line.startswith("icl calibrated accuracy A - B at 8 shots = +0.250") for line in doc["lines"])


def test_icl_resamples_the_test_questions_as_well_as_the_example_sets(tmp_path):
    """All example sets ask the same questions: resampling only the sets gave +0.007 [-0.013, +0.026]
    where a user's resampling of sets and questions gave [-0.039, +0.054]."""
    rng = np.random.default_rng(0)
    sets, questions = 10, 54
    easy = rng.random(questions) < 0.5  # B is right on the easy questions; A on the same, and 2 more
    for run, extra in (("a", 2), ("b", 0)):
        right = np.tile(easy, (sets, 1)).astype(np.int8)  # (sets, questions): the same in every set
        right[:, np.flatnonzero(~easy)[:extra]] = 1
        zero = easy.astype(np.int8)  # zero shots: one set
        correct = np.concatenate([zero, right.ravel()])
        cell = np.asarray(
            [(0, 0)] * questions + [(8, x) for x in range(sets) for _ in range(questions)], float
        )
        group = np.concatenate([np.arange(questions), np.tile(np.arange(questions), sets)])
        shots = [
            {"shots": 0, "accuracy_per_set": [float(zero.mean())]},
            {"shots": 8, "accuracy_per_set": right.mean(1).tolist()},
        ]
        arrays = {"correct_likelihood_correct": correct, "cell": cell, "group": group, "unit": group}
        icl_result(tmp_path / run, shots, sets, arrays)
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", ["icl"], Options(), tmp_path / "o")
    zero, eight = doc["results"]["by_shots"]
    assert eight["diff"] == pytest.approx(2 / 54) and eight["per_set"] == pytest.approx([2 / 54] * sets)
    assert eight["a"] == pytest.approx(float(easy.mean()) + 2 / 54) and eight["n_questions"] == 54
    lo, hi = eight["interval95"]  # every set alike: the sets alone would give [2/54, 2/54]
    assert lo < 2 / 54 < hi and hi - lo > 0.05 and lo >= 0
    assert zero["diff"] == 0 and zero["interval95"] == [0.0, 0.0]  # one set, its questions resampled
    assert doc["results"]["cluster"] == "example set and test question" and doc["notes"] == []
    assert (
        "at 8 shots = +0.037 [" in doc["lines"][1]
        and "over 10 example sets x 54 test questions" in doc["lines"][1]
    )


def test_the_few_sets_note_names_the_shots_it_is_about(tmp_path):
    """The note fired at 10 sets: the 0-shot row, one set always, tripped it."""
    for run in "ab":
        shots = [{"shots": 0, "accuracy_per_set": [0.2]}, {"shots": 2, "accuracy_per_set": [0.1] * 10}]
        icl_result(tmp_path / run, shots, 10)
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", ["icl"], Options(), tmp_path / "o")
    assert not any("fewer than 10 example sets" in n for n in doc["notes"])


def test_results_of_different_data_or_options_are_refused(tmp_path):
    pieces = [(d, 0) for d in range(4)]
    loss, best = np.ones((4, 3)), np.ones(4)
    contextwise_result(tmp_path / "a", loss, best, pieces)
    contextwise_result(tmp_path / "b", loss, best, pieces, hash_="b" * 64, max_docs=4)
    with pytest.raises(
        UserError, match=r"same samples \(data hash aaaaaaaaaaaa vs bbbbbbbbbbbb; option max_docs"
    ):
        compare_runs(tmp_path / "a", tmp_path / "b", None, Options(), None)
    contextwise_result(tmp_path / "c", loss, best, [(d, 8) for d in range(4)])  # other pieces, same options
    with pytest.raises(UserError, match="saved pieces"):
        compare_runs(tmp_path / "a", tmp_path / "c", None, Options(), None)
    contextwise_result(tmp_path / "d", loss + 1, best, pieces, best_fraction=0.2)  # scoring only: a note
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "d", None, Options(), None)
    assert doc["notes"] == ["option best_fraction 0.1 vs 0.2"]
    (tmp_path / "d" / "eval" / "contextwise.pieces.npy").unlink()  # as if written before compare existed
    with pytest.raises(UserError, match="no per-sample arrays .*rerun `contextlab eval contextwise`"):
        compare_runs(tmp_path / "a", tmp_path / "d", None, Options(), None)
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 2  # one line, exit code 2
    with pytest.raises(UserError, match="too few"):
        compare_runs(tmp_path / "a", tmp_path / "d", None, Options(resamples=10), None)
    with pytest.raises(UserError, match="holds no evaluation results"):
        compare_runs(tmp_path / "a", tmp_path / "missing", None, Options(), None)


def test_a_model_read_on_its_own_training_store_is_paired_with_a_note(tmp_path):
    """A model trained on the store both were evaluated on and one trained elsewhere: the same samples, so
    they pair (the result's training_store flag is of the model, not of the samples), with a note."""
    pieces = [(d, 0) for d in range(6)]
    loss, best = np.ones((6, 3)), np.ones(6)
    contextwise_result(tmp_path / "a", loss, best, pieces, data_extra={"training_store": True})
    contextwise_result(tmp_path / "b", loss + 0.5, best + 0.5, pieces)
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", None, Options(), None)
    assert doc["notes"] == [
        "a was read on the token store it trained on: the difference is partly of what that model saw in "
        "training, not only of what it learned"
    ]


def test_a_refusal_names_the_setting_that_differs_with_both_values(tmp_path):
    """It said 'data pieces 46 vs 39; rerun with the same --data and options' where the cause was the
    default length, which follows each model's context (511 on one model, 1,023 on the other)."""
    loss = np.ones((4, 3))
    contextwise_result(
        tmp_path / "a", loss, np.ones(4), [(d, 0) for d in range(4)], resolved_length=511, length=0
    )
    contextwise_result(
        tmp_path / "b", loss[:3], np.ones(3), [(d, 0) for d in range(3)], resolved_length=1023, length=0
    )
    with pytest.raises(UserError) as err:
        compare_runs(tmp_path / "a", tmp_path / "b", None, Options(), None)
    assert str(err.value) == (
        "contextwise: a and b were not computed on the same samples (data pieces 4 vs 3): contextwise was "
        "run with length 511 on a and 1,023 on b (the default --length follows each model's context); "
        "rerun `contextlab eval contextwise` on both with the same --length (e.g. --length 511: the "
        "longer-context model's best-context window then lies below its own context)"
    )
    cell, group = np.zeros((10, 2)), np.repeat(np.arange(2), 5)
    niah_result(tmp_path / "c", np.ones(10), group, cell, lengths=(114, 242, 498))
    niah_result(tmp_path / "d", np.ones(10), group, cell, lengths=(242, 498, 1010), samples=4)
    with pytest.raises(UserError) as err:
        compare_runs(tmp_path / "c", tmp_path / "d", ["niah"], Options(), None)
    assert str(err.value) == (
        "niah: c and d were not computed on the same samples (data lengths [114, 242, 498] vs [242, 498, "
        "1010]; option samples 2 vs 4): niah was run with lengths 114, 242, 498 on c and 242, 498, 1010 on "
        "d (the default --lengths follows each model's context); --samples 2 on c against 4 on d; rerun "
        "`contextlab eval niah` on both with the same --lengths (e.g. --lengths 114,242,498) and the same "
        "--samples"
    )
    contextwise_result(tmp_path / "e", loss, np.ones(4), [(d, 0) for d in range(4)], hash_="e" * 64)
    contextwise_result(tmp_path / "f", loss, np.ones(4), [(d, 0) for d in range(4)], hash_="f" * 64)
    with pytest.raises(UserError) as err:
        compare_runs(tmp_path / "e", tmp_path / "f", None, Options(), None)
    assert str(err.value) == (
        "contextwise: e and f were not computed on the same samples (data hash eeeeeeeeeeee vs "
        f"ffffffffffff): e read {tmp_path / 'e' / 'store'} and f read {tmp_path / 'f' / 'store'} (content "
        "hash eeeeeeeeeeee vs ffffffffffff); rerun `contextlab eval contextwise` on both with the same --data"
    )
    niah_result(tmp_path / "g", np.ones(10), group, cell, tokenizer="g" * 64)
    niah_result(tmp_path / "h", np.ones(10), group, cell + 1, tokenizer="k" * 64)
    with pytest.raises(UserError) as err:
        compare_runs(tmp_path / "g", tmp_path / "h", ["niah"], Options(), None)
    assert str(err.value) == (
        "niah: g and h were not computed on the same samples (tokenizer gggggggg vs kkkkkkkk): the models' "
        "tokenizers differ "
        "(hash gggggggg on g, kkkkkkkk on h), so the same text makes other token sequences; compare models "
        "of one tokenizer"
    )
    niah_result(tmp_path / "k", np.ones(10), group, cell, tokenizer="k" * 64)  # the same saved samples
    with pytest.raises(
        UserError, match=r"\(tokenizer gggggggg vs kkkkkkkk\).*compare models of one tokenizer"
    ):
        compare_runs(
            tmp_path / "g", tmp_path / "k", ["niah"], Options(), None
        )  # passkey was paired like this


def test_a_default_and_the_values_it_resolved_to_pair(tmp_path):
    """niah's lengths left to their default on one model (they followed its context to 102, 230, 486) and
    given as 102,230,486 on the other are the same samples: they pair (it refused, 'option lengths []
    vs [102, 230, 486]', and a rerun with --overwrite gave the identical result)."""
    cell, group = np.zeros((10, 2)), np.repeat(np.arange(2), 5)
    niah_result(tmp_path / "a", np.ones(10), group, cell, lengths=(102, 230, 486))
    niah_result(tmp_path / "b", np.zeros(10), group, cell, lengths=(102, 230, 486))
    for run, given in (("a", []), ("b", [102, 230, 486])):
        f = tmp_path / run / "eval" / "niah.json"
        doc = json.loads(f.read_text())
        doc["options"]["lengths"] = given
        f.write_text(json.dumps(doc))
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", ["niah"], Options(), None)
    assert doc["results"]["overall"]["diff"] == pytest.approx(1.0)
    niah_result(tmp_path / "c", np.ones(10), group, cell, lengths=(102, 230))  # resolved otherwise: refused
    with pytest.raises(UserError, match="data lengths"):
        compare_runs(tmp_path / "a", tmp_path / "c", ["niah"], Options(), None)


def test_best_context_losses_of_other_windows_say_so_in_their_line(tmp_path):
    """A base model (best window 116-128) against its extension (461-512): the headline difference is of
    other targets, which the line itself now says (a note beside it was all), with the flag that reads
    both on the same targets."""
    loss = np.ones((4, 3))
    pieces = [(d, 0) for d in range(4)]
    contextwise_result(tmp_path / "ext", loss, np.ones(4), pieces, best_window=(461, 512))
    contextwise_result(tmp_path / "base", loss, np.ones(4) * 1.1, pieces, best_window=(116, 128))
    _, (doc,) = compare_runs(tmp_path / "ext", tmp_path / "base", None, Options(), None)
    assert doc["lines"][0].endswith(
        "at each model's own best-context positions (A 461-512, B 116-128: other targets)"
    )
    assert any("evaluate the shorter model with --train-context 512 (model A's)" in n for n in doc["notes"])
    contextwise_result(tmp_path / "same", loss, np.ones(4) * 1.1, pieces, best_window=(461, 512))
    _, (doc,) = compare_runs(tmp_path / "ext", tmp_path / "same", None, Options(), None)
    assert "own best-context positions" not in doc["lines"][0] and not doc["notes"]


def test_two_tiny_trained_models_end_to_end(tmp_path, capsys):
    """Train two tiny runs (different seeds), evaluate both with contextwise and niah through the command
    line, compare them, and read the comparison back: A - B equals the difference of the reported numbers."""
    from contextlab.config import from_dict
    from contextlab.data.ingest import IngestConfig, ingest
    from contextlab.report.html import build_report
    from contextlab.train.config import RunConfig
    from contextlab.train.trainer import train
    from tests.conftest import shakespeare

    text = shakespeare(40_000)
    for i in range(4):
        (tmp_path / "src").mkdir(exist_ok=True)
        (tmp_path / "src" / f"part{i}.txt").write_text(text[i * 10_000 : (i + 1) * 10_000])
    store = ingest(tmp_path / "src", tmp_path / "store", IngestConfig(tokenizer="byte"), progress=False).store
    runs = [tmp_path / "runs" / name for name in ("a", "b")]
    for seed, run in enumerate(runs):
        cfg = {
            "model": {"size": "tiny-4x256", "n_layer": 1, "n_head": 2, "n_embd": 32},
            "data": {"store": str(store.path), "val_split": "tail", "val_fraction": 0.1},
            "optim": {"lr": 3e-3, "warmup_steps": 1},
            "train": {
                "out_dir": str(run),
                "context": 32,
                "tokens_per_step": 256,
                "max_steps": 4 + 4 * seed,
                "val_every": 0,
                "ckpt_every": 0,
                "threads": 1,
                "peak_flops": 1e12,
                "progress": False,
                "dtype": "fp32",
                "seed": seed,
            },
        }
        train(from_dict(RunConfig, cfg))
        assert (
            main(
                [
                    "eval",
                    "contextwise",
                    "--model",
                    str(run),
                    "--data",
                    str(store.path),
                    "--length",
                    "65",
                    "--max-docs",
                    "8",
                    "--pieces-per-doc",
                    "2",
                ]
            )
            == 0
        )
        assert (
            main(
                [
                    "eval",
                    "niah",
                    "--model",
                    str(run),
                    "--lengths",
                    "256,384",
                    "--depths",
                    "0,100",
                    "--samples",
                    "2",
                    "--scoring",
                    "likelihood",
                ]
            )
            == 0
        )
    capsys.readouterr()
    assert main(["compare", *map(str, runs)]) == 0
    out = runs[0] / "compare" / "b"
    said = capsys.readouterr().out
    assert f"wrote {out}/compare_{{contextwise,niah}}.json and .png" in said
    buckets = json.loads((out / "compare_contextwise.json").read_text())["results"]["buckets"]
    shown = [line.strip() for line in said.splitlines() if line.strip().startswith("positions ")]
    assert len(shown) == len(buckets) and "A - B = " in shown[0]  # each bucket's difference, a line each
    assert main(["compare", *map(str, runs), "--eval", "niah"]) == 0
    assert f"wrote {out}/compare_niah.json and .png" in capsys.readouterr().out
    cw = json.loads((out / "compare_contextwise.json").read_text())
    reported = [json.loads((r / "eval" / "contextwise.json").read_text())["results"] for r in runs]
    best = cw["results"]["best_context"]
    assert best["diff"] == pytest.approx(
        reported[0]["best_context"]["loss"] - reported[1]["best_context"]["loss"]
    )
    assert best["n_clusters"] == 4 and cw["results"]["n_pieces"] == 8  # 4 documents, 2 pieces each
    for got, ra, rb in zip(cw["results"]["buckets"], *(r["buckets"] for r in reported)):
        assert got["diff"] == pytest.approx(ra["loss"] - rb["loss"])
    niah = json.loads((out / "compare_niah.json").read_text())["results"]["overall"]
    acc = [json.loads((r / "eval" / "niah.json").read_text())["results"]["summary"] for r in runs]
    assert niah["diff"] == pytest.approx(acc[0]["likelihood_accuracy"] - acc[1]["likelihood_accuracy"])
    assert niah["n"] == 4 * 2 * 5 and niah["n_clusters"] == 8
    page = build_report(runs[0]).read_text()
    assert "Comparison a - b" in page and "contextwise best-context loss A - B" in page


def test_sample_arrays_keep_every_scored_accuracy_in_sample_order():
    from contextlab.eval.tasks import sample_arrays

    rows = [
        {"cell": [0.0, 32], "group": 0, "likelihood_correct": True, "exact": False, "contains": True},
        {"cell": [50.0, 64], "group": 1, "likelihood_correct": False, "exact": False, "contains": False},
    ]
    got = sample_arrays(rows)
    assert got["correct_likelihood_correct"].tolist() == [1, 0] and got["correct_contains"].tolist() == [1, 0]
    assert got["correct_exact"].tolist() == [0, 0] and got["group"].tolist() == [0, 1]
    assert got["cell"].tolist() == [[0, 32], [50, 64]]
    assert set(sample_arrays([{"cell": [4], "group": 0, "contains": True}])) == {
        "correct_contains",
        "cell",
        "group",
        "unit",
    }


def test_models_that_read_their_inputs_differently_are_paired_with_a_note(tmp_path):
    """A Hugging Face model reads its BOS first, a run contextlab continued from it reads plain text:
    the samples are the same, but the difference is partly of that, and the comparison says so."""
    from contextlab.compare.pairing import Side, check_pairing

    def side(label, lead):
        doc = {"data": {"hash": "h"}, "options": {"stride": 8}, "model": {"lm_prefix": lead}}
        return Side(label, tmp_path, doc)

    assert check_pairing("icl", side("base", [1]), side("continued", [1])) == []
    (note,) = check_pairing("icl", side("base", [1]), side("continued", []))
    assert note.startswith(
        "the two read their inputs differently (base after token(s) [1], continued without one"
    )


def test_models_read_at_other_precisions_are_paired_with_a_note(tmp_path):
    """A result computed in bf16 against one in fp32 passed without a word."""
    from contextlab.compare.pairing import Side, check_pairing

    def side(label, dtype):
        doc = {"data": {"hash": "h"}, "options": {"stride": 8}, "model": {"dtype": dtype}}
        return Side(label, tmp_path, doc)

    assert check_pairing("icl", side("a", "fp32"), side("b", "fp32")) == []
    (note,) = check_pairing("icl", side("a", "bf16"), side("b", "fp32"))
    assert note.startswith("a was read in bf16 and b in fp32: the difference is partly of the precision")


def test_a_comparison_of_other_results_or_a_users_file_is_not_replaced_unasked(tmp_path, capsys):
    """`compare A B --out X` then `compare B A --out X` replaced the first silently, and a user's
    compare_contextwise.json too; the same comparison again is a reproduction."""
    rng = np.random.default_rng(1)
    pieces = [(d, 0) for d in range(10)]
    for run in ("a", "b"):
        contextwise_result(tmp_path / run, rng.normal(5, 0.3, (10, 3)), rng.normal(4.5, 0.3, 10), pieces)
    out = tmp_path / "x"
    out.mkdir()
    (out / "compare_contextwise.json").write_text("my notes")
    argv = ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]
    assert main(argv) == 2
    assert "exists and is not a `contextlab compare` result" in capsys.readouterr().err
    assert (out / "compare_contextwise.json").read_text() == "my notes"
    (out / "compare_contextwise.json").unlink()
    assert main(argv) == 0 and main(argv) == 0  # the same comparison again replaces it
    kept = (out / "compare_contextwise.json").read_text()
    capsys.readouterr()
    swapped = ["compare", str(tmp_path / "b"), str(tmp_path / "a"), "--out", str(out)]
    assert main(swapped) == 2
    err = capsys.readouterr().err
    assert "holds a comparison of other results or options (A " in err and "pass --overwrite" in err
    assert main([*argv, "--seed", "3"]) == 2
    assert "--seed 0 -> 3" in capsys.readouterr().err
    assert (out / "compare_contextwise.json").read_text() == kept
    assert main([*swapped, "--overwrite"]) == 0


def test_kv_differences_resample_examples_not_the_candidate_set_of_each_position(tmp_path):
    """kv asks an example's same pairs at every position: the comparison resamples examples (``unit``),
    as the intervals of each result do, not each position's candidate set as if independent."""
    units = np.repeat(np.arange(6), 5 * 4)  # 6 examples x 5 positions x 4 rotations
    group = np.repeat(np.arange(30), 4)
    cell = np.tile(np.repeat(np.arange(5), 4), 6)[:, None].astype(np.float64)
    a = np.repeat([1, 1, 1, 0, 0, 1], 20)  # an example right (or wrong) at every position
    for run, correct in (("a", a), ("b", np.zeros(120, int))):
        write_result(
            tmp_path / run / "eval",
            "kv",
            results={"summary": {"likelihood_accuracy": float(np.mean(correct))}},
            options={"n_examples": 6, "scoring": "likelihood", "sets": 1},
            model={"id": run, "tokenizer": {"hash": "t" * 64}},
            data={"hash": "h" * 64, "n_pairs": 6, "positions": [0, 1, 2, 3, 4], "distractors": 3},
            seconds=0.0,
            arrays={
                "correct_likelihood_correct": np.asarray(correct, np.int8),
                "group": group,
                "unit": units,
                "cell": cell,
            },
        )
    _, (doc,) = compare_runs(tmp_path / "a", tmp_path / "b", ["kv"], Options(), tmp_path / "o")
    overall = doc["results"]["overall"]
    assert doc["results"]["cluster"] == "example" and overall["n_clusters"] == 6
    assert " samples in 6 examples " in doc["lines"][0]
    lo, hi = overall["interval95"]
    assert lo <= 0.5 and hi == 1.0  # 4 of 6 examples: wide; by 30 candidate sets it read [0.5, 0.83]


def test_a_comparison_says_its_intervals_leave_out_training_noise_and_when_the_runs_trained_unequally(
    tmp_path, capsys
):
    """A user's SPLICE - EP gap, -0.111 [-0.136, -0.086], was smaller than two EP runs of other seeds
    differ, and the runs (a budget of minutes) had trained 24 and 25 steps: neither was said."""
    pieces = [(d, 0) for d in range(12)]
    rng = np.random.default_rng(7)
    for run, steps in (("a", 24), ("b", 25)):
        contextwise_result(tmp_path / run, rng.normal(5, 0.3, (12, 3)), rng.normal(4.5, 0.3, 12), pieces)
        rows = [{"step": s, "loss": 5.0, "tokens": 4096 * s} for s in range(1, steps + 1)]
        (tmp_path / run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = [line for line in capsys.readouterr().out.splitlines() if "note:" in line]
    assert out[-2] == (
        "  note: A was trained 24 steps, 98,304 tokens, B 25 steps, 102,400 tokens: the difference is "
        "partly of how long each trained, not only of what differs in their setup"
    )
    assert out[-1].startswith("  note: one model of each: the intervals hold which documents and samples")
    assert len(out) == 2  # each said once, not under every evaluation
    doc = json.loads((tmp_path / "a" / "compare" / "b" / "compare_contextwise.json").read_text())
    assert (
        doc["scope"].endswith("compare A B --and A2 B2, pool it") and "A was trained 24" in doc["notes"][-1]
    )


def test_runs_of_equal_compute_are_said_to_be_compared_at_equal_flops(tmp_path, capsys):
    """ContextLM (164 steps) against GPT (198 steps) at one train.max_flops was told "the difference is
    partly of how long each trained": at equal compute the fewer tokens are the design, not a confound."""
    pieces = [(d, 0) for d in range(12)]
    rng = np.random.default_rng(7)
    for run, steps, per_token in (("a", 164, 3.5685e6), ("b", 198, 2.9557e6)):
        contextwise_result(tmp_path / run, rng.normal(5, 0.3, (12, 3)), rng.normal(4.5, 0.3, 12), pieces)
        rows = [{"step": s, "loss": 5.0, "tokens": 4096 * s} for s in range(1, steps + 1)]
        (tmp_path / run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        state = tmp_path / run / "checkpoints" / f"step_{steps:06d}" / "state.json"
        state.parent.mkdir(parents=True)
        state.write_text(
            json.dumps({"step": steps, "tokens": 4096 * steps, "flops": per_token * 4096 * steps})
        )
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "note:" in line]
    assert notes[-2] == (
        "  note: A and B trained with the same compute (2.4e+12 and 2.4e+12 FLOPs): A 164 steps, 671,744 "
        "tokens, B 198 steps, 811,008 tokens, which equal compute implies for their setups; the difference "
        "is at equal training FLOPs"
    )
    assert not any("partly of how long" in line for line in notes)


def test_a_report_says_a_comparison_is_stale_once_a_result_it_paired_is_written_again(tmp_path, monkeypatch):
    """A user evaluated one run again with other options: the page showed the new result beside the old
    comparison of the former one, with no word."""
    from contextlab.report.html import build_report

    rng = np.random.default_rng(0)
    group, cell = np.repeat(np.arange(8), 5), np.repeat([[0, 32], [100, 64]], 20, axis=0)
    for run in (tmp_path / "a", tmp_path / "b"):
        niah_result(run, rng.integers(0, 2, 40), group, cell)
    monkeypatch.chdir(tmp_path)
    _, (doc,) = compare_runs("a", "b", ["niah"], Options(), None)  # relative paths, as typed
    assert doc["b"]["result"] == str(tmp_path / "b" / "eval" / "niah.json")
    assert "stale" not in build_report(tmp_path).read_text()
    f = tmp_path / "b" / "eval" / "niah.json"
    rewritten = json.loads(f.read_text())
    rewritten["created"] = "2099-01-01T00:00:00+0000"
    f.write_text(json.dumps(rewritten))
    text = build_report(tmp_path).read_text()
    assert (
        f"stale: this niah comparison is of results since replaced: B&#x27;s result was written again "
        f"({doc['b']['created']} then, 2099-01-01T00:00:00+0000 now); run `contextlab compare` again" in text
    )
    compare_runs("a", "b", ["niah"], Options(), None, overwrite=True)  # the same paths: replaced
    assert "stale" not in build_report(tmp_path).read_text()


def test_the_run_and_another_model_on_that_runs_held_out_part_pair(tmp_path):
    """`--split run` on a run and `--split run --heldout-of RUN` on a Hugging Face model read the same
    documents; they were refused as other samples, in a line that showed the run's empty value as a gap
    ("option heldout_of  vs runs/swiglu")."""
    from contextlab.compare.pairing import Side, check_pairing

    def side(label, heldout_of, by):
        data = {"hash": "h", "split": "run", "held_out_by": by}
        return Side(label, tmp_path, {"data": data, "options": {"split": "run", "heldout_of": heldout_of}})

    assert check_pairing("icl", side("run", "", "/r/swiglu"), side("hf", "runs/swiglu", "/r/swiglu")) == []
    with pytest.raises(UserError) as refused:  # another run's held-out part: other documents
        check_pairing("icl", side("run", "", "/r/swiglu"), side("hf", "runs/other", "/r/other"))
    said = str(refused.value)
    assert "heldout_of (none) vs runs/other" in said and "heldout_of  vs" not in said


def test_a_difference_the_same_in_every_candidate_set_keeps_an_interval():
    """A copier right on all 100 needles against a blind model right on exactly 1 of 5 in each of 20
    sets: the bootstrap over sets gave +0.80 [+0.80, +0.80] (every set differs by 4/5), which a user
    would quote. Newcombe's paired interval keeps each model's own uncertainty."""
    import math

    from contextlab.compare.paired import _accuracy_diff
    from contextlab.eval.stats import wilson

    group = np.repeat(np.arange(20), 5)
    ca = np.ones(100, bool)
    cb = np.tile([True, False, False, False, False], 20)
    d = _accuracy_diff(ca, cb, group, Options())
    lo, hi = d["interval95"]
    (l1, _), (l2, u2) = wilson(100, 100), wilson(20, 100)
    assert d["diff"] == pytest.approx(0.8) and lo < 0.8 < hi
    assert lo == pytest.approx(0.8 - math.hypot(1 - l1, u2 - 0.2)) and hi == pytest.approx(0.8 + (0.2 - l2))
    assert d["interval_method"].startswith("Newcombe")
    # where the sets differ from one another the bootstrap over them stands
    spread = cb.copy()
    spread[:5] = True
    assert _accuracy_diff(ca, spread, group, Options())["interval_method"] == "cluster bootstrap"


def test_two_runs_of_an_evaluation_compare_does_not_pair_are_told_so(tmp_path):
    """Both runs had mqar results, and compare said "no evaluation in common ... run the same
    `contextlab eval NAME` on both"."""
    for run in ("a", "b"):
        write_result(
            tmp_path / run / "eval",
            "mqar",
            results={"summary": {"vocab_accuracy": 0.5}},
            options={},
            model={"id": run},
            data={},
            seconds=0.0,
        )
    with pytest.raises(UserError) as refused:
        compare_runs(tmp_path / "a", tmp_path / "b", [], Options(), tmp_path / "o")
    said = str(refused.value)
    assert "both have mqar, which compare does not pair (yet)" in said and "run the same" not in said
