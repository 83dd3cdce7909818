"""Causal self-attention of the GPT: the one place q, k and v are made, with or without a KV cache.

``Attention.heads`` turns the residual stream into q, k, v with RoPE (the forward and the
attention analysis both call it). ``Attention.forward`` runs them through
``models/kernels.py``'s ``attention`` (SDPA). With a ``CacheStep`` (``models/kv_cache.py``) the new
keys and values are stored in the cache and the queries attend to the row's whole cached
prefix under the step's mask, which is exactly the full-sequence causal attention; without
one, the training path is unchanged (``is_causal=True`` or the given mask).

Trade-off: the cache is an optional argument threaded through the block (``kv``), not a
module state, so a model holds no generation state and training never sees the cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch.nn as nn
from torch import Tensor

from contextlab.models.kernels import attention
from contextlab.models.rope import apply_rope

if TYPE_CHECKING:
    from contextlab.models.kv_cache import CacheStep


class LayerKV:
    """One layer's view of a cached forward: ``CacheStep.update`` at a fixed layer index."""

    __slots__ = ("layer", "step")

    def __init__(self, step: CacheStep, layer: int):
        self.step, self.layer = step, layer

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return self.step.update(self.layer, k, v)

    @property
    def mask(self) -> Tensor | None:
        return self.step.mask

    @property
    def causal(self) -> bool:
        return self.step.causal


class Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head, self.head_dim = config.n_head, config.head_dim
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # fused q, k, v
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.proj.residual_proj = True  # scaled init, see GPT._init_module
        self.dropout = config.dropout

    def heads(self, x: Tensor, rope: tuple[Tensor, Tensor] | None) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, T, C) -> q, k, v (B, nh, T, hs), RoPE on q and k: for the forward and attention analysis."""
        B, T, _ = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.n_head, self.head_dim)  # (B, T, 3, nh, hs)
        if rope is not None:
            cos, sin = (t.to(qkv.dtype)[..., None, None, :] for t in rope)  # ([B,] T, 1, 1, hs)
            qk = apply_rope(qkv[:, :, :2], cos, sin)  # q and k in one go: (B, T, 2, nh, hs)
            q, k = qk.unbind(2)
        else:
            q, k = qkv[:, :, 0], qkv[:, :, 1]
        v = qkv[:, :, 2]  # (B, T, nh, hs)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, nh, T, hs)

    def forward(
        self,
        x: Tensor,
        rope: tuple[Tensor, Tensor] | None,
        attn_mask: Tensor | None,
        is_causal: bool,
        kv: LayerKV | None = None,
    ) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.heads(x, rope)  # (B, nh, T, hs) strided views
        if kv is not None:  # the cached prefix plus these tokens: (B, nh, S, hs), the step's mask
            k, v = kv.update(k, v)
            attn_mask, is_causal = kv.mask, kv.causal
        y = attention(
            q,
            k,
            v,
            attn_mask=attn_mask,
            is_causal=is_causal and attn_mask is None,  # a given mask already holds the causal part
            dropout_p=self.dropout if self.training else 0.0,
        )  # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, C)  # re-assemble heads; no copy when SDPA wrote (B, T, nh, hs)
        return self.proj(y)
