"""Causal language modelling: predict every next token (the GPT objective)."""

from __future__ import annotations

from torch import Tensor, nn

from contextlab.objectives.base import Objective, next_token_loss


class CLM(Objective):
    name = "clm"
    loss_name = "next-token loss"
    loss_is_lm = True

    def forward(self, model: nn.Module, tokens: Tensor, doc_ids: Tensor | None = None) -> tuple[Tensor, dict]:
        x, y = tokens[:, :-1], tokens[:, 1:]  # (B, T) each
        mask = self.attn_mask(None if doc_ids is None else doc_ids[:, :-1])
        logits = model(x, attn_mask=mask, is_causal=mask is None).logits  # (B, T, V)
        loss = next_token_loss(logits, y)
        return loss, {}
