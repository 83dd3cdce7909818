"""Masked language modelling (BERT): corrupt 15% of the tokens, predict them bidirectionally.

Of the selected positions 80% become ``[MASK]``, 10% a random token of the data's
vocabulary and 10% stay as they are; the loss is on the selected positions only, and the
model attends in both directions (within each document when ``data.doc_mask`` is on).

Trade-off: exactly ``round(mask_rate * T)`` positions per row (a random permutation)
rather than BERT's independent coin per token, so every row trains the same number of
tokens and the tests can count them. The row is the first T tokens of the (B, T+1) batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.models.masks import AttentionMask
from contextlab.objectives.base import Batch, Objective


def mlm_corrupt(
    tokens: Tensor,
    selected: Tensor,
    action: Tensor,
    random_tokens: Tensor,
    mask_id: int,
    mask_frac: float = 0.8,
    random_frac: float = 0.1,
) -> tuple[Tensor, Tensor]:
    """The BERT rewrite, given its random draws: -> (inputs, labels), each like ``tokens`` (B, T).

    selected: bool (B, T), the positions to predict; action: uniform [0, 1) (B, T): below
    mask_frac -> mask_id, below mask_frac + random_frac -> random_tokens, else unchanged.
    """
    inputs = tokens.clone()
    to_mask = selected & (action < mask_frac)
    to_random = selected & (action >= mask_frac) & (action < mask_frac + random_frac)
    inputs[to_mask] = mask_id
    inputs[to_random] = random_tokens[to_random]
    labels = torch.where(selected, tokens, torch.full_like(tokens, -100))
    return inputs, labels


def select_positions(B: int, T: int, n: int, generator: torch.Generator | None, device) -> Tensor:
    """bool (B, T) with exactly n True per row, uniformly at random."""
    scores = torch.rand(B, T, generator=generator, device=device)
    idx = scores.argsort(dim=1)[:, :n]  # (B, n)
    selected = torch.zeros(B, T, dtype=torch.bool, device=device)
    return selected.scatter_(1, idx, True)


class MLM(Objective):
    """BERT masked LM on a bidirectional decoder; special token ``[MASK]``."""

    lm_prefix = None
    not_lm = (
        "it attends in both directions and its logits predict the (masked) token at the same "
        "position, not the next one"
    )

    name = "mlm"
    loss_name = "masked-token loss"
    special_tokens = ("[MASK]",)

    @dataclass
    class Options:
        mask_rate: float = opt(0.15, "fraction of the tokens of each row to predict")
        mask_frac: float = opt(0.8, "of those, fraction replaced by [MASK]")
        random_frac: float = opt(0.1, "of those, fraction replaced by a random token (the rest stay)")

        def __post_init__(self):
            if not (0 < self.mask_rate < 1 and 0 <= self.mask_frac <= 1 and 0 <= self.random_frac <= 1):
                raise UserError(
                    f"mlm needs 0 < mask_rate < 1, mask_frac, random_frac in [0, 1] (got {self.mask_rate}, "
                    f"{self.mask_frac}, {self.random_frac})"
                )
            if self.mask_frac + self.random_frac > 1:
                raise UserError(
                    f"mlm's mask_frac + random_frac is {self.mask_frac + self.random_frac:g}; at most 1"
                )

    def prepare(self, tokens: Tensor, doc_ids: Tensor | None = None) -> Batch:
        o = self.options
        x = tokens[:, :-1]  # (B, T)
        B, T = x.shape
        gens, dev = self.row_generators(x), x.device  # one per row
        n = max(1, round(o.mask_rate * T))
        selected = self.draw(gens, B, lambda k, g: select_positions(k, T, n, g, dev))
        action = self.draw(gens, B, lambda k, g: torch.rand(k, T, generator=g, device=dev))
        random_tokens = self.draw(
            gens, B, lambda k, g: torch.randint(0, self.base_vocab, (k, T), generator=g, device=dev)
        )
        inputs, labels = mlm_corrupt(
            x, selected, action, random_tokens, self.special_ids["[MASK]"], o.mask_frac, o.random_frac
        )
        mask = None
        if self.doc_mask and doc_ids is not None:
            mask = AttentionMask(T, segments=doc_ids[:, :-1], causal=False)  # block-diagonal, both directions
        return Batch(inputs, labels, mask, is_causal=False)
