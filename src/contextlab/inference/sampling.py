"""Choosing the next token from logits: greedy, temperature, top-k, top-p (nucleus), with a seed.

``Sampling`` holds the options (``temperature`` 0 = greedy argmax); ``next_tokens`` picks one
token per row. Trade-off: top-k and top-p are applied as masks on the full (B, V) logits in
fp32 (one sort per step), which is simple and exact at contextlab's vocabulary sizes; the
random draw uses a ``torch.Generator`` seeded once, so a seed gives the same tokens on a device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from contextlab.config import opt
from contextlab.errors import UserError


@dataclass
class Sampling:
    """How the next token is chosen."""

    temperature: float = opt(0.0, "0 = greedy (the most likely token); > 0 samples softmax(logits / T)")
    top_k: int = opt(0, "sample among the k most likely tokens only (0 = all)")
    top_p: float = opt(1.0, "sample among the smallest set of tokens whose probability reaches p (1 = all)")
    seed: int | None = opt(None, "seed of the random draws (None = nondeterministic)")

    def __post_init__(self):
        if self.temperature < 0:
            raise UserError(f"temperature must be >= 0, got {self.temperature}; use 0 for greedy decoding")
        if self.top_k < 0:
            raise UserError(f"top_k must be >= 0, got {self.top_k}; use 0 to keep every token")
        if not 0 < self.top_p <= 1:
            raise UserError(f"top_p must be in (0, 1], got {self.top_p}; use 1 to keep every token")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def generator(self, device: torch.device | str) -> torch.Generator | None:
        """A generator seeded with ``seed`` on ``device`` (None without a seed or when greedy)."""
        if self.greedy or self.seed is None:
            return None
        return torch.Generator(device=device).manual_seed(self.seed)


def restrict(logits: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """logits (B, V) with -inf outside the top-k and the top-p nucleus (the likeliest token always stays)."""
    if top_k > 0 and top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1) the k-th largest
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs  # probability of the tokens ranked above each one
        drop_sorted = before >= top_p  # a token is kept while the mass above it is below p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def next_tokens(logits: Tensor, sampling: Sampling, generator: torch.Generator | None = None) -> Tensor:
    """One token per row of logits (B, V): argmax when greedy, else a draw from the restricted softmax."""
    logits = logits.float()
    if sampling.greedy:
        return logits.argmax(dim=-1)  # (B,)
    logits = restrict(logits / sampling.temperature, sampling.top_k, sampling.top_p)
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]  # (B,)
