"""Prefix LM: a bidirectional prefix, a causal suffix, loss on the suffix only.

Each row is split at a random point P (uniform between ``min_prefix`` and ``max_prefix``
of the row): positions < P attend to the whole prefix in both directions, positions >= P
attend causally (the prefix included). The loss covers the suffix tokens: the prediction
made at P-1 (the first suffix token, from the full prefix) and every one after it. With
``data.doc_mask`` attention also stays inside each document.

Trade-off: a per-row split takes attention off the fastest ``is_causal`` path: on a GPU the
mask is a FlexAttention block mask (tiles wholly inside the prefix or below the diagonal
run unmasked), on CPU a dense (B, 1, T, T) boolean mask, whose cost is small next to the
matmuls at the contexts a CPU trains at.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.objectives.base import Batch, Objective, prefix_lm_mask


def split_points(B: int, T: int, min_prefix: float, max_prefix: float, generator=None, device=None) -> Tensor:
    """(B,) prefix lengths, uniform integers in [round(min*T), round(max*T)] clamped to [1, T-1]."""
    if not 0.0 <= min_prefix <= max_prefix <= 1.0:
        raise UserError(
            f"prefix fractions must satisfy 0 <= min_prefix <= max_prefix <= 1, "
            f"got {min_prefix}, {max_prefix}"
        )
    lo = min(max(1, int(min_prefix * T + 0.5)), T - 1)
    hi = max(lo, min(T - 1, int(max_prefix * T + 0.5)))
    return torch.randint(lo, hi + 1, (B,), generator=generator, device=device)


def prefix_labels(y: Tensor, prefix: Tensor) -> Tensor:
    """Targets y (B, T) with -100 before position P-1 (the prefix's own tokens carry no loss)."""
    q = torch.arange(y.shape[1], device=y.device)[None, :]
    return torch.where(q >= prefix[:, None] - 1, y, torch.full_like(y, -100))


class PrefixLM(Objective):
    """Bidirectional prefix + causal suffix (T5's prefix LM, PaLM/GLM style)."""

    name = "prefix_lm"
    loss_name = "prefix-LM loss (suffix tokens)"
    prefix_masks = True

    @dataclass
    class Options:
        min_prefix: float = opt(0.1, "shortest prefix, as a fraction of the row")
        max_prefix: float = opt(0.9, "longest prefix, as a fraction of the row")

        def __post_init__(self):
            if not 0 <= self.min_prefix <= self.max_prefix <= 1:
                raise UserError(
                    f"prefix_lm needs 0 <= min_prefix <= max_prefix <= 1 (got {self.min_prefix}, "
                    f"{self.max_prefix})"
                )

    def prepare(self, tokens: Tensor, doc_ids: Tensor | None = None) -> Batch:
        x, y = tokens[:, :-1], tokens[:, 1:]  # (B, T)
        B, T = x.shape
        o, gens = self.options, self.row_generators(x)  # one per row
        prefix = self.draw(gens, B, lambda k, g: split_points(k, T, o.min_prefix, o.max_prefix, g, x.device))
        docs = doc_ids[:, :-1] if (self.doc_mask and doc_ids is not None) else None
        return Batch(x, prefix_labels(y, prefix), prefix_lm_mask(prefix, T, docs), is_causal=False)
