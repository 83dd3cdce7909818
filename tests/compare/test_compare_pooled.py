"""``compare A1 B1 --and A2 B2 ...``: each pair compared as two runs are, and every headline difference
pooled over the pairs with a t interval over pairs, which holds the seed and split noise one pair's
interval leaves out."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from contextlab.cli import main
from tests.compare.test_compare import contextwise_result, niah_result

SHIFTS = (-0.12, 0.02, 0.07)  # what A - B is in each pair: replicates that disagree


def _pairs(root, shifts=SHIFTS, **options):
    """Pairs of result folders: in pair i, A = B + shifts[i] on 12 documents of its own (another split)."""
    rng = np.random.default_rng(0)
    pairs = []
    for i, shift in enumerate(shifts):
        pieces = [(100 * i + d, 0) for d in range(12)]
        loss, best = rng.normal(5, 0.4, (12, 3)), rng.normal(4.5, 0.4, 12)
        noise = rng.normal(0, 0.005, 12)
        a, b = root / f"a{i}", root / f"b{i}"
        contextwise_result(a, loss + shift, best + shift + noise, pieces, hash_=f"{i}" * 64, **options)
        contextwise_result(b, loss, best, pieces, hash_=f"{i}" * 64, **options)
        correct = rng.integers(0, 2, 40)
        cell = np.repeat([[0, 32], [100, 64]], 20, axis=0)
        niah_result(a, correct, np.repeat(np.arange(8), 5), cell)
        niah_result(b, correct, np.repeat(np.arange(8), 5), cell)
        pairs.append((a, b))
    return pairs


def _argv(pairs, out):
    argv = ["compare", str(pairs[0][0]), str(pairs[0][1])]
    for a, b in pairs[1:]:
        argv += ["--and", str(a), str(b)]
    return [*argv, "--out", str(out)]


def test_the_pooled_difference_is_the_mean_of_the_pairs_with_a_t_interval_over_pairs(tmp_path, capsys):
    pairs = _pairs(tmp_path)
    assert main(_argv(pairs, tmp_path / "out")) == 0
    doc = json.loads((tmp_path / "out" / "pooled.json").read_text())
    best = doc["results"]["contextwise"]["best-context loss"]
    each = [p["diff"] for p in best["per_pair"]]
    assert each == pytest.approx(list(SHIFTS), abs=0.005)
    ref = stats.ttest_1samp(each, 0).confidence_interval(0.95)
    assert best["diff"] == pytest.approx(np.mean(each)) and best["interval95"] == pytest.approx(
        [ref.low, ref.high]
    )
    # each pair's own interval is narrow (the models differ the same way on every document of it), yet
    # the pairs disagree: the pooled interval is the one that holds 0
    assert all(p["interval95"][1] - p["interval95"][0] < 0.02 for p in best["per_pair"])
    assert best["interval95"][0] < 0 < best["interval95"][1] and best["n_pairs"] == 3
    assert doc["results"]["niah"]["accuracy"]["diff"] == 0
    for i in (1, 2, 3):
        assert (tmp_path / "out" / f"pair_{i}" / "compare_contextwise.json").is_file()
    out = capsys.readouterr().out
    assert "contextwise best-context loss A - B pooled over 3 pairs: " in out and "(each pair: -0.1" in out


def test_pairs_evaluated_with_other_options_are_refused(tmp_path, capsys):
    """Differences read with other options measure other things (it pooled them with a note)."""
    pairs = _pairs(tmp_path, shifts=(0.1, 0.1))
    contextwise_result(
        tmp_path / "a1", np.zeros((12, 3)), np.zeros(12), [(d, 0) for d in range(12)], length=16
    )
    contextwise_result(
        tmp_path / "b1", np.zeros((12, 3)), np.zeros(12), [(d, 0) for d in range(12)], length=16
    )
    assert main(_argv(pairs, tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "contextwise: the pairs were evaluated with other options (length), so their differences" in err
    assert not (tmp_path / "out" / "pooled.json").exists()


def test_a_repeated_pair_a_pair_of_one_model_and_swapped_pairs_are_refused(tmp_path, capsys):
    """A pair given twice made a zero-width interval; one model as A and B, a zero difference; a second
    pair with A and B swapped pooled +0.06 [-2.3, +2.4] from two pairs that agree."""
    pairs = _pairs(tmp_path, shifts=(0.1, 0.1))
    (a1, b1), (a2, b2) = pairs
    assert main(_argv([(a1, b1), (a1, b1)], tmp_path / "o1")) == 2
    assert "repeats pair 1: a pair counted twice narrows the pooled interval" in capsys.readouterr().err
    assert main(_argv([(a1, b1), (a2, a2)], tmp_path / "o2")) == 2
    assert f"pair 2 reads {a2} as both A and B" in capsys.readouterr().err
    for run, context in ((a1, 64), (b1, 128), (a2, 128), (b2, 64)):  # pair 2: context 128 - 64
        (run / "config.toml").write_text(f'[train]\ncontext = {context}\nout_dir = "{run}"\n')
    assert main(_argv(pairs, tmp_path / "o3")) == 2
    err = capsys.readouterr().err
    assert "pair 2 compares train.context 128 with 64 where pair 1 compares 64 with 128: its A and B" in err
    # the same setups; the pairs ran with other threads (a key that changes no number: not read)
    (a2 / "config.toml").write_text(f'[train]\ncontext = 64\nthreads = 2\nout_dir = "{a2}"\n')
    (b2 / "config.toml").write_text(f'[train]\ncontext = 128\nthreads = 1\nout_dir = "{b2}"\n')
    for run, threads in ((a1, 1), (b1, 2)):
        text = (run / "config.toml").read_text()
        (run / "config.toml").write_text(text.replace("[train]\n", f"[train]\nthreads = {threads}\n"))
    assert main(_argv(pairs, tmp_path / "o4")) == 0


def test_a_missing_second_pair_is_named(tmp_path, capsys):
    pairs = _pairs(tmp_path, shifts=(0.1,))
    argv = ["compare", str(pairs[0][0]), str(pairs[0][1]), "--and", str(tmp_path / "nope"), str(pairs[0][1])]
    assert main(argv) == 2
    assert f"RUN_A2 {tmp_path / 'nope'} not found" in capsys.readouterr().err


def test_the_report_of_the_pooled_folder_shows_the_pooled_lines_and_each_pair(tmp_path):
    from contextlab.report.html import build_report

    pairs = _pairs(tmp_path)
    assert main(_argv(pairs, tmp_path / "out")) == 0
    page = build_report(tmp_path / "out").read_text()
    assert "<h2>Pooled over 3 pairs (A - B)</h2>" in page
    assert "contextwise best-context loss A - B pooled over 3 pairs" in page
    assert page.count("<h2>Comparison ") == 3  # each pair's own section


def test_a_headline_one_pair_lacks_is_named_not_pooled(tmp_path, capsys):
    pairs = _pairs(tmp_path, shifts=(0.1, 0.1), one_token=None)
    pieces = [(d, 0) for d in range(12)]
    for run in pairs[0]:  # pair 1 with the one-token losses a context gain is paired from; pair 2 without
        contextwise_result(run, np.zeros((12, 3)), np.zeros(12), pieces, one_token=np.ones(12))
    assert main(_argv(pairs, tmp_path / "out")) == 0
    assert (
        "note: contextwise context gain not pooled: pair(s) 2 have none (older results)"
        in capsys.readouterr().out
    )


def test_one_model_against_itself_and_an_out_among_the_results_read_are_refused(tmp_path, capsys):
    ((a, b),) = _pairs(tmp_path, shifts=(0.1,))
    assert main(["compare", str(a), str(a)]) == 2
    assert f"RUN_A and RUN_B are both {a}; compare two models" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--out", str(a / "eval")]) == 2
    assert f"--out {a / 'eval'} is {a / 'eval'}, which this command reads" in capsys.readouterr().err
    assert not (a / "eval" / "compare_contextwise.json").exists()


def test_a_refused_pooling_writes_nothing_and_a_later_pooling_of_fewer_pairs_drops_the_stale_ones(
    tmp_path, capsys
):
    """A user's refused `--and` (pairs read with other options) had written pair_1 and pair_2, which the
    next, right, command refused as other results; an --overwrite of 2 pairs left a third pair's files,
    which the report showed beside them. pooled.json itself was replaced by other pairs unasked."""
    pairs = _pairs(tmp_path)
    out = tmp_path / "out"
    pieces = [(d, 0) for d in range(12)]
    contextwise_result(tmp_path / "a2", np.zeros((12, 3)), np.zeros(12), pieces, length=16)
    contextwise_result(tmp_path / "b2", np.zeros((12, 3)), np.zeros(12), pieces, length=16)
    assert main(_argv(pairs, out)) == 2
    assert "the pairs were evaluated with other options (length)" in capsys.readouterr().err
    assert not out.exists()  # nothing, not the pairs before the refusal
    assert main(_argv(pairs[:2], out)) == 0
    assert main(_argv(_pairs(tmp_path / "more"), out)) == 2  # other pairs: pooled.json is not replaced
    assert "pools other pairs" in capsys.readouterr().err
    fresh = _pairs(tmp_path / "three", shifts=(0.1, 0.1, 0.1))
    assert main([*_argv(fresh, out), "--overwrite"]) == 0
    assert (out / "pair_3" / "compare_contextwise.json").is_file()
    (out / "pair_3" / "mine.txt").write_text("a user's file")
    assert main([*_argv(fresh[:2], out), "--overwrite"]) == 0
    assert sorted(p.name for p in (out / "pair_3").iterdir()) == ["mine.txt"]  # its results gone, not this
    doc = json.loads((out / "pooled.json").read_text())
    assert len(doc["pairs"]) == 2
    assert any(
        "every pair gave the same difference, so the pooled interval has no width" in n for n in doc["notes"]
    )


def test_pairs_that_share_a_run_are_said_not_to_be_independent(tmp_path, capsys):
    """A user pooled A - B and A - B' (B' a rerun of B, A reused) into a zero-width interval, no note."""
    import shutil

    ((a1, b1),) = _pairs(tmp_path, shifts=(0.1,))
    b2 = shutil.copytree(b1, tmp_path / "b0_rerun")  # a rerun of B: the same numbers
    assert main(_argv([(a1, b1), (a1, b2)], tmp_path / "out")) == 0
    notes = json.loads((tmp_path / "out" / "pooled.json").read_text())["notes"]
    assert notes[0] == (
        f"{a1.resolve()} is in pairs 1, 2: pairs sharing a run are not independent replicates, so the "
        "pooled interval is narrower than the replicates' noise; give each pair runs of its own"
    )
