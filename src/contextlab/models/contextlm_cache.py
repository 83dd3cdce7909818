"""A ContextLM's incremental state beside its token KV cache: encoder outputs, chunk predictions.

The context pathway of ``models/contextlm.py`` advances as chunks complete: a forward that
appends tokens to a row stores their encoder outputs h at their positions; every chunk of w
tokens that this completes (counted in the row's own positions, so left padding never
shifts a chunk boundary and is never pooled) is mean-pooled and run through the predictor,
which has its own ``KVCache`` over chunks (RoPE at each chunk's first-token position, as in the
full forward); the prediction ĉ_{k+1} made at chunk k is kept. A new token at position t then
receives ĉ_{(t+1)//w} (column 0 holds c_init = h_0), the broadcast alignment of the full forward.

Trade-off: the encoder outputs of every position are kept (B x T x C, as one more layer of
cache) so that a truncated row re-pools a chunk it completes again without recomputation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from contextlab.models.attention import LayerKV
from contextlab.models.kv_cache import CacheStep, KVCache


class ContextCache:
    """Encoder outputs (B, capacity + 1, C), predictions (B, chunks + 2, C) and the predictor's KVCache.

    The last column of each buffer takes what pads write; it is never read for a real token.
    """

    def __init__(self, chunk_size: int, predictor_layers: int, batch: int, capacity: int, device):
        self.w = chunk_size
        self.h: Tensor | None = None  # (B, capacity + 1, C) encoder output at each position
        self.preds: Tensor | None = None  # (B, capacity // w + 2, C): [c_init, ĉ_1, ĉ_2, ..., spare]
        self.predictor = KVCache(predictor_layers, batch, capacity // chunk_size + 1, device)

    def truncate(self, lengths: list[int]) -> None:
        """Follow the token cache's rows: a row of L tokens keeps its L // w complete chunks."""
        self.predictor.truncate([n // self.w for n in lengths])

    def _buffers(self, x: Tensor, span: int) -> None:
        """Allocate (or grow) h and preds for ``span`` positions, in x's dtype."""
        B, _, C = x.shape
        if self.h is None or self.h.size(1) <= span or self.h.dtype != x.dtype:
            cols = max(span, 1) * 2 if self.h is not None else max(span, self.predictor.capacity * self.w)
            h, preds = x.new_zeros(B, cols + 1, C), x.new_zeros(B, cols // self.w + 2, C)
            if self.h is not None and self.h.dtype == x.dtype:
                h[:, : self.h.size(1) - 1] = self.h[:, :-1]
                preds[:, : self.preds.size(1) - 1] = self.preds[:, :-1]
            self.h, self.preds = h, preds

    def store(self, x: Tensor, step: CacheStep) -> None:
        """Keep the encoder outputs x (B, t, C) of a step at their positions (pads in the spare column)."""
        self._buffers(x, step.span)
        if step.columns is None:
            self.h[:, step.start : step.start + x.size(1)] = x
        else:
            spare = self.h.size(1) - 1
            cols = torch.where(step.columns >= step.cache.capacity, spare, step.columns)  # (B, t)
            self.h.scatter_(1, cols[..., None].expand_as(x), x)
        self.preds[:, 0] = self.h[:, 0]  # c_init = h_0 of every row

    def completed(self, step: CacheStep) -> tuple[int, Tensor | None]:
        """(m, real (B, m) or None): the most chunks a row completes in this step, and which rows do."""
        done = [b // self.w - a // self.w for a, b in zip(step.old, step.new)]
        m = max(done)
        if m == 0 or len(set(done)) == 1:
            return m, None
        return m, torch.arange(m, device=self.h.device)[None] < torch.tensor(done, device=self.h.device)[
            :, None
        ]

    def advance(self, step: CacheStep, rope: tuple[Tensor, Tensor], predictor) -> None:
        """Pool and predict every chunk this step completes; rope: the (cos, sin) tables (L, hs)."""
        m, real = self.completed(step)
        if m == 0:
            return
        pstep = self.predictor.step(m, real)
        ids = pstep.positions  # (B, m) chunk indices (0 for a row's unused slots)
        B, w, C = ids.size(0), self.w, self.h.size(-1)
        tokens = (ids[:, :, None] * w + torch.arange(w, device=ids.device)).reshape(B, m * w)
        c = self.h.gather(1, tokens[..., None].expand(B, m * w, C)).view(B, m, w, C).mean(dim=2)  # (B, m, C)
        chunk_rope = (rope[0][ids * w], rope[1][ids * w])  # (B, m, hs) each: a chunk's first position
        for i, block in enumerate(predictor):
            c = block(c, chunk_rope, pstep.mask, False, LayerKV(pstep, i))  # (B, m, C)
        target = ids + 1 if real is None else torch.where(real, ids + 1, self.preds.size(1) - 1)
        self.preds.scatter_(1, target[..., None].expand(B, m, C), c.to(self.preds.dtype))

    def broadcast(self, step: CacheStep) -> Tensor:
        """ĉ_{(t+1)//w} for each new token at position t: (B, t, C)."""
        j = (step.positions + 1) // self.w  # (B, t)
        j = j.clamp(max=self.preds.size(1) - 1)
        return self.preds.gather(1, j[..., None].expand(*j.shape, self.preds.size(-1)))


def context_cache(cache: KVCache) -> ContextCache:
    """The ContextCache a ContextLM attached to its token cache (``ContextLM.new_cache``)."""
    for child in cache.children:
        if isinstance(child, ContextCache):
            return child
    raise ValueError("this KV cache was not made by ContextLM.new_cache")
