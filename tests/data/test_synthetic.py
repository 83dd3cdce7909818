"""Position-weighted multitask sparse parity: tasks, exact Bayes risk, token layout, stores, CLI."""

from __future__ import annotations

import math

import numpy as np
import pytest

from contextlab.cli import main
from contextlab.data import synthetic as syn
from contextlab.data.store import TokenStore
from contextlab.errors import UserError


def test_tasks_follow_the_seed_construction():
    cfg = syn.ParityConfig()  # 60 bits, 100 tasks
    t = syn.make_tasks(cfg)
    far, counts = np.unique(t.far, return_counts=True)
    assert far.tolist() == list(range(11, 61)) and set(counts.tolist()) == {2}  # 2 tasks per far bit 11..60
    assert np.all((t.near >= 1) & (t.near < t.far))
    assert t.freq.sum() == pytest.approx(1.0)
    assert np.all(np.diff(t.freq) <= 1e-15)  # nearer tasks are at least as frequent
    assert syn.make_tasks(cfg).near.tolist() == t.near.tolist()  # reproducible
    other = syn.make_tasks(syn.ParityConfig(task_seed=1))
    assert other.near.tolist() != t.near.tolist()


def test_bayes_risk_reproduces_the_seed_table():
    """decay 1.2 gives the minimum-loss column of the seed's Table 1 within 0.0012 nats."""
    table = {
        17: 0.4643,
        20: 0.3988,
        23: 0.3437,
        25: 0.3116,
        28: 0.2686,
        30: 0.2429,
        35: 0.1864,
        40: 0.1387,
        50: 0.0612,
    }
    tasks = syn.make_tasks(syn.ParityConfig())
    for ctl, want in table.items():
        assert abs(syn.bayes_risk(tasks, ctl) - want) < 0.0012, ctl
    assert syn.bayes_risk(tasks, 10) == pytest.approx(math.log(2))
    assert syn.bayes_risk(tasks, 60) == 0.0


@pytest.mark.parametrize("visible", [12, 25, 47])
def test_exact_bayes_risk_equals_monte_carlo_of_the_bayes_predictor(visible):
    cfg = syn.ParityConfig(n_bits=50, n_tasks=80, decay=0.8, task_seed=3)
    tasks = syn.make_tasks(cfg)
    s = syn.sample(cfg, tasks, 200_000, np.random.default_rng(visible))
    p1 = syn.bayes_probability(tasks, s, visible)  # (N,)
    p_true = np.where(s.answer == 1, p1, 1 - p1)
    assert p_true.min() > 0  # the predictor is never sure of a wrong answer
    loss = -np.log(p_true)
    mc, se = loss.mean(), loss.std(ddof=1) / np.sqrt(len(loss))
    exact = syn.bayes_risk(tasks, visible)
    assert abs(mc - exact) < 4 * se + 1e-12
    # the predictor is optimal: hidden tasks really are coin flips given what is visible
    hidden = tasks.far[s.task] > visible
    assert abs(s.answer[hidden].mean() - 0.5) < 0.01
    seen_near = s.bits[np.arange(len(s.task)), tasks.near[s.task] - 1]
    agree = (s.answer[hidden] == seen_near[hidden]).mean()  # one visible bit says nothing about the XOR
    assert abs(agree - 0.5) < 0.01


def test_token_layout_and_masking():
    cfg = syn.ParityConfig(n_bits=5, n_tasks=3, min_far_bit=2, min_visible=1)
    tasks = syn.ParityTasks(np.array([1, 2, 1]), np.array([2, 4, 5]), np.array([0.5, 0.3, 0.2]))
    s = syn.ParitySamples(
        bits=np.array([[1, 0, 1, 1, 0], [0, 0, 1, 1, 1]], np.uint8),  # bit 1 first
        task=np.array([1, 2]),
        answer=np.array([1, 1], np.uint8),
        visible=np.array([5, 3]),
    )
    rows = syn.to_tokens(s)
    B0, B1, M, T0 = syn.BIT0, syn.BIT1, syn.MASK, syn.TASK_BASE
    assert rows.tolist() == [
        [B0, B1, B1, B0, B1, T0 + 1, B1],  # bit 5 .. bit 1, task, answer
        [M, M, B1, B0, B0, T0 + 2, B1],
    ]  # bits 4, 5 masked
    assert syn.mask_tokens(rows, 5, 2).tolist()[0] == [M, M, M, B0, B1, T0 + 1, B1]
    assert syn.bayes_probability(tasks, s).tolist() == [1.0, 0.5]  # bit 2 xor bit 4 = 1; task 2 needs bit 5
    assert syn.bayes_probability(tasks, s, visible=3).tolist() == [0.5, 0.5]
    # answers produced by sample() are the XOR of the task's bits
    big = syn.sample(cfg, syn.make_tasks(cfg), 1000, np.random.default_rng(0))
    t = syn.make_tasks(cfg)
    rows = np.arange(1000)
    assert np.array_equal(
        big.answer, big.bits[rows, t.near[big.task] - 1] ^ big.bits[rows, t.far[big.task] - 1]
    )


def test_masked_fraction_and_visible_range():
    cfg = syn.ParityConfig(mask_fraction=0.5, min_visible=10)
    s = syn.sample(cfg, syn.make_tasks(cfg), 20_000, np.random.default_rng(0))
    masked = s.visible < 60
    assert 0.47 < masked.mean() < 0.51  # 0.5 minus the masked draws of exactly 60 visible bits
    assert s.visible.min() == 10 and s.visible.max() == 60


def test_store_is_reproducible_and_describes_itself(tmp_path):
    cfg = syn.ParityConfig(n_bits=20, n_tasks=12, n_samples=300, mask_fraction=0.5, seed=5)
    a = TokenStore(syn.write_parity_store(cfg, tmp_path / "a", progress=False))
    b = TokenStore(syn.write_parity_store(cfg, tmp_path / "b", progress=False))
    assert a.hash == b.hash and a.n_docs == 300 and set(a.lengths().tolist()) == {22}
    found_cfg, tasks = syn.parity_of_store(a)
    assert found_cfg == cfg
    assert a.meta["parity"]["bayes_risk"][7] == pytest.approx(syn.bayes_risk(tasks, 7))
    # the stored rows are exactly the samples drawn from the seed
    s = syn.sample(cfg, syn.make_tasks(cfg), 300, np.random.default_rng([cfg.seed, 1]))
    assert np.array_equal(np.stack([a.doc(i) for i in range(300)]), syn.to_tokens(s))
    assert a.doc_meta(4) == {"id": 4, "task": int(s.task[4]), "visible": int(s.visible[4])}
    c = TokenStore(
        syn.write_parity_store(
            syn.ParityConfig(n_bits=20, n_tasks=12, n_samples=300, seed=6), tmp_path / "c", progress=False
        )
    )
    assert c.hash != a.hash
    assert syn.parity_of_store(c)[1].near.tolist() == tasks.near.tolist()  # same task_seed, same tasks
    with pytest.raises(UserError, match="already exists"):
        syn.write_parity_store(cfg, tmp_path / "a", progress=False)


def test_cli_writes_a_store_and_rejects_bad_options(tmp_path, capsys):
    out = tmp_path / "p"
    assert (
        main(
            [
                "data",
                "synthetic",
                "parity",
                "--out",
                str(out),
                "--n-bits",
                "30",
                "--n-tasks",
                "40",
                "--n-samples",
                "500",
                "--no-progress",
            ]
        )
        == 0
    )
    assert "exact Bayes risk" in capsys.readouterr().out
    assert TokenStore(out).n_docs == 500
    assert main(["data", "synthetic", "parity", "--out", str(tmp_path / "q"), "--n-tasks", "300"]) == 2
    assert "n_tasks=300" in capsys.readouterr().err
    assert main(["data", "synthetic", "parity", "--out", str(tmp_path / "q"), "--set", "n_bitz=3"]) == 2
    assert "unknown config key 'n_bitz'" in capsys.readouterr().err
    assert main(["data", "synthetic", "parity", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_queries_layout_answers_every_task_of_the_same_bits():
    cfg = syn.ParityConfig(queries=5, mask_fraction=0.5)
    tasks = syn.make_tasks(cfg)
    s = syn.sample(cfg, tasks, 300, np.random.default_rng(3))
    assert s.task.shape == s.answer.shape == (300, 5)
    rows = syn.to_tokens(s)
    L = cfg.n_bits
    assert rows.shape == (300, L + 10)
    assert np.array_equal(rows[:, L : L + 5], syn.TASK_BASE + s.task)
    bits = s.bits[:, ::-1]  # farthest first, as in the rows
    for k in range(5):
        near, far = tasks.near[s.task[:, k]], tasks.far[s.task[:, k]]
        want = bits[np.arange(300), L - near] ^ bits[np.arange(300), L - far]
        assert np.array_equal(rows[:, L + 5 + k] == syn.BIT1, want == 1)
    # every query reads the same (masked) bits: a single-query row per (sample, k) has the same tokens
    single = syn.to_tokens(syn.ParitySamples(s.bits, s.task[:, 2], s.answer[:, 2], s.visible))
    assert np.array_equal(single[:, :L], rows[:, :L]) and np.array_equal(single[:, L], rows[:, L + 2])
    p = syn.bayes_probability(tasks, s)
    assert p.shape == (300, 5)
    assert np.all((p == 0.5) == (tasks.far[s.task] > s.visible[:, None]))


def test_bias_fraction_biases_the_bits_not_the_xor():
    cfg = syn.ParityConfig(bias_fraction=0.5, bias_min=0.1, bias_max=0.2, n_samples=10)
    tasks = syn.make_tasks(cfg)
    s = syn.sample(cfg, tasks, 4000, np.random.default_rng(0))
    density = s.bits.mean(axis=1)
    biased = density < 0.35  # 60 bits: a biased row has mean <= 0.2 + noise, an unbiased one ~0.5
    assert 0.45 < biased.mean() < 0.55
    assert density[biased].mean() == pytest.approx(0.15, abs=0.02)
    rows = np.arange(4000)
    assert np.array_equal(
        s.answer, s.bits[rows, tasks.near[s.task] - 1] ^ s.bits[rows, tasks.far[s.task] - 1]
    )
    # the curriculum's point: on biased rows the answer agrees with a single bit of its task more
    # often than not
    agree = (s.answer == s.bits[rows, tasks.near[s.task] - 1])[biased].mean()
    assert agree > 0.75
    with pytest.raises(ValueError, match="bias_min"):
        syn.ParityConfig(bias_min=0.4, bias_max=0.3)
    with pytest.raises(ValueError, match="queries"):
        syn.ParityConfig(queries=0)


def test_query_tasks_uniform_draws_every_task_equally_often():
    by_freq = syn.ParityConfig(queries=50)
    tasks = syn.make_tasks(by_freq)
    uniform = syn.ParityConfig(queries=50, query_tasks="uniform")
    counts = {}
    for name, cfg in (("frequency", by_freq), ("uniform", uniform)):
        s = syn.sample(cfg, tasks, 2000, np.random.default_rng(5))  # 100,000 draws
        counts[name] = np.bincount(s.task.ravel(), minlength=cfg.n_tasks) / s.task.size
        rows = np.arange(2000)[:, None]
        assert np.array_equal(
            s.answer, s.bits[rows, tasks.near[s.task] - 1] ^ s.bits[rows, tasks.far[s.task] - 1]
        )
    assert np.abs(counts["frequency"] - tasks.freq).max() < 0.003
    assert np.abs(counts["uniform"] - 1 / by_freq.n_tasks).max() < 0.002
    # the rarest (farthest) task is asked ~2.5x as often as by frequency
    rare = int(np.argmin(tasks.freq))
    assert counts["uniform"][rare] > 2 * counts["frequency"][rare]
    with pytest.raises(ValueError, match="query_tasks"):
        syn.ParityConfig(queries=4, query_tasks="zipf")
    with pytest.raises(ValueError, match="training format"):
        syn.ParityConfig(query_tasks="uniform")
