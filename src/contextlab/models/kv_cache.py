"""A key/value cache for incremental forwards of contextlab's models (generation, drafting).

Each row of a batch keeps its own length: the keys and values of its token at position p sit
in column p of a preallocated (B, nh, capacity + 1, hs) buffer per layer, whatever padding the
row's prompt had. A forward appends t tokens per row (one while decoding, a whole prompt at
prefill, k drafts at once while verifying); ``real`` (B, t) marks which inputs are tokens and
which are left padding: a pad gets no position, its k/v go to the spare last column and no
query ever reads them. A query at position p attends to columns 0..p of its row, so a cached
forward computes exactly the attention of the full-sequence forward. ``truncate`` rolls rows
back by lowering their lengths (nothing is copied; later appends overwrite the columns).

Trade-offs: lengths live on the host (plain ints), so a step needs no device sync to size its
views and masks; a batch whose rows all have the same length and no padding (batch 1, equal
prompts) writes with a slice and attends with no mask at all, one token at a time or, for the
first step (a prefill), with SDPA's causal kernel (SDPA's fastest paths). Rows of different
lengths pay a scatter and a boolean mask. The buffers are allocated at the first write (so they
take the compute dtype, e.g. bf16 under autocast) and doubled when a row outgrows them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class CacheStep:
    """Where one forward of t tokens per row goes in a KVCache, computed once for every layer."""

    cache: KVCache
    positions: Tensor  # (B, t) long: each input's position in its row (0 for pads)
    columns: Tensor | None  # (B, t) long: the column each input's k/v is written to; None = slice
    start: int  # with columns None: the common length before this step (written at start..start+t)
    span: int  # S: columns 0..S-1 are read (the longest row after this step)
    mask: Tensor | None  # bool (B, 1, t, S) or (t, S), True = may attend; None = every column or causal
    old: list[int]  # row lengths before this step
    new: list[int]  # row lengths after it
    causal: bool = False  # a first step of rows in step: plain causal attention (SDPA's causal kernel)

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new k, v (B, nh, t, hs) of ``layer``; the row's keys and values (B, nh, S, hs)."""
        K, V = self.cache.buffers(layer, k)
        if self.columns is None:
            K[:, :, self.start : self.start + k.size(2)] = k
            V[:, :, self.start : self.start + k.size(2)] = v
        else:
            B, nh, t, hs = k.shape
            index = self.columns[:, None, :, None].expand(B, nh, t, hs)
            K.scatter_(2, index, k.to(K.dtype))
            V.scatter_(2, index, v.to(V.dtype))
        return K[:, :, : self.span], V[:, :, : self.span]


class KVCache:
    """Keys and values of ``n_layer`` attention layers for ``batch`` rows (see the module docstring).

    ``children`` are caches that follow this one's rows (a ContextLM's predictor state): they
    are truncated with it.
    """

    def __init__(self, n_layer: int, batch: int, capacity: int, device: torch.device | str = "cpu"):
        self.n_layer, self.batch = n_layer, batch
        self.capacity = max(int(capacity), 1)
        self.device = torch.device(device)
        self.lengths = [0] * batch  # tokens held per row
        self.k: list[Tensor | None] = [None] * n_layer  # (B, nh, capacity + 1, hs) each
        self.v: list[Tensor | None] = [None] * n_layer
        self.children: list = []
        self.outputs: dict = {}  # what a variant's forward leaves for its caller (MTP's extra heads)

    def buffers(self, layer: int, like: Tensor) -> tuple[Tensor, Tensor]:
        """The layer's (K, V) buffers, allocated at the first write in ``like``'s dtype."""
        if self.k[layer] is None or self.k[layer].dtype != like.dtype:
            B, nh, _, hs = like.shape
            shape = (B, nh, self.capacity + 1, hs)  # the last column takes the pads' k/v
            self.k[layer] = torch.zeros(shape, dtype=like.dtype, device=like.device)
            self.v[layer] = torch.zeros(shape, dtype=like.dtype, device=like.device)
        return self.k[layer], self.v[layer]

    def _grow(self, needed: int) -> None:
        """Double the capacity until ``needed`` columns fit (copies the held columns)."""
        capacity = self.capacity
        while capacity < needed:
            capacity *= 2
        for store in (self.k, self.v):
            for i, buf in enumerate(store):
                if buf is not None:
                    grown = buf.new_zeros(*buf.shape[:2], capacity + 1, buf.shape[-1])
                    grown[:, :, : self.capacity] = buf[:, :, : self.capacity]
                    store[i] = grown
        self.capacity = capacity

    def step(self, t: int, real: Tensor | None = None) -> CacheStep:
        """Reserve t new positions per row (``real`` (B, t) bool: False = a pad) and advance the lengths."""
        old = list(self.lengths)
        counts = [t] * self.batch if real is None else [int(n) for n in real.sum(1).tolist()]
        new = [a + n for a, n in zip(old, counts)]
        span = max(new)
        if span > self.capacity:
            self._grow(span)
        self.lengths = new
        dev = self.device
        if real is None and len(set(old)) == 1:  # rows in step: a slice, and a mask only for t > 1
            start = old[0]
            positions = torch.arange(start, start + t, device=dev).expand(self.batch, t)
            if start == 0:  # the first step (a prefill): columns 0..t-1 under plain causal attention
                return CacheStep(self, positions, None, start, span, None, old, new, causal=t > 1)
            mask = None if t == 1 else torch.ones(t, span, dtype=torch.bool, device=dev).tril(start)
            return CacheStep(self, positions, None, start, span, mask, old, new)
        base = torch.tensor(old, device=dev)[:, None]  # (B, 1)
        if real is None:
            positions = base + torch.arange(t, device=dev)  # (B, t)
            columns = positions
        else:
            real = real.to(dev, torch.bool)
            positions = torch.where(real, base + real.long().cumsum(1) - 1, 0)  # (B, t)
            columns = torch.where(real, positions, self.capacity)  # pads write the spare column
        keys = torch.arange(span, device=dev)  # (S,)
        mask = (keys[None, None, :] <= positions[:, :, None])[:, None]  # (B, 1, t, S)
        return CacheStep(self, positions, columns, 0, span, mask, old, new)

    def truncate(self, length: int | Sequence[int]) -> None:
        """Roll rows back to ``length`` tokens (an int for every row, or one per row); never grows a row."""
        lengths = [length] * self.batch if isinstance(length, int) else [int(n) for n in length]
        self.lengths = [min(a, n) for a, n in zip(self.lengths, lengths)]
        for child in self.children:
            child.truncate(self.lengths)
