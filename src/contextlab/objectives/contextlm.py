"""ContextLM (seed ``contextlm-next-context-prediction.txt``): next-token training of the
``contextlab.models.contextlm.ContextLM`` architecture.

The seed keeps the standard cross-entropy loss: next-context prediction is learnt through
it, because each predicted context ĉ_k is added to the w positions of its chunk and so
receives their aggregated error signal. All of the method lives in the model (the
predictor feeds token predictions at inference too); this objective names the
architecture, takes its options (``ContextLMOptions``, declared once in the models layer)
and counts the predictor's FLOPs.
"""

from __future__ import annotations

from torch import Tensor, nn

from contextlab.models.contextlm import ContextLMOptions
from contextlab.models.flops import block_flops_per_token
from contextlab.objectives.base import Objective, next_token_loss


class ContextLMObjective(Objective):
    """Next-token prediction through a chunk-level context predictor (ContextLM)."""

    name = "contextlm"
    loss_name = "next-token loss"
    arch = "contextlm"
    loss_is_lm = True  # its loss is the next-token loss of the model run left to right

    Options = ContextLMOptions  # chunk_size, predictor_layers, encoder_layers, fusion

    def forward(self, model: nn.Module, tokens: Tensor, doc_ids: Tensor | None = None) -> tuple[Tensor, dict]:
        x, y = tokens[:, :-1], tokens[:, 1:]  # (B, T)
        mask = self.attn_mask(None if doc_ids is None else doc_ids[:, :-1])
        logits = model(x, attn_mask=mask, is_causal=True).logits  # (B, T, V)
        return next_token_loss(logits, y), {}

    def extra_flops_per_token(self, cfg, context: int) -> float:
        """The predictor: predictor_layers blocks at one position per w tokens, over context // w chunks."""
        w = self.options.chunk_size
        return self.options.predictor_layers * block_flops_per_token(cfg, context // w) / w
