"""Multi-token prediction (Gloeckle et al. 2024): n heads on a shared trunk predict t+1..t+n.

Trains ``contextlab.models.mtp.MTPModel``: head k's cross-entropy covers the positions
t <= T - k whose target x_{t+k} is in the row; the loss is the weighted mean
``sum_k w_k L_k / sum_k w_k`` (weights default to 1). Evaluation, generation and export
use head 1 only, which is a plain GPT (see the model's docstring).

Trade-off: heads run one after another on the shared trunk output, each to its own loss,
so only one head's logits are alive in the forward at a time; the backward still keeps
each head's softmax (the paper's trick of a backward per head inside the forward would
break the trainer's one-backward-per-micro-batch contract and gradient accumulation).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.models.flops import block_flops_per_token, lm_head_flops_per_token
from contextlab.models.mtp import MTPOptions
from contextlab.objectives.base import Objective, next_token_loss


class MTP(Objective):
    """Meta's multi-token prediction: n_future head blocks, shared final norm and unembedding."""

    name = "mtp"
    loss_name = "multi-token loss (all heads)"
    arch = "mtp"

    @dataclass
    class Options(MTPOptions):  # n_future, declared with the model
        loss_weights: list[float] = opt([], "weight of each head's loss (n_future values); empty = all 1")

    def __init__(self, options, *, doc_mask: bool = False):
        super().__init__(options, doc_mask=doc_mask)
        w = list(options.loss_weights) or [1.0] * options.n_future
        if len(w) != options.n_future or any(x < 0 for x in w) or sum(w) <= 0:
            raise UserError(
                f"objective.options.loss_weights needs {options.n_future} non-negative weights "
                f"(not all 0), got {options.loss_weights}"
            )
        self.weights = [x / sum(w) for x in w]

    def forward(self, model: nn.Module, tokens: Tensor, doc_ids: Tensor | None = None) -> tuple[Tensor, dict]:
        x = tokens[:, :-1]  # (B, T)
        T = x.shape[1]
        mask = self.attn_mask(None if doc_ids is None else doc_ids[:, :-1])
        z, state = model.trunk_states(x, attn_mask=mask, is_causal=True)  # (B, T, C) shared trunk
        loss, metrics = 0.0, {}
        for k, weight in enumerate(self.weights, start=1):
            if k > T:
                break
            logits = model.head_logits(z, k, state)  # (B, T, V); position t predicts x_{t+k}
            head_loss = next_token_loss(logits[:, : T + 1 - k], tokens[:, k:])
            metrics[f"loss_head{k}"] = head_loss.detach()
            loss = loss + weight * head_loss
        return loss, metrics

    def extra_flops_per_token(self, cfg, context: int) -> float:
        """n_future - 1 extra head blocks and output layers (head 1 is the GPT's own last block)."""
        extra = self.options.n_future - 1
        return extra * (block_flops_per_token(cfg, context) + lm_head_flops_per_token(cfg))
