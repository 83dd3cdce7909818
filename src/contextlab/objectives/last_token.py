"""Last-token loss: only the final target(s) of each row count (answer prediction, probes).

For data where each row is one question whose answer is the last token, such as the
sparse-parity samples of ``contextlab data synthetic parity`` (``[bits, TASK, answer]``,
read with ``data.mode = "long_docs"`` and ``train.context = 0``: one document per row). The
model still runs causally over the whole row; the loss is the mean cross-entropy of the
last ``n_last`` targets, so the validation loss is directly the answer's cross-entropy.

Trade-off: the forward computes logits at every position and throws all but the last
away. With a byte vocabulary that costs a few percent; in return any architecture that
returns logits (GPT, ContextLM, MTP) trains unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from contextlab.config import opt
from contextlab.objectives.base import Objective, next_token_loss


class LastToken(Objective):
    """Cross-entropy of the last n_last targets of each row only."""

    name = "last_token"
    loss_name = "last-token loss"

    @dataclass
    class Options:
        n_last: int = opt(1, "how many targets at the end of each row carry the loss")

        def __post_init__(self):
            if self.n_last < 1:
                raise ValueError(f"n_last={self.n_last} must be >= 1")

    def forward(self, model: nn.Module, tokens: Tensor, doc_ids: Tensor | None = None) -> tuple[Tensor, dict]:
        x, y = tokens[:, :-1], tokens[:, 1:]  # (B, T) each
        k = min(self.options.n_last, x.shape[1])
        mask = self.attn_mask(None if doc_ids is None else doc_ids[:, :-1])
        logits = model(x, attn_mask=mask, is_causal=mask is None).logits[:, -k:]  # (B, k, V)
        return next_token_loss(logits, y[:, -k:]), {}
