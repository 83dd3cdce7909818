"""Perplexity, contextwise loss and the Bayes fit against hand computations on a tiny model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from contextlab.eval import bayes_fit, contextwise, ppl, stats
from contextlab.eval.pieces import sequences
from tests.eval.conftest import byte_adapter, tiny_gpt


def manual_token_losses(model, ids: np.ndarray) -> np.ndarray:
    """-log p(ids[t+1] | ids[:t+1]) for a single sequence, straight from the model."""
    x = torch.as_tensor(ids[None, :-1].astype(np.int64))
    with torch.no_grad():
        logp = F.log_softmax(model(x).logits.float(), -1)[0]
    return -logp.gather(-1, torch.as_tensor(ids[1:].astype(np.int64))[:, None])[:, 0].numpy()


def test_ppl_equals_a_hand_computation(byte_store):
    model = tiny_gpt()
    adapter = byte_adapter(model)
    out = ppl.run(adapter, ppl.Options(context=64), str(byte_store.path))
    docs = [np.asarray(byte_store.doc(i)) for i in range(byte_store.n_docs)]
    expected = []
    for d in docs:  # by hand: disjoint 64-token inputs, each predicting the next 64 tokens
        for s in range(0, len(d) - 1, 64):
            expected.append(manual_token_losses(model, d[s : min(s + 65, len(d))]))
    expected = np.concatenate(expected)
    assert len(out.arrays["token_losses"]) == sum(len(d) - 1 for d in docs)
    np.testing.assert_allclose(out.arrays["token_losses"], expected, rtol=1e-5, atol=1e-5)
    mean = expected.astype(np.float64).mean()
    assert out.results["summary"]["perplexity"] == pytest.approx(math.exp(mean), rel=1e-5)
    n_bytes = sum(len(d) - 1 for d in docs)  # byte tokenizer: one byte per scored token
    assert out.results["summary"]["bits_per_byte"] == pytest.approx(
        expected.sum() / math.log(2) / n_bytes, rel=1e-5
    )


def test_a_document_cut_inside_a_character_counts_its_bytes_not_a_replacement_character(tmp_path):
    """A user's byte model gave bits per byte 4.50120 against bits per token 4.50417 with --max-tokens
    1012: each cut inside a character was counted as U+FFFD's 3 bytes. A byte model's are equal."""
    from contextlab.data.ingest import IngestConfig, ingest

    (tmp_path / "src").mkdir()
    for i in range(3):
        (tmp_path / "src" / f"d{i}.txt").write_text("é" * (40 + i))  # two bytes a character
    store = ingest(tmp_path / "src", tmp_path / "st", IngestConfig(tokenizer="byte"), progress=False).store
    out = ppl.run(byte_adapter(tiny_gpt()), ppl.Options(context=64, max_tokens=32), str(store.path))
    summary = out.results["summary"]
    assert summary["bits_per_byte"] == pytest.approx(summary["bits_per_token"], rel=1e-12)
    assert out.results["n_bytes_scored"] == 3 * 31  # the decoded count: 3 * 29 (a first token of 3)


def test_stride_equal_to_window_is_disjoint_windows_and_smaller_stride_scores_each_token_once(byte_store):
    model = tiny_gpt(1)
    adapter = byte_adapter(model)
    doc = np.asarray(byte_store.doc(5))[:200]
    assert ppl.windows(10, 4, 4) == [(0, 4, 1), (4, 8, 5), (8, 9, 9)]
    (disjoint,) = ppl.document_losses(adapter, [doc], window=32, stride=32)
    manual = np.concatenate([manual_token_losses(model, doc[s : s + 33]) for s in range(0, len(doc) - 1, 32)])
    np.testing.assert_allclose(disjoint, manual, rtol=1e-5, atol=1e-5)
    (strided,) = ppl.document_losses(adapter, [doc], window=32, stride=8)
    by_hand = np.zeros(len(doc) - 1, np.float32)
    done = 0
    for s in range(0, len(doc), 8):  # each target in the first window that predicts it
        e = min(s + 32, len(doc) - 1)
        if e <= done:
            break
        lp = manual_token_losses(model, doc[s : e + 1])
        by_hand[done:e] = lp[done - s :]
        done = e
    np.testing.assert_allclose(strided, by_hand, rtol=1e-5, atol=1e-5)
    assert not np.allclose(strided, disjoint)  # more context changes the losses


def test_contextwise_equals_a_per_document_loop(byte_store):
    model = tiny_gpt(2)
    adapter = byte_adapter(model, batch_size=2)
    out = contextwise.run(
        adapter, contextwise.Options(length=129, max_docs=0, train_context=64), str(byte_store.path)
    )
    r = out.results
    docs = [
        np.asarray(byte_store.doc(i))[:129] for i in range(byte_store.n_docs) if byte_store.doc(i).size >= 129
    ]
    assert r["n_sequences"] == len(docs) == 4
    manual = np.mean([manual_token_losses(model, d) for d in docs], axis=0)  # (128,)
    np.testing.assert_allclose(r["loss"], manual, rtol=1e-5, atol=1e-5)
    assert r["context"] == list(range(1, 129))
    assert [(b["from"], b["to"]) for b in r["buckets"]] == [
        (1, 1),
        (2, 3),
        (4, 7),
        (8, 15),
        (16, 31),
        (32, 63),
        (64, 127),
        (128, 128),
    ]
    assert r["buckets"][3]["loss"] == pytest.approx(manual[7:15].mean(), rel=1e-6)
    assert [b["complete"] for b in r["buckets"]] == [True] * 7 + [False]
    assert r["summary"]["last_full_bucket"] == [64, 127]
    best_per_doc = np.array([manual_token_losses(model, d) for d in docs])[:, 57:64].mean(1)  # (4,)
    best_half = 3.182446305284263 * best_per_doc.std(ddof=1) / 2  # one piece per document: a plain t
    best_iv = [best_per_doc.mean() - best_half, best_per_doc.mean() + best_half]
    assert r["best_context"] == {
        "loss": pytest.approx(manual[57:64].mean(), rel=1e-6),
        "from": 58,
        "to": 64,
        "interval95": pytest.approx(best_iv, rel=1e-5),
    }
    assert r["summary"]["best_context_loss_interval95"] == pytest.approx(best_iv, rel=1e-5)
    assert r["summary"]["loss_beyond_train_context"] == pytest.approx(manual[64:].mean(), rel=1e-6)
    # the true minimum over all 128 positions, and the per-document gain first bucket -> [64, 127]
    assert r["summary"]["min_loss"] == pytest.approx(manual.min(), rel=1e-6)
    assert r["summary"]["min_context"] == int(np.argmin(manual)) + 1
    window = np.convolve(manual, np.ones(7) / 7, mode="valid")  # as wide as the best-context window
    assert r["summary"]["min_window_loss"] == pytest.approx(window.min(), rel=1e-6)
    assert r["summary"]["min_window"] == [int(np.argmin(window)) + 1, int(np.argmin(window)) + 7]
    per_doc = np.array([manual_token_losses(model, d) for d in docs])  # (4, 128)
    diff = per_doc[:, 0] - per_doc[:, 63:127].mean(1)
    half = 3.182446305284263 * diff.std(ddof=1) / 2  # t(0.975, 3) * sd / sqrt(4)
    assert r["summary"]["first_to_last_bucket_drop"] == pytest.approx(diff.mean(), rel=1e-5)
    assert r["summary"]["first_to_last_bucket_drop_interval95"] == pytest.approx(
        [diff.mean() - half, diff.mean() + half]
    )
    assert r["summary"]["falls_with_position"] == (diff.mean() - half > 0)
    drop = r["first_to_last_bucket"]
    assert drop["early"] == [1, 1] and drop["late"] == [64, 127] and drop["late_beyond_train_context"]
    assert r["summary"]["last_full_bucket_beyond_train_context"]
    assert [b["beyond_train_context"] for b in r["buckets"]] == [False] * 6 + [True, True]
    # the context gain: the best-context window's targets (58..64) with one visible token vs all before them
    one = np.array(
        [[manual_token_losses(model, d[t - 1 : t + 1])[0] for t in range(58, 65)] for d in docs]
    ).mean(1)  # (4,)
    full = per_doc[:, 57:64].mean(1)
    g = one - full
    half = 3.182446305284263 * g.std(ddof=1) / 2
    assert r["summary"]["context_gain"] == pytest.approx(g.mean(), rel=1e-5)
    assert r["summary"]["context_gain_interval95"] == pytest.approx(
        [g.mean() - half, g.mean() + half], rel=1e-5
    )
    assert r["context_gain"]["targets"] == [58, 64]
    assert r["context_gain"]["loss_one_token"] == pytest.approx(one.mean(), rel=1e-5)
    np.testing.assert_allclose(out.arrays["piece_one_token_loss"], one, rtol=1e-5)


def test_contextwise_default_length_is_the_model_context(byte_store):
    """No default piece runs past the model's context: L = context + 1 scores lengths 1..context."""
    adapter = byte_adapter(tiny_gpt(2))
    r = contextwise.run(adapter, contextwise.Options(max_docs=2), str(byte_store.path)).results
    assert r["length"] == adapter.context + 1 and r["context"][-1] == adapter.context
    assert not any(b["beyond_train_context"] for b in r["buckets"])
    assert r["summary"]["loss_beyond_train_context"] is None


def test_contextwise_pieces_cut_long_documents(byte_store):
    pieces = sequences(byte_store, 100, max_docs=0, pieces_per_doc=0)
    assert pieces == [
        (1, 0),
        (2, 0),
        (4, 0),
        (5, 0),
        (2, 100),
        (4, 100),
        (5, 100),
        (2, 200),
        (5, 200),
        (5, 300),
        (5, 400),
    ]
    assert sequences(byte_store, 100, max_docs=3, pieces_per_doc=1) == [(1, 0), (2, 0), (4, 0)]


def test_contextwise_plot_marks_the_minimum_and_reads_older_results(byte_store, tmp_path):
    import json

    out = contextwise.run(byte_adapter(tiny_gpt(2)), contextwise.Options(length=33), str(byte_store.path))
    assert out.plot(tmp_path / "one.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    old = {k: v for k, v in out.results.items() if k != "minimum"}  # a result from before the minimum
    files = []
    for i, results in enumerate((out.results, old)):
        files.append(tmp_path / f"r{i}.json")
        files[-1].write_text(json.dumps({"model": {"id": f"m{i}"}, "results": results}))
    contextwise.combined_plot(files, tmp_path / "both.png")
    assert (tmp_path / "both.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_combined_plot_labels_each_curve_by_its_model_or_by_the_names_given(tmp_path, monkeypatch):
    import json

    import contextlab.result_plots as plots

    drawn = []
    monkeypatch.setattr(plots, "contextwise_png", lambda curves, out, smooth: drawn.append(list(curves)))
    results = {"context": [1, 2], "loss": [3.0, 2.0], "train_context": 2}
    files = []
    for i in range(2):
        files.append(tmp_path / f"r{i}.json")
        files[-1].write_text(json.dumps({"model": {"id": f"/runs/m{i}"}, "results": results}))
    contextwise.combined_plot(files, tmp_path / "a.png")
    contextwise.combined_plot(files, tmp_path / "b.png", labels=["gpt", "contextlm"])
    assert drawn == [["/runs/m0", "/runs/m1"], ["gpt", "contextlm"]]


def test_the_true_minimum_of_a_known_curve_and_where_it_falls():
    """A curve that falls to 2.0 at context 150 (beyond a training context of 100), then rises."""
    t = np.arange(1, 201)
    curve = 2.0 + 1e-4 * (t - 150.0) ** 2
    got = contextwise.curve_minimum(curve, np.full(200, 0.01), train_context=100, width=10)
    assert got["position"] == {"loss": 2.0, "context": 150, "stderr": 0.01, "inside_train_context": False}
    assert (got["window"]["from"], got["window"]["to"]) in [(145, 154), (146, 155)]
    assert got["window"]["loss"] == pytest.approx(2.0 + 1e-4 * np.mean((np.arange(145, 155) - 150) ** 2))
    assert not got["window"]["inside_train_context"]
    inside = contextwise.curve_minimum(curve[:120][::-1], np.zeros(120), train_context=100, width=10)
    assert inside["position"]["context"] == 1 and inside["window"] == {
        "loss": pytest.approx(curve[110:120].mean()),
        "from": 1,
        "to": 10,
        "inside_train_context": True,
    }


def test_falls_with_position_is_a_test_on_paired_document_differences():
    """Known answers: a real gain of 0.5 nats is found with an interval around it; zero-mean noise
    is not called a fall although its mean is above 0 (the strict `<` said it was); pieces of one
    document count once."""
    rng = np.random.default_rng(0)
    late = rng.normal(3.0, 0.3, 40)
    real = stats.paired_t(late + 0.5 + rng.normal(0, 0.1, 40), late, list(range(40)))
    lo, hi = real["interval95"]
    assert lo < 0.5 < hi and lo > 0 and real["n_documents"] == 40
    noise = np.array([0.9, -0.8, 0.7, -0.6, 0.5, -0.4, 0.3])  # mean 0.0857 > 0
    none = stats.paired_t(late[:7] + noise, late[:7], list(range(7)))
    assert none["gain"] == pytest.approx(noise.mean()) and none["interval95"][0] < 0 < none["interval95"][1]
    pieces = stats.paired_t(np.array([1.0, 3.0, 2.0, 2.0]), np.zeros(4), [7, 7, 9, 9])
    assert pieces["n_documents"] == 2 and pieces["gain"] == 2.0 and pieces["interval95"] == [2.0, 2.0]
    one = stats.paired_t(np.array([5.0, 4.0]), np.zeros(2), [3, 3])
    assert one == {"gain": 4.5, "interval95": None, "n_documents": 1}


def test_bayes_fit_recovers_known_parameters():
    l = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256], float)
    y = 2.0 + 3.0 / l**0.6
    fit = bayes_fit.fit_power_law(
        l, y + np.random.default_rng(0).normal(0, 1e-3, len(l)), np.full(len(l), 1e-3)
    )
    assert fit["C0"] == pytest.approx(2.0, abs=0.02) and fit["C"] == pytest.approx(3.0, abs=0.02)
    assert fit["gamma"] == pytest.approx(0.6, abs=0.01) and fit["r2"] > 0.9999 and 0 < fit["gamma_err"] < 0.01
    assert bayes_fit.fit_notes(fit) == []


def test_a_fit_the_points_do_not_pin_down_says_so():
    """A loss falling like log l fits C0 + C / l^gamma with R^2 = 0.99999999 at C0 = -1035: the eval printed
    that as the loss with unlimited context without a word. Flat and early-saturating curves too."""
    l = np.array([1, 2, 4, 8, 16, 32, 64, 128.0])
    sem = np.full(len(l), 0.01)
    cases = {
        "log": 5 - 0.05 * np.log(l),
        "flat": 5 + np.random.default_rng(0).normal(0, 0.01, len(l)),
        "steep": 5 + 0.5 / l**12,
    }
    notes = {k: bayes_fit.fit_notes(bayes_fit.fit_power_law(l, y, sem)) for k, y in cases.items()}
    assert notes["log"][0].startswith("gamma is at its lower bound 0")
    assert "C0 is then no estimate of the loss with unlimited context" in notes["log"][1]
    assert notes["flat"][0].startswith("gamma is at its lower bound 0")
    assert notes["steep"][0].startswith("gamma is at its upper bound 10")


def test_last_token_protocol_scores_the_same_target_with_l_visible_tokens(byte_store):
    model = tiny_gpt(3)
    adapter = byte_adapter(model)
    targets = bayes_fit.sample_targets(byte_store, 6, 32, seed=0)
    losses = bayes_fit.last_token_losses(adapter, byte_store, targets, [1, 8, 32])
    d, t = targets[4]
    doc = np.asarray(byte_store.doc(d))
    for i, l in enumerate([1, 8, 32]):
        assert losses[i, 4] == pytest.approx(manual_token_losses(model, doc[t - l : t + 1])[-1], rel=1e-5)


def test_bayes_fit_errors_are_the_spread_over_documents_not_curve_fits(monkeypatch):
    """The lengths' means are losses of the same targets (a document offset moves every length alike):
    over 30 simulated corpora, the bootstrap's C0 and gamma errors match the spread of the fits from
    corpus to corpus, while curve_fit's covariance, which takes the means as independent, is far off."""
    monkeypatch.setattr(bayes_fit, "FIT_RESAMPLES", 200)
    lengths = [1, 2, 4, 8, 16, 32, 64]
    curve = 3 + 2 / np.power(np.asarray(lengths, float), 0.7)
    docs = np.repeat(np.arange(24), 8)  # 24 documents of 8 targets
    fits, boot, naive = [], [], []
    for seed in range(30):
        rng = np.random.default_rng(seed)
        per_doc = rng.normal(0, 0.4, 24)[docs] * (1 + 0.5 / np.sqrt(lengths))[:, None]  # (L, N)
        losses = curve[:, None] + per_doc + rng.normal(0, 0.3, (len(lengths), len(docs)))
        mean, sem = losses.mean(1), losses.std(1, ddof=1) / np.sqrt(losses.shape[1])
        point = bayes_fit.fit_power_law(lengths, mean, sem)
        naive.append([point["C0_err"], point["gamma_err"]])
        got = bayes_fit.bootstrap_fit(lengths, losses, docs, point, seed)
        assert got["errors"] == "bootstrap over 24 documents, 200 refits"
        lo, hi = got["C0_interval95"]
        assert lo < got["C0"] < hi
        fits.append([got["C0"], got["gamma"]])
        boot.append([got["C0_err"], got["gamma_err"]])
    spread = np.std(fits, axis=0, ddof=1)  # the errors' target: how much the fit moves between corpora
    boot_ratio, naive_ratio = np.mean(boot, axis=0) / spread, np.mean(naive, axis=0) / spread
    assert ((boot_ratio > 0.6) & (boot_ratio < 1.6)).all(), boot_ratio
    assert naive_ratio[0] < 0.7 and naive_ratio[1] > 1.4, naive_ratio  # C0's too small, gamma's too large


def test_a_fit_of_few_documents_or_a_degenerate_one_keeps_curve_fits_errors_and_says_so():
    lengths = [1, 2, 4, 8]
    losses = np.array([[4.0, 4.2], [3.5, 3.6], [3.2, 3.3], [3.1, 3.2]])
    mean, sem = losses.mean(1), losses.std(1, ddof=1) / np.sqrt(2)
    point = bayes_fit.fit_power_law(lengths, mean, sem)
    got = bayes_fit.bootstrap_fit(lengths, losses, [0, 1], point, 0)
    assert got["errors"] == "curve_fit's covariance, not bootstrapped (2 documents)"
    assert got["C0_err"] == point["C0_err"] and "C0_interval95" not in got


def test_a_flat_curve_stops_after_its_pilot_refits_and_says_it_is_degenerate():
    """A random model's flat curve: curve_fit's covariance no longer decides (it called pinned-down fits
    degenerate); the first 50 refits over documents do, and a thousand are not spent on it."""
    lengths = [1, 2, 4, 8, 16, 32, 64, 128, 255]
    rng = np.random.default_rng(1)
    docs = rng.integers(24, size=256)
    losses = 7.6 + 0.025 / np.asarray(lengths, float)[:, None] ** 0.6 + rng.normal(0, 1, (9, 256))
    point = bayes_fit.fit_power_law(lengths, losses.mean(1), losses.std(1, ddof=1) / 16)
    assert not bayes_fit.degenerate(point)  # gamma inside its bounds, a finite covariance
    got = bayes_fit.bootstrap_fit(lengths, losses, docs, point, 0)
    assert got["errors"] == (
        "the spread of 50 refits over 24 documents, not bootstrapped further (the fit is degenerate: they "
        "spread over twice its C0 or gamma)"
    )
    assert bayes_fit.degenerate(got) and "gamma_interval95" not in got and got["gamma_err"] > 2 * got["gamma"]
    assert any("do not pin down" in n for n in bayes_fit.fit_notes(got))


def test_bayes_fit_context_gain_is_the_same_targets_with_one_vs_all_visible(byte_store):
    """bayes-fit's context gain: the mean over targets of the loss with l = 1 minus with the largest
    l, with a cluster interval over documents; the same name and meaning as contextwise's."""
    adapter = byte_adapter(tiny_gpt(3))
    o = bayes_fit.Options(lengths=[1, 2, 4, 8, 16, 32, 64], samples=40, seed=1)
    out = bayes_fit.run(adapter, o, str(byte_store.path))
    r = out.results
    losses, targets = out.arrays["target_losses"], out.arrays["targets"]
    want = stats.context_gain(losses[0], losses[-1], targets[:, 0])
    assert r["summary"]["context_gain"] == pytest.approx((losses[0] - losses[-1]).mean())  # over targets
    assert r["summary"]["context_gain"] == pytest.approx(want["gain"])
    assert r["summary"]["context_gain_interval95"] == pytest.approx(want["interval95"])
    assert r["context_gain"]["visible"] == [1, 64] and r["context_gain"]["full_context"]
    without_one = bayes_fit.run(
        adapter, bayes_fit.Options(lengths=[2, 4, 8, 16], samples=8), str(byte_store.path)
    )
    assert "context_gain" not in without_one.results["summary"]  # no l = 1: no gain is claimed


def test_default_lengths_end_at_the_models_context_when_it_is_no_power_of_two(byte_store):
    """Context 96: the default lengths are 1, 2, ..., 64 and then 96, so the context gain is 1 vs the
    whole context visible (it used to stop at 64, the largest power of 2 within the context)."""
    assert bayes_fit.default_lengths(255)[-2:] == [128, 255]
    assert bayes_fit.default_lengths(256)[-2:] == [128, 256]
    adapter = byte_adapter(tiny_gpt(3, context=96))
    out = bayes_fit.run(adapter, bayes_fit.Options(samples=16), str(byte_store.path))
    r, losses = out.results, out.arrays["target_losses"]
    assert r["lengths"] == [1, 2, 4, 8, 16, 32, 64, 96] and losses.shape == (8, 16)
    assert r["context_gain"]["visible"] == [1, 96] and r["context_gain"]["full_context"]
    assert r["summary"]["context_gain"] == pytest.approx((losses[0] - losses[-1]).mean())


def test_visible_loss_reports_the_same_context_gain_as_bayes_fit(byte_store):
    from contextlab.eval import visible

    adapter = byte_adapter(tiny_gpt(3))
    v = visible.run(
        adapter, visible.Options(task="loss", visible=[1, 4, 16, 64], samples=24), str(byte_store.path)
    )
    b = bayes_fit.run(adapter, bayes_fit.Options(lengths=[1, 4, 16, 64], samples=24), str(byte_store.path))
    assert v.results["summary"]["context_gain"] == pytest.approx(b.results["summary"]["context_gain"])
    assert v.results["context_gain"]["visible"] == [1, 64]


def test_bf16_autocast_is_close_to_fp32(byte_store):
    model = tiny_gpt(4)
    doc = np.asarray(byte_store.doc(5))[:65]
    fp32 = byte_adapter(model).token_logprobs(doc)
    bf16 = byte_adapter(model, dtype="bf16").token_logprobs(doc)
    assert bf16.dtype == torch.float32
    assert (fp32 - bf16).abs().mean() < 0.1


def test_bayes_fit_says_why_a_gain_of_one_document_has_no_interval(byte_store, tmp_path):
    """As contextwise does: targets of one document give no interval over documents, and a line says so."""
    from contextlab.data.ingest import IngestConfig, ingest
    from tests.conftest import shakespeare

    one = tmp_path / "one.txt"
    one.write_text(shakespeare(4_000))
    store = ingest(one, tmp_path / "one", IngestConfig(), progress=False).store
    adapter = byte_adapter(tiny_gpt(3))
    o = bayes_fit.Options(lengths=[1, 2, 4, 16], samples=12)
    r = bayes_fit.run(adapter, o, str(store.path)).results
    assert r["summary"]["context_gain_interval95"] is None
    assert r["text"][-1:] == [
        "context_gain_interval95 is null: it is over documents (targets of one document share its text) and "
        "all 12 targets come from one document; give a store of two or more documents longer than 16 tokens "
        "(`data ingest --doc-start` cuts a file of many)"
    ]
    several = bayes_fit.run(adapter, o, str(byte_store.path)).results
    assert several["summary"]["context_gain_interval95"] is not None
    assert not any(
        "interval95 is null" in t for t in several.get("text", [])
    )  # an untrained model's fit is noted


def test_contextwise_context_gain_is_the_difference_of_its_two_losses(byte_store):
    """Pieces of unequal count per document: the gain is the mean over targets (loss_one_token -
    loss_full_context, what `compare` pairs), not a mean of per-document means, which weighted a
    document of one piece as much as one of many (0.103 against 0.118 on a real run)."""
    adapter = byte_adapter(tiny_gpt(2), batch_size=4)
    options = contextwise.Options(length=33, max_docs=0, pieces_per_doc=0, train_context=32)
    out = contextwise.run(adapter, options, str(byte_store.path))
    gain = out.results["context_gain"]
    docs = out.arrays["pieces"][:, 0]
    assert len(set(np.bincount(docs)[np.unique(docs)].tolist())) > 1  # documents of unequal pieces
    assert gain["gain"] == pytest.approx(gain["loss_one_token"] - gain["loss_full_context"], rel=1e-9)
    diff = out.arrays["piece_one_token_loss"] - out.arrays["piece_best_loss"]
    want = stats.context_gain(out.arrays["piece_one_token_loss"], out.arrays["piece_best_loss"], docs)
    assert gain["interval95"] == pytest.approx(want["interval95"]) and gain["gain"] == pytest.approx(
        diff.mean()
    )
    by_document = stats.paired_t(out.arrays["piece_one_token_loss"], out.arrays["piece_best_loss"], docs)
    assert abs(by_document["gain"] - diff.mean()) > 1e-4  # the two weightings differ on this data


def test_contextwise_pieces_shorter_than_the_training_context_say_where_the_window_went(byte_store):
    """--length below the training context moved the best-context window to the last tenth of the
    scored lengths with no word; the results text says so (and what to compare it with)."""
    adapter = byte_adapter(tiny_gpt(2))
    out = contextwise.run(
        adapter, contextwise.Options(length=33, max_docs=4, train_context=64), str(byte_store.path)
    )
    assert out.results["best_context"]["to"] == 32
    (line,) = [t for t in out.results["text"] if t.startswith("the pieces are 33 tokens")]
    assert "fewer than the model's 64-token training context" in line and "context lengths 29..32" in line
    full = contextwise.run(
        adapter, contextwise.Options(length=65, max_docs=4, train_context=64), str(byte_store.path)
    )
    assert not any("fewer than the model's" in t for t in full.results.get("text", []))


@pytest.mark.parametrize("flag", ["context", "stride", "max_tokens", "max_docs"])
def test_a_negative_ppl_option_is_named_as_given(flag, byte_store):
    """`eval ppl --context -5` blamed a stride the user never gave ("stride -5 must be between 1 and the
    context (-5); lower --stride")."""
    with pytest.raises(Exception) as err:
        ppl.run(byte_adapter(tiny_gpt()), ppl.Options(**{flag: -5}), str(byte_store.path))
    assert str(err.value) == f"ppl --{flag.replace('_', '-')} must be 0 (the default) or more, got -5"
