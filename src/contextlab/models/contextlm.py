"""ContextLM: a GPT whose token decoder also sees a predicted embedding of the next chunk.

The architecture of "Context-level language modeling by learning predictive context
embeddings" (seed ``contextlm-next-context-prediction.txt``), built from the GPT's parts:

    tokens ─embed─▶ encoder blocks (default 0) ─▶ h (B, T, C)
      h ─mean-pool chunks of w─▶ c_0..c_{n-1} (n = T // w complete chunks)
      c ─causal predictor (default 2 blocks, RoPE at each chunk's first-token position)─▶ ĉ_1..ĉ_n
      ĉ^b = (c_init × (w-1), ĉ_1 × w, ĉ_2 × w, ..., ĉ_n × the rest),  c_init = h_0
      decoder blocks (default all) on fuse(h, ĉ^b) ─▶ final norm ─▶ logits

Alignment (the seed's broadcast): position t receives ĉ_j with j = (t + 1) // w, which the
predictor computed from chunks 0..j-1, the last of which ends at position j*w - 1 <= t.
So no future token reaches position t (proved with gradients in the tests), and a length T
not divisible by w needs nothing special: the last, incomplete chunk is never pooled.

Fusion, the trade-off (see docs/objectives.md for the measured comparison): the seed adds
ĉ^b to h. At small scale that plain sum lets the predictor's residual stream grow far
above the token embeddings and drown them, and training stalls (measured in docs/objectives.md,
"Fusion comparison"). Three modes:

- ``plain``: h + ĉ^b, exactly the seed.
- ``gated`` (default): h + g ⊙ ĉ^b with a per-channel gate g initialised to zero, so the
  model starts exactly as the GPT and learns how much context to let in.
- ``normalised``: h + a ⊙ RMSNorm(ĉ^b) with a per-channel gain a initialised to the
  embedding init scale (``init_std``), so the context enters at the token embeddings' size.

Cached generation: ``new_cache`` attaches a ``ContextCache`` (``models/contextlm_cache.py``) to
the token KV cache; pooling and the predictor then advance incrementally as each row's chunks
complete, with the same alignment, and left padding is never pooled.

There is no extra loss: the seed trains with next-token cross-entropy only, and the
predictor learns from the error signals of the w positions its prediction is added to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn as nn
from torch import Tensor

from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.models.contextlm_cache import ContextCache, context_cache
from contextlab.models.gpt import GPT, Block, GPTConfig, TrunkState
from contextlab.models.kv_cache import KVCache
from contextlab.models.masks import AttentionMask

FUSIONS = ("plain", "gated", "normalised")


@dataclass
class ContextLMOptions:
    """What a ContextLM adds to the GPT shape: the one declaration of its options.

    ``ContextLMConfig`` extends the GPT config with these fields; the ``contextlm`` objective's
    ``Options`` (``[objective] options = {...}`` in a run config) is this class.
    """

    chunk_size: int = opt(4, "w: tokens per context chunk")
    predictor_layers: int = opt(2, "transformer blocks of the causal context predictor")
    encoder_layers: int = opt(0, "of model.n_layer blocks, how many encode tokens before the fusion")
    fusion: Literal["plain", "gated", "normalised"] = opt(
        "gated",
        "plain (h + c, the seed), gated (zero-initialised per-channel gate) or "
        "normalised (RMSNorm(c) times a small learnt gain)",
    )

    def __post_init__(self):
        if self.chunk_size < 1:
            raise UserError(f"contextlm chunk_size must be >= 1, got {self.chunk_size}")
        if self.predictor_layers < 1:
            raise UserError(f"contextlm predictor_layers must be >= 1, got {self.predictor_layers}")
        if self.fusion not in FUSIONS:
            raise UserError(f"contextlm fusion {self.fusion!r} is unknown; use one of {', '.join(FUSIONS)}")


@dataclass
class ContextLMConfig(ContextLMOptions, GPTConfig):
    """A ContextLM's config: the GPT shape plus ContextLMOptions (fields in that order)."""

    def __post_init__(self):
        GPTConfig.__post_init__(self)
        ContextLMOptions.__post_init__(self)
        if not 0 <= self.encoder_layers < self.n_layer:
            raise UserError(
                f"contextlm encoder_layers must be in [0, n_layer={self.n_layer}), "
                f"got {self.encoder_layers}: the decoder needs at least one block"
            )


class ContextFusion(nn.Module):
    """h (B, T, C) + the broadcast predicted context (B, T, C), in one of FUSIONS."""

    def __init__(self, config: ContextLMConfig):
        super().__init__()
        self.mode = config.fusion
        C = config.n_embd
        if self.mode == "gated":
            self.gate = nn.Parameter(torch.zeros(C))
        elif self.mode == "normalised":
            self.norm = nn.RMSNorm(C, eps=config.norm_eps)
            self.gain = nn.Parameter(torch.full((C,), config.init_std))

    def forward(self, h: Tensor, context: Tensor) -> Tensor:
        if self.mode == "gated":
            return h + self.gate.to(context.dtype) * context
        if self.mode == "normalised":
            return h + self.gain.to(context.dtype) * self.norm(context)
        return h + context


class ContextLM(GPT):
    """GPT blocks split into encoder/decoder, plus a causal context predictor and a fusion.

    Same forward signature and output as GPT; ``n_layer`` counts encoder + decoder blocks
    (the predictor's blocks come on top, as in the seed's parameter-matched comparison).
    """

    def __init__(self, config: ContextLMConfig):
        super().__init__(config)
        self.predictor = nn.ModuleList([Block(config) for _ in range(config.predictor_layers)])
        self.fusion = ContextFusion(config)
        for block in self.predictor:
            block.apply(self._init_module)

    # --- the context pathway ------------------------------------------------------------

    def predict_contexts(
        self, h: Tensor, *, rope: tuple[Tensor, Tensor] | None = None, attn_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Encoder output h (B, T, C) -> (chunk contexts c (B, n, C), predictions ĉ_1..ĉ_n (B, n, C)).

        c_k is the mean of h over positions k*w .. k*w+w-1; ĉ_{k+1} = predictor(c_0..c_k).
        rope: the decoder's (cos, sin), ([B,] T, hs); the predictor uses each chunk's first row.
        attn_mask: the token mask, causal part included: an AttentionMask, or a dense ([B,] 1, T, T)
            mask; chunks use it at their ends.
        """
        B, T, C = h.shape
        w = self.config.chunk_size
        n = T // w
        c = h[:, : n * w].reshape(B, n, w, C).mean(dim=2)  # (B, n, C)
        if n == 0:  # T < w: every position gets c_init
            return c, c
        if rope is None:
            rope = self.rope(T, h.device)
        # ([B,] n, hs) each: the rope row of each chunk's first token
        chunk_rope = tuple(t[..., : n * w : w, :] for t in rope)
        chunk_mask = None
        if attn_mask is not None:
            ends = torch.arange(w - 1, n * w, w, device=h.device)  # (n,) last position of each chunk
            if isinstance(attn_mask, AttentionMask):
                chunk_mask = attn_mask.select(ends).resolve(h.device)
            else:
                chunk_mask = attn_mask[..., ends, :][..., :, ends]  # ([B,] 1, n, n)
        x = c
        for block in self.predictor:
            x = block(x, chunk_rope, chunk_mask, chunk_mask is None)  # (B, n, C)
        return c, x

    def broadcast_contexts(self, h: Tensor, predicted: Tensor) -> Tensor:
        """(c_init = h_0) × (w-1), then each ĉ_j × w, cut to T: (B, T, C); position t gets ĉ_{(t+1)//w}."""
        B, T, C = h.shape
        w = self.config.chunk_size
        c_init = h[:, :1].expand(B, w - 1, C)  # (B, w-1, C)
        repeated = predicted.repeat_interleave(w, dim=1)  # (B, n*w, C)
        return torch.cat([c_init, repeated], dim=1)[:, :T]  # w-1 + n*w >= T

    def context_for(self, h: Tensor, *, rope=None, attn_mask: Tensor | None = None) -> Tensor:
        """The broadcast predicted context ĉ^b (B, T, C) for encoder output h (before fusion)."""
        _, predicted = self.predict_contexts(h, rope=rope, attn_mask=attn_mask)
        return self.broadcast_contexts(h, predicted)

    # --- the hooks of GPT's forward ---------------------------------------------------------

    def prepare(
        self, idx: Tensor, attn_mask=None, is_causal: bool = True, position_ids=None, cache=None, real=None
    ) -> TrunkState:
        """As GPT.prepare; refuses a non-causal call (the predictor must stay causal)."""
        if not is_causal and attn_mask is None:
            raise UserError("ContextLM is autoregressive: call it with is_causal=True or a causal attn_mask")
        return super().prepare(idx, attn_mask, is_causal, position_ids, cache, real)

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        """A token KV cache with the context pathway's incremental state attached."""
        cache = super().new_cache(batch, capacity)
        c = self.config
        cache.children.append(ContextCache(c.chunk_size, c.predictor_layers, batch, capacity, cache.device))
        return cache

    def mix(self, i: int, x: Tensor, state: TrunkState) -> Tensor:
        """After block ``encoder_layers`` (0 = the embeddings), fuse the predicted context into x."""
        if i != self.config.encoder_layers:
            return x
        if state.kv is not None:  # a cached forward: advance the chunk state by these tokens
            chunks = context_cache(state.kv.cache)
            chunks.store(x, state.kv)
            chunks.advance(state.kv, self.rope(state.kv.span, x.device), self.predictor)
            return self.fusion(x, chunks.broadcast(state.kv))
        context = self.context_for(x, rope=state.rope, attn_mask=predictor_mask(state, x.shape[1], x.device))
        return self.fusion(x, context)


def predictor_mask(state: TrunkState, T: int, device: torch.device):
    """The token mask the predictor reads at chunk ends: always causal, whatever the decoder gets.

    None = plain causal; an AttentionMask as given (``select`` keeps its documents and makes it
    causal); a tensor mask as the decoder gets it (bool, or additive float), restricted to k <= q.
    """
    if state.given_mask is None or isinstance(state.given_mask, AttentionMask):
        return state.given_mask
    dense = state.attn_mask  # the caller's tensor mask, its causal part added when is_causal
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    return (dense if dense.dtype == torch.bool else dense != float("-inf")) & causal
