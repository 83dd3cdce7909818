"""FLOPs per token against a hand computation, MFU arithmetic, and the measured-peak cache."""

from __future__ import annotations

import json

import pytest
import torch

from contextlab.models import GPT, GPTConfig, size_config
from contextlab.train import flops


def test_flops_per_token_matches_a_hand_computation():
    cfg = GPTConfig(vocab_size=257, n_layer=4, n_head=4, n_embd=256, context=256)  # gelu, no bias
    # one block: qkv 256*768 + proj 256*256 + mlp 256*1024 + 1024*256 + two norm gains 2*256
    block = 196_608 + 65_536 + 262_144 + 262_144 + 512
    n = 4 * block + 256  # + final norm gain
    assert flops.non_embedding_params(cfg) == n == 3_148_032
    lm_head = 256 * 257  # the real vocabulary, not the padded 320
    attention = 12 * 4 * 256 * 256  # 12 * n_layer * n_embd * seq_len
    assert flops.flops_per_token(cfg, 256) == 6 * (n + lm_head) + attention == 22_428_672
    assert flops.flops_per_token(cfg, 256, training=False) == 2 * (n + lm_head) + attention / 3
    assert (
        flops.flops_per_token(cfg, 256, causal_attention_discount=True) == 6 * (n + lm_head) + attention / 2
    )
    # the per-block helper adds up to the same total
    total = 4 * flops.block_flops_per_token(cfg, 256) + 6 * 256 + flops.lm_head_flops_per_token(cfg)
    assert total == flops.flops_per_token(cfg, 256)


@pytest.mark.parametrize("overrides", [{}, {"mlp": "swiglu", "bias": True}, {"tie_embeddings": False}])
def test_parameter_count_agrees_with_the_model(overrides):
    cfg = GPTConfig(vocab_size=100, n_layer=3, n_head=4, n_embd=64, context=32, **overrides)
    assert flops.non_embedding_params(cfg) == GPT(cfg).num_params(non_embedding=True)


def test_extra_flops_hook():
    cfg = size_config("tiny-2x128", vocab_size=257, context=128)
    two_heads = lambda c, T, training=True: (
        2
        * (
            flops.block_flops_per_token(c, T, training=training)
            + flops.lm_head_flops_per_token(c, training=training)
        )
    )
    base = flops.flops_per_token(cfg, 128)
    assert flops.extra_flops_per_token(cfg, 128) == 0.0
    assert flops.flops_per_token(cfg, 128, extra=two_heads) == base + two_heads(cfg, 128)


def test_mfu_arithmetic():
    assert flops.mfu(tokens_per_s=1000, flops_per_token=2e9, peak_flops=4e12) == pytest.approx(0.5)
    # GPT-2 small at 1024 context: the well-known ~0.85 GFLOP/token (6N with N=85.0M, + 6CV + 12LCT)
    cfg = size_config("gpt2-small", vocab_size=50257, context=1024)
    assert flops.flops_per_token(cfg, 1024) == pytest.approx(
        6 * (84_953_856 + 768 * 50257) + 12 * 12 * 768 * 1024
    )


def test_measured_peak_uses_and_fills_the_cache(tmp_path, monkeypatch):
    path = tmp_path / "peak.json"
    monkeypatch.setenv("CONTEXTLAB_PEAK_FILE", str(path))
    assert flops.peak_file() == path
    measured = flops.measured_peak_flops(torch.float32)
    assert measured > 1e9  # any real CPU does more than 1 GFLOP/s
    entries = json.loads(path.read_text())["entries"]
    key = flops.peak_key(torch.float32)
    assert entries[key]["flops"] == measured
    # a cached value is returned as is, without measuring again
    entries[key]["flops"] = 1.25e12
    path.write_text(json.dumps({"format_version": 1, "entries": entries}))
    assert flops.measured_peak_flops(torch.float32) == 1.25e12
    # a lower measurement (say, taken on a busy machine) never replaces a higher one
    flops.write_peak_entries({key: {"flops": 1e9}})
    assert flops.measured_peak_flops(torch.float32) == 1.25e12
    path.write_text("not json")  # a broken cache is re-measured, not an error
    assert flops.measured_peak_flops(torch.float32) > 1e9


def test_the_peak_command_measures_once_into_the_cache_the_trainer_reads(tmp_path, monkeypatch, capsys):
    from contextlab.cli import main

    path = tmp_path / "peak.json"
    monkeypatch.setenv("CONTEXTLAB_PEAK_FILE", str(path))
    assert flops.cached_peak_flops(torch.float32) == 0.0 and not path.exists()  # reading writes nothing
    threads = torch.get_num_threads()
    try:
        assert (
            main(["peak", "--device", "cpu", "--dtype", "fp32", "--seconds", "0.05", "--threads", "1"]) == 0
        )
    finally:
        torch.set_num_threads(threads)
    key = flops.peak_key(torch.float32, "cpu", threads=1)
    measured = json.loads(path.read_text())["entries"][key]["flops"]
    assert measured > 1e9 and f"{key}: " in capsys.readouterr().out
    torch.set_num_threads(1)
    try:
        assert flops.cached_peak_flops(torch.float32) == measured
    finally:
        torch.set_num_threads(threads)


def test_a_peak_cache_that_cannot_be_written_names_the_variable_that_moves_it(monkeypatch, capsys):
    """With an unwritable home folder ``peak`` said only "permission denied for /nonexistent"."""
    from contextlab.cli import main

    def denied(path, obj):
        raise PermissionError(13, "Permission denied", "/nonexistent")

    monkeypatch.delenv("CONTEXTLAB_PEAK_FILE", raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")
    monkeypatch.setattr(flops, "atomic_write_json", denied)
    threads = torch.get_num_threads()
    try:
        argv = ["peak", "--device", "cpu", "--dtype", "fp32", "--seconds", "0.01", "--threads", "1"]
        assert main(argv) == 2
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "permission denied for /nonexistent" in err[0], err
    assert "set CONTEXTLAB_PEAK_FILE to a file in a folder you can write" in err[0], err
