"""Described attention masks: the FlexAttention block mask and the dense mask are the same function.

The tile classification is checked exhaustively against the dense mask (no kernel involved);
FlexAttention itself runs forward on the CPU (compiled) and, on a GPU machine, forward and
backward on CUDA, against SDPA with the dense mask.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from contextlab.errors import UserError
from contextlab.models.gpt import GPT, GPTConfig
from contextlab.models.masks import BLOCK, AttentionMask, flex_attention

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def segments(B: int, T: int, n_docs: int, seed: int, monotone: bool = True) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, n_docs, (B, T), generator=g)
    return torch.sort(ids, dim=1).values if monotone else ids


def masks(B: int, T: int, seed: int = 0) -> list[AttentionMask]:
    seg = segments(B, T, 4, seed)
    pre = torch.randint(1, T, (B,), generator=torch.Generator().manual_seed(seed + 1))
    return [
        AttentionMask(T, segments=seg),
        AttentionMask(T, prefix=pre),
        AttentionMask(T, segments=seg, prefix=pre),
        AttentionMask(T, segments=seg, causal=False),
        AttentionMask(T, segments=segments(B, T, 3, seed + 2, monotone=False)),
    ]


def tiles(kv_num: torch.Tensor, kv_idx: torch.Tensor, n: int) -> torch.Tensor:
    """(B, 1, n) counts + (B, 1, n, n) indices -> (B, n, n) bool tile sets."""
    B = kv_num.shape[0]
    out = torch.zeros(B, n, n, dtype=torch.bool)
    for b in range(B):
        for i in range(n):
            out[b, i, kv_idx[b, 0, i, : kv_num[b, 0, i]].long()] = True
    return out


@pytest.mark.parametrize("T", [128, 200, 384, 500])
def test_block_mask_tiles_cover_the_dense_mask_exactly(T):
    n = -(-T // BLOCK)
    for which, m in enumerate(masks(3, T, seed=T)):
        bm = m.block_mask()
        partial = tiles(bm.kv_num_blocks, bm.kv_indices, n)
        full = tiles(bm.full_kv_num_blocks, bm.full_kv_indices, n)
        dense = torch.zeros(3, n * BLOCK, n * BLOCK, dtype=torch.bool)
        dense[:, :T, :T] = m.dense()[:, 0]
        valid = torch.zeros(n * BLOCK, n * BLOCK, dtype=torch.bool)
        valid[:T, :T] = True
        per_tile = dense.view(3, n, BLOCK, n, BLOCK).transpose(2, 3)  # (B, n, n, BLOCK, BLOCK)
        ok = valid.view(n, BLOCK, n, BLOCK).transpose(1, 2)
        some = per_tile.any(-1).any(-1)
        every = (per_tile | ~ok).all(-1).all(-1)
        assert not (partial & full).any()
        assert torch.equal(some & ~(partial | full), torch.zeros_like(some))  # no allowed pair is skipped
        assert (every | ~full).all()  # a full tile (no mask evaluated) has every pair allowed
        if which < 2 and T % BLOCK == 0:  # documents in order, or a prefix: the classification is exact
            assert torch.equal(full, every & some) and torch.equal(partial, some & ~every)


def test_causal_document_tiles_skip_other_documents():
    """Two documents of 256: the tiles of document 1 x document 0 are skipped, the rest of the lower
    half is full."""
    seg = torch.tensor([[0] * 256 + [1] * 256])
    bm = AttentionMask(512, segments=seg).block_mask()
    partial = tiles(bm.kv_num_blocks, bm.kv_indices, 4)[0]
    full = tiles(bm.full_kv_num_blocks, bm.full_kv_indices, 4)[0]
    assert partial.int().tolist() == [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]  # the diagonal
    assert full.int().tolist() == [[0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0]]


def test_flex_forward_on_cpu_equals_sdpa_with_the_dense_mask():
    torch.manual_seed(0)
    for m in masks(2, 200, seed=5):
        m = AttentionMask(m.length, m.segments, m.prefix, m.causal, backend="flex")
        q, k, v = (torch.randn(2, 2, 200, 16) for _ in range(3))
        with torch.no_grad():
            got = flex_attention(q, k, v, m.resolve(q.device))
            want = F.scaled_dot_product_attention(q, k, v, attn_mask=m.dense())
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_flex_refuses_a_cpu_backward_with_a_clear_error():
    m = AttentionMask(8, segments=torch.zeros(1, 8, dtype=torch.long), backend="flex")
    with pytest.raises(UserError, match="no CPU backward"):
        m.resolve(torch.device("cpu"))
    with torch.no_grad():
        assert m.resolve(torch.device("cpu")) is not None
    assert m.backend == "flex" and AttentionMask(8).resolve(torch.device("cpu")).shape == (1, 1, 8, 8)


@pytest.mark.parametrize("device", DEVICES)
def test_gpt_with_a_flex_mask_equals_the_dense_mask(device):
    """The whole model: logits (and on CUDA the gradients) with FlexAttention = with the dense mask."""
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=97, n_layer=2, n_head=2, n_embd=64, context=256)
    model = GPT(cfg).to(device)
    idx = torch.randint(0, 97, (2, 256), device=device)
    grad = device != "cpu"  # FlexAttention has no CPU backward
    for m in masks(2, 256, seed=11):
        results = []
        for backend in ("flex", "dense"):
            mask = AttentionMask(
                256,
                *(t.to(device) if t is not None else None for t in (m.segments, m.prefix)),
                causal=m.causal,
                backend=backend,
            )
            model.zero_grad(set_to_none=True)
            with torch.set_grad_enabled(grad):
                logits = model(idx, attn_mask=mask, is_causal=False).logits
                if grad:
                    logits.float().square().mean().backward()
            results.append((logits.detach(), [p.grad.clone() for p in model.parameters()] if grad else []))
        (a, ga), (b, gb) = results
        torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-4)
        for x, y in zip(ga, gb):
            torch.testing.assert_close(x, y, atol=2e-4, rtol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_gpt_with_a_flex_mask_equals_the_dense_mask(device):
    """train.compile: FlexAttention inside a compiled model (strided q, k, v once gave wrong outputs
    there)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=97, n_layer=2, n_head=2, n_embd=64, context=256)).to(device)
    compiled = torch.compile(model)
    idx = torch.randint(0, 97, (2, 256), device=device)
    for m in masks(2, 256, seed=3)[::2]:  # documents; documents with a prefix; documents in any order
        parts = [t.to(device) if t is not None else None for t in (m.segments, m.prefix)]
        with torch.set_grad_enabled(device != "cpu"):
            want = model(
                idx, attn_mask=AttentionMask(256, *parts, causal=m.causal, backend="dense"), is_causal=False
            ).logits
            got = compiled(
                idx, attn_mask=AttentionMask(256, *parts, causal=m.causal, backend="flex"), is_causal=False
            ).logits
        torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-4)
