"""``analyze attention``: the materialised weights are the model's attention, and the measures are right."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch

from contextlab.analysis.attention import (
    AttentionProbe,
    Options,
    attention_weights,
    bucket_index,
    bucket_mass,
    collect,
    module_output,
    run,
)
from contextlab.analysis.attention_measures import distance_buckets
from contextlab.cli import main
from contextlab.config import from_dict
from contextlab.data.tokenizers import ByteTokenizer, train_bpe
from contextlab.errors import UserError
from contextlab.eval.adapter import in_memory_adapter
from contextlab.models.contextlm import ContextLM, ContextLMConfig
from tests.conftest import shakespeare
from tests.eval.conftest import byte_adapter, tiny_gpt

TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer"


def tiny_contextlm(seed: int = 1, context: int = 64) -> ContextLM:
    torch.manual_seed(seed)
    cfg = ContextLMConfig(
        vocab_size=257, n_layer=2, n_head=2, n_embd=64, context=context, fusion="plain", predictor_layers=1
    )
    return ContextLM(cfg).eval()


def _block_call(model, T: int = 24, B: int = 3):
    torch.manual_seed(0)
    x = torch.randn(B, T, model.config.n_embd) * 3
    return model.blocks[0].attn, x, model.rope(T)


def test_weights_are_causal_rows_of_one_and_reproduce_the_modules_output():
    attn, x, rope = _block_call(tiny_gpt())
    with torch.no_grad():
        w, v = attention_weights(attn, x, rope, None, True)  # (B, nh, T, T)
        out = attn(x, rope, None, True)  # the model's SDPA path
        mine = module_output(attn, w, v)
    T = x.shape[1]
    torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-6, rtol=0)
    above = torch.ones(T, T, dtype=torch.bool).triu(1)
    assert float(w[..., above].abs().max()) == 0.0  # no mass on keys after the query
    assert float((mine - out).abs().max()) < 1e-5
    assert float(out.abs().max()) > 0.1  # a real output, not two zeros compared


def test_a_given_document_mask_is_applied_as_the_model_applies_it():
    attn, x, rope = _block_call(tiny_gpt())
    T = x.shape[1]
    docs = torch.tensor([0] * 10 + [1] * (T - 10))
    mask = (docs[:, None] == docs[None, :]) & torch.ones(T, T, dtype=torch.bool).tril()  # (T, T)
    mask = mask[None, None]  # (1, 1, T, T): holds its causal part, as GPT.prepare passes it
    with torch.no_grad():
        w, v = attention_weights(attn, x, rope, mask, True)
        out = attn(x, rope, mask, True)
        assert float((module_output(attn, w, v) - out).abs().max()) < 1e-5
    assert float(w[..., 10:, :10].abs().max()) == 0.0  # the second document never sees the first
    torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-6, rtol=0)


def test_the_probe_sees_every_block_and_the_contextlm_predictor_and_checks_each_call():
    model = tiny_contextlm()
    seen = []
    ids = torch.as_tensor(np.frombuffer(TEXT.encode(), np.uint8)[:40].astype(np.int64))[None]
    with torch.no_grad(), AttentionProbe(model, lambda name, w: seen.append((name, tuple(w.shape)))) as probe:
        logits = model(ids).logits
    assert seen == [("predictor.0.attn", (1, 2, 10, 10)), ("blocks.0.attn", (1, 2, 40, 40)),
                    ("blocks.1.attn", (1, 2, 40, 40))]  # fmt: skip
    assert 0 < probe.max_abs_diff < 1e-5
    with torch.no_grad():  # the hooks are gone and changed nothing
        torch.testing.assert_close(model(ids).logits, logits)
    assert not any(m._forward_pre_hooks for m in model.modules())


def test_distance_buckets_cover_every_distance_once():
    T = 37
    assert distance_buckets(T) == [(0, 0), (1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 36)]
    idx, dist = bucket_index(T)
    for b, (lo, hi) in enumerate(distance_buckets(T)):
        sel = torch.tril(idx == b) if b else (dist == 0) & torch.eye(T, dtype=torch.bool)
        assert bool(((dist[sel] >= lo) & (dist[sel] <= hi)).all())
        assert int(sel.sum()) == sum(T - d for d in range(lo, hi + 1))  # every pair (i, j<=i) once


def test_every_querys_distance_buckets_sum_to_one():
    attn, x, rope = _block_call(tiny_gpt(), T=37)
    with torch.no_grad():
        w, _ = attention_weights(attn, x, rope, None, True)
    mass = bucket_mass(w.mean(1), bucket_index(37)[0])  # (B, T, n_buckets)
    assert mass.shape == (3, 37, 7)
    torch.testing.assert_close(mass.sum(-1), torch.ones(3, 37), atol=1e-6, rtol=0)
    torch.testing.assert_close(mass[:, 0, 0], torch.ones(3))  # the first query sees only itself
    assert float(mass[:, :16, 5:].abs().max()) == 0.0  # queries before 16 cannot reach distance 16


def _uniform(model):
    """Attention forced uniform: zero query and key weights, so every score is 0."""
    with torch.no_grad():
        for block in model.blocks:
            C = model.config.n_embd
            block.attn.qkv.weight[: 2 * C].zero_()
    return model


def test_uniform_attention_gives_the_harmonic_sums():
    T = 32
    adapter = byte_adapter(_uniform(tiny_gpt()), batch_size=2)
    tokens = np.random.default_rng(0).integers(0, 256, size=(3, T))
    got, diff = collect(adapter, tokens, progress=False)
    blocks = got["blocks"]
    H = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, T + 1))])  # H[n] = 1 + 1/2 + ... + 1/n
    expected = H[T] - H[np.arange(T)]  # sum over i >= j of 1 / (i + 1)
    np.testing.assert_allclose(blocks["received"], np.broadcast_to(expected, (3, 2, T)), rtol=1e-5)
    np.testing.assert_allclose(blocks["distance"], (T - 1) / 4, rtol=1e-5)  # mean of i / 2 over i
    np.testing.assert_allclose(blocks["entropy"], np.mean(np.log(np.arange(1, T + 1))), rtol=1e-5)
    share = [np.mean([len(set(range(lo, hi + 1)) & set(range(i + 1))) / (i + 1) for i in range(T)])
             for lo, hi in distance_buckets(T)]  # fmt: skip
    np.testing.assert_allclose(blocks["buckets"], np.broadcast_to(share, (3, 2, len(share))), rtol=1e-5)
    assert diff < 1e-5


def test_buckets_sum_to_one_and_a_model_compared_with_itself_changes_nothing(tmp_path):
    adapter = byte_adapter(tiny_contextlm(context=128), batch_size=2)
    out = run(adapter, Options(), text=TEXT, compare=adapter, progress=False)
    r = out.results
    for part in ("a", "b"):
        np.testing.assert_allclose(
            np.sum(r["models"][part]["blocks"]["mass_by_distance"], -1), 1.0, atol=1e-6
        )
        np.testing.assert_allclose(
            np.sum(r["models"][part]["predictor"]["mass_by_distance"], -1), 1, atol=1e-6
        )
    c = r["comparison"]
    for key in ("percent_by_position", "percent_by_chunk", "percent_by_offset_in_chunk"):
        assert np.abs(c[key]).max() == 0.0 and len(c[key]) > 0
    assert c["mean_distance_diff"]["diff"] == 0.0 and r["sample"]["percent_by_token"][5] == 0.0
    assert r["chunk"] == 4 and len(c["percent_by_chunk"]) == math.ceil(len(TEXT) / 4)
    from contextlab.analysis.attention_plots import plot_all

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warned of an axis of zero height here
        assert all(p.stat().st_size > 1000 for p in plot_all(r, tmp_path))


def test_a_different_model_moves_attention_and_the_percent_is_against_b():
    a, b = byte_adapter(tiny_contextlm(context=128)), byte_adapter(tiny_gpt(context=128))
    r = run(a, Options(chunk=8), text=TEXT, compare=b, progress=False).results
    ra, rb = (np.asarray(r["models"][k]["blocks"]["received"]) for k in "ab")
    np.testing.assert_allclose(r["comparison"]["percent_by_position"], 100 * (ra - rb) / rb, rtol=1e-9)
    assert len(r["comparison"]["percent_by_chunk"]) == math.ceil(len(TEXT) / 8)
    short = run(a, Options(length=20), text=TEXT, compare=b, progress=False).results
    assert short["length"] == 20 and short["sample"]["tokens"][:3] == ["T", "o", " "]
    assert np.abs(r["comparison"]["percent_by_position"]).max() > 1.0


def test_two_tokenizers_are_refused_in_one_line():
    bpe = train_bpe([shakespeare(20_000)], 300)
    a = in_memory_adapter(tiny_gpt(), ByteTokenizer(), "bytes")
    model_b = tiny_gpt(seed=2)
    b = in_memory_adapter(model_b, bpe, "bpe")
    with pytest.raises(UserError, match="tokenizer .* differs from .*same tokenizer"):
        run(a, Options(), text=TEXT, compare=b, progress=False)


def _train(store, out, objective: dict):
    from contextlab.train.config import RunConfig
    from contextlab.train.trainer import train

    cfg = {
        "model": {"size": "tiny-2x128", "n_embd": 32, "n_head": 2},
        "data": {"store": str(store.path), "val_split": "tail", "val_fraction": 0.1},
        "objective": objective,
        "train": {"out_dir": str(out), "context": 32, "tokens_per_step": 128, "max_steps": 2, "val_every": 0,
                  "val_tokens": 64, "ckpt_every": 0, "threads": 1, "peak_flops": 1e12, "progress": False,
                  "dtype": "fp32", "log_every": 1},
    }  # fmt: skip
    train(from_dict(RunConfig, cfg))
    return out


def test_cli_end_to_end_on_two_tiny_runs(byte_store, tmp_path, capsys):
    gpt = _train(byte_store, tmp_path / "gpt", {"name": "clm"})
    clm = _train(byte_store, tmp_path / "ctx", {"name": "contextlm", "options": {"predictor_layers": 1}})
    out = tmp_path / "attn"
    argv = [
        "analyze",
        "attention",
        "--model",
        str(clm),
        "--compare",
        str(gpt),
        "--data",
        str(byte_store.path),
    ]
    assert main([*argv, "--out", str(out), "--rows", "5", "--no-progress", "--per-layer", "true"]) == 0
    doc = json.loads((out / "attention.json").read_text())
    assert doc["eval"] == "attention" and doc["git_commit"] is not None
    assert doc["model"]["a"]["id"] == str(clm) and doc["model"]["b"]["id"] == str(gpt)
    assert doc["options"]["rows"] == 5 and doc["data"]["hash"] == byte_store.hash
    r = doc["results"]
    assert r["rows"] == 5 and r["length"] == 32 and r["chunk"] == 4
    assert r["models"]["a"]["architecture"] == "ContextLM" and "predictor" in r["models"]["a"]
    assert r["models"]["a"]["max_abs_diff_vs_model"] < 1e-5
    assert np.load(out / doc["arrays"]["a_received"]).shape == (5, 2, 32)
    for name in ("attention_tokens.png", "attention_chunks.png", "attention_distance.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "A vs B" in capsys.readouterr().out
    assert main([*argv[:4], "--text", "x", "--data", str(byte_store.path), "--out", str(out)]) == 2
    assert "one of them" in capsys.readouterr().err


def test_weights_that_are_not_the_models_stop_the_analysis(monkeypatch):
    import contextlab.analysis.attention as attention

    def wrong(attn, x, rope, mask, is_causal):  # forgets the 1 / sqrt(hs) scale
        w, v = attention_weights(attn, x, rope, mask, is_causal)
        return torch.softmax(torch.log(w.clamp_min(1e-30)) * 2.0, dim=-1), v

    monkeypatch.setattr(attention, "attention_weights", wrong)
    with pytest.raises(RuntimeError, match="differs from the model's output"):
        collect(byte_adapter(tiny_gpt()), np.arange(40)[None] % 256, progress=False)


def test_a_model_without_attention_modules_or_behind_mode_tokens_is_refused_in_one_line():
    from types import SimpleNamespace

    from contextlab.analysis.attention import check_model

    hf = SimpleNamespace(
        model=torch.nn.Linear(2, 2), info=SimpleNamespace(kind="hf", id="x", architecture="gpt2")
    )
    with pytest.raises(UserError, match=r"model B: x: Linear has no module named \.\.\.Attention"):
        check_model(hf, "model B")
    ul2 = byte_adapter(tiny_gpt())
    ul2.info.lm_prefix, ul2.info.objective = [5], "ul2"
    with pytest.raises(UserError, match="mode tokens"):
        run(ul2, Options(), text=TEXT, progress=False)


def test_a_contextlm_with_an_encoder_averages_its_decoder_blocks_only():
    torch.manual_seed(3)
    cfg = ContextLMConfig(vocab_size=257, n_layer=3, n_head=2, n_embd=32, context=64, encoder_layers=1)
    out = run(byte_adapter(ContextLM(cfg).eval()), Options(), text=TEXT, progress=False)
    blocks = out.results["models"]["a"]["blocks"]
    assert blocks["layers_averaged"] == [1, 2] and blocks["n_layers"] == 3
    decoder = out.arrays["a_received"][0, 1:].mean(0)  # (T,) blocks 2 and 3
    np.testing.assert_allclose(blocks["received"], decoder, rtol=1e-6)
    assert not np.allclose(out.arrays["a_received"][0].mean(0), decoder, rtol=1e-3)


def test_two_models_of_other_contexts_read_rows_of_the_smaller_by_default(byte_store):
    """The rows defaulted to model A's context, so a B of a shorter one was refused where a profile of
    the same two models measures at the smaller context."""
    a, b = byte_adapter(tiny_gpt(context=128)), byte_adapter(tiny_gpt(1, context=64))
    r = run(a, Options(rows=2), data=str(byte_store.path), compare=b, progress=False).results
    assert r["length"] == 64
    assert run(a, Options(rows=2), data=str(byte_store.path), progress=False).results["length"] == 128


def test_fewer_rows_than_asked_are_said_on_the_settings_line(byte_store, capsys):
    """A user's default --rows 256 averaged 6 rows (one per held-out document) with no line saying so;
    the settings line now gives the rows read and why they are fewer."""
    a = byte_adapter(tiny_gpt(context=64))
    r = run(a, Options(rows=256), data=str(byte_store.path), progress=False).results
    n_docs = r["documents"]
    assert r["rows"] == n_docs < 256  # one row a document by default
    line = capsys.readouterr().out.splitlines()[0]
    head = f"attention: rows {n_docs} of 64 tokens · documents {n_docs} · note {n_docs} rows, "
    assert line.startswith(head)
    assert line.endswith(
        f"not the 256 asked: {n_docs} documents of 64 tokens or more give 1 row each at most "
        "(`analyze attention --pieces-per-doc 0` cuts as many as fit)"
    )
    run(a, Options(rows=2), data=str(byte_store.path), progress=False)
    assert "note" not in capsys.readouterr().out.splitlines()[0]


def test_an_analysis_result_of_other_settings_or_a_users_file_is_not_replaced_unasked(
    byte_store, tmp_path, capsys
):
    """`analyze attention --out DIR` replaced a user's attention.json, and a result of another model or
    options, silently (it had no --overwrite): eval's rule now holds for it."""
    gpt = _train(byte_store, tmp_path / "gpt", {"name": "clm"})
    other = _train(byte_store, tmp_path / "other", {"name": "clm"})
    out = tmp_path / "attn"
    out.mkdir()
    (out / "attention.json").write_text('{"mine": 1}')
    argv = ["analyze", "attention", "--data", str(byte_store.path), "--out", str(out), "--rows", "2"]
    argv += ["--no-progress"]
    assert main([*argv, "--model", str(gpt)]) == 2
    assert "exists and is not a contextlab evaluation result" in capsys.readouterr().err
    assert (out / "attention.json").read_text() == '{"mine": 1}'
    (out / "attention.json").unlink()
    assert main([*argv, "--model", str(gpt)]) == 0
    assert main([*argv, "--model", str(gpt)]) == 0  # the same again: a reproduction
    before = (out / "attention.json").read_text()
    capsys.readouterr()
    assert main([*argv, "--model", str(gpt), "--length", "16"]) == 2
    assert "holds an attention result of other settings (--length 0 -> 16)" in capsys.readouterr().err
    assert main([*argv, "--model", str(other)]) == 2
    assert "holds a result of other models (--model " in capsys.readouterr().err
    assert (out / "attention.json").read_text() == before
    assert main([*argv, "--model", str(other), "--overwrite"]) == 0


def test_one_row_from_one_document_is_said_in_the_singular(capsys):
    """'1 rows, not --rows 256: 1 document of 64 tokens or more give 1 row each at most'."""
    from types import SimpleNamespace

    from contextlab.analysis.attention import announce_rows

    rows = SimpleNamespace(tokens=np.zeros((1, 64), np.int64), docs=np.zeros(1, np.int64), data={})
    announce_rows(rows, Options(rows=256, pieces_per_doc=1), True)
    assert (
        capsys.readouterr()
        .out.splitlines()[0]
        .endswith(
            "note 1 row, not the 256 asked: 1 document of 64 tokens or more gives 1 row at most "
            "(`analyze attention --pieces-per-doc 0` cuts as many as fit)"
        )
    )
