"""A cached forward equals the full-sequence forward: GPT, ContextLM, MTP; padding; truncation."""

from __future__ import annotations

import pytest
import torch

from contextlab.models.contextlm import ContextLM, ContextLMConfig
from contextlab.models.gpt import GPT, GPTConfig
from contextlab.models.kv_cache import KVCache
from contextlab.models.mtp import MTPConfig, MTPModel

V = 257
SHAPE = dict(vocab_size=V, n_layer=2, n_head=2, n_embd=32, context=32)


def contextlm(chunk: int, fusion: str, encoder_layers: int = 0) -> ContextLM:
    torch.manual_seed(chunk)
    model = ContextLM(
        ContextLMConfig(**SHAPE, chunk_size=chunk, fusion=fusion, encoder_layers=encoder_layers)
    )
    with torch.no_grad():  # the zero-initialised gate would hide the context pathway
        for p in model.fusion.parameters():
            p.normal_(0.0, 1.0)
    return model.eval()


def models():
    torch.manual_seed(0)
    yield "gpt", GPT(GPTConfig(**SHAPE, mlp="swiglu")).eval()
    for chunk, fusion, enc in ((1, "plain", 0), (3, "gated", 1), (4, "normalised", 0), (5, "gated", 0)):
        yield f"contextlm-w{chunk}-{fusion}-enc{enc}", contextlm(chunk, fusion, enc)
    torch.manual_seed(1)
    yield "mtp", MTPModel(MTPConfig(**{**SHAPE, "n_layer": 3}, n_future=3)).eval()


MODELS = dict(models())


def left_padded(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    P = max(len(r) for r in rows)
    idx = torch.full((len(rows), P), 7, dtype=torch.long)  # pad id 7: a real id, so it must be masked
    real = torch.zeros(len(rows), P, dtype=torch.bool)
    for b, r in enumerate(rows):
        idx[b, P - len(r) :], real[b, P - len(r) :] = r, True
    return idx, real


@pytest.mark.parametrize("name", list(MODELS))
@torch.no_grad()
def test_cached_pieces_equal_the_full_forward(name):
    """Prefill, several tokens at once, then one at a time: the logits of the full sequence."""
    model = MODELS[name]
    idx = torch.randint(0, V, (3, 19))
    full = model(idx).logits
    cache = model.new_cache(3, 4)  # small capacity: the buffers grow on the way
    pieces = [(0, 6), (6, 7), (7, 10), (10, 15), *((t, t + 1) for t in range(15, 19))]
    got = torch.cat([model(idx[:, a:b], cache=cache).logits for a, b in pieces], dim=1)
    torch.testing.assert_close(got, full, atol=1e-5, rtol=0)
    assert cache.lengths == [19, 19, 19]


@pytest.mark.parametrize("name", list(MODELS))
@torch.no_grad()
def test_left_padded_rows_equal_each_row_alone(name):
    """Rows of uneven lengths, left-padded: pads are never pooled or attended, chunks are the row's own."""
    model = MODELS[name]
    lengths = [13, 6, 10, 1]
    seqs = [torch.randint(0, V, (n + 5,)) for n in lengths]
    idx, real = left_padded([s[:n] for s, n in zip(seqs, lengths)])
    cache = model.new_cache(len(lengths), 32)
    prefill = model(idx, cache=cache, real=real).logits  # (B, P, V)
    after = [
        model(torch.stack([s[n + i] for s, n in zip(seqs, lengths)])[:, None], cache=cache).logits
        for i in range(5)
    ]
    after = torch.cat(after, dim=1)  # (B, 5, V)
    P = idx.size(1)
    for b, (s, n) in enumerate(zip(seqs, lengths)):
        alone = model(s[None]).logits[0]  # (n + 5, V)
        torch.testing.assert_close(prefill[b, P - n :], alone[:n], atol=1e-5, rtol=0)
        torch.testing.assert_close(after[b], alone[n:], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", list(MODELS))
@torch.no_grad()
def test_truncate_and_reappend_equals_never_appending(name):
    """Drafts appended, rolled back per row, and other tokens appended: as if the drafts never were."""
    model = MODELS[name]
    idx = torch.randint(0, V, (2, 14))
    cache = model.new_cache(2, 16)
    model(idx[:, :9], cache=cache)
    model(torch.randint(0, V, (2, 4)), cache=cache)  # 4 drafts per row
    cache.truncate([9, 9])
    assert cache.lengths == [9, 9]
    got = model(idx[:, 9:], cache=cache).logits
    torch.testing.assert_close(got, model(idx).logits[:, 9:], atol=1e-5, rtol=0)
    drafts = torch.randint(0, V, (2, 3))  # rows rolled back by different amounts
    model(drafts, cache=cache)
    cache.truncate([15, 14])  # row 0 keeps its first draft, row 1 none
    assert cache.lengths == [15, 14]
    nxt = torch.randint(0, V, (2, 1))
    got = model(nxt, cache=cache).logits[:, 0]  # (B, V)
    rows = [torch.cat([idx[0], drafts[0, :1], nxt[0]]), torch.cat([idx[1], nxt[1]])]
    for b, seq in enumerate(rows):
        torch.testing.assert_close(got[b], model(seq[None]).logits[0, -1], atol=1e-5, rtol=0)


@torch.no_grad()
def test_mtp_future_logits_are_every_heads_logits():
    model = MODELS["mtp"]
    idx = torch.randint(0, V, (2, 11))
    heads = torch.stack(model.all_logits(idx), dim=2)  # (B, T, n, V)
    cache = model.new_cache(2, 11, heads=True)
    first = model.future_logits(idx[:, :8], cache)  # (B, n, V) at position 7
    torch.testing.assert_close(first, heads[:, 7], atol=1e-5, rtol=0)
    every = model.future_logits(idx[:, 8:], cache, last_only=False)  # (B, 3, n, V)
    torch.testing.assert_close(every, heads[:, 8:], atol=1e-5, rtol=0)
    cache.truncate(9)  # the heads' layers roll back with the trunk's
    torch.testing.assert_close(model.future_logits(idx[:, 9:], cache), heads[:, 10], atol=1e-5, rtol=0)
    plain = model.new_cache(2, 11)  # heads=False: the next-token GPT only
    torch.testing.assert_close(model(idx, cache=plain).logits, heads[:, :, 0], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="heads=True"):
        model.future_logits(idx, plain)


def test_cache_step_masks_and_positions():
    cache = KVCache(1, 2, 8)
    real = torch.tensor([[False, True, True], [True, True, True]])
    step = cache.step(3, real)
    assert step.positions.tolist() == [[0, 0, 1], [0, 1, 2]] and cache.lengths == [2, 3]
    assert step.columns.tolist() == [[8, 0, 1], [0, 1, 2]]  # the pad writes the spare column
    assert step.mask[0, 0].tolist() == [[True, False, False], [True, False, False], [True, True, False]]
    step = cache.step(1)  # rows of different lengths: a mask per row
    assert step.positions.tolist() == [[2], [3]] and step.mask[:, 0, 0].tolist() == [
        [True, True, True, False],
        [True, True, True, True],
    ]
    cache.truncate(2)
    assert cache.lengths == [2, 2] and cache.step(2).mask.tolist() == [[True, True, True, False], [True] * 4]
