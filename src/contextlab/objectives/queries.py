"""Queries: one shared context, K independent questions, K answers per row.

For rows ``[context (L tokens), Q_1 .. Q_K, A_1 .. A_K]``, such as the sparse-parity
training stores written with ``contextlab data synthetic parity --set queries=K``. The
model reads ``[context, Q_1 .. Q_K]``: the context causally, as usual; every question token
at the same position L, seeing the context and itself only, never another question. So
question k is scored exactly as the single-question row ``[context, Q_k] -> A_k`` would
be (same tokens, same positions, same attention), and a model trained this way is
evaluated on ordinary single-question rows with plain causal attention. The loss is the
mean cross-entropy of the K answers.

Trade-off: K answers per context for L + K input tokens instead of K (L + 1), which on
the 60-bit parity data is 20x more supervised answers per token at K = 32; the price is an
explicit attention mask (the dense masked attention kernel, not the causal fast path) and
rows whose layout the objective must be told (``n_queries``; L is the rest of the row).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.objectives.base import Objective, next_token_loss


def queries_mask(context: int, n_queries: int, device=None) -> Tensor:
    """(1, 1, L + K, L + K) bool: causal over the context; each query sees the context and itself."""
    n = context + n_queries
    mask = torch.zeros(n, n, dtype=torch.bool, device=device)
    mask[:context, :context] = torch.ones(context, context, dtype=torch.bool, device=device).tril()
    mask[context:, :context] = True
    mask[context:, context:] = torch.eye(n_queries, dtype=torch.bool, device=device)
    return mask[None, None]


def queries_positions(context: int, n_queries: int, device=None) -> Tensor:
    """(L + K,) positions: 0..L-1 for the context, L for every query."""
    return torch.cat(
        [
            torch.arange(context, device=device),
            torch.full((n_queries,), context, dtype=torch.long, device=device),
        ]
    )


class Queries(Objective):
    """Mean cross-entropy of K answers, each to a question that sees only the shared context."""

    name = "queries"
    loss_name = "answer loss (all queries)"

    @dataclass
    class Options:
        n_queries: int = opt(
            32, "questions K per row: rows are [context, K question tokens, K answer tokens]"
        )

        def __post_init__(self):
            if self.n_queries < 1:
                raise ValueError(f"n_queries={self.n_queries} must be >= 1")

    def __init__(self, options: Queries.Options, *, doc_mask: bool = False):
        super().__init__(options, doc_mask=doc_mask)
        self._cache: tuple | None = None

    def _layout(self, row_len: int, device: torch.device) -> tuple[int, Tensor, Tensor]:
        K = self.options.n_queries
        L = row_len - 2 * K
        if L < 1:
            raise UserError(
                f"objective queries: rows of {row_len} tokens cannot hold a context and "
                f"{K} questions + {K} answers; set train.context = 0 (one sample per row, from the data)"
            )
        key = (row_len, K, device)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, queries_mask(L, K, device), queries_positions(L, K, device))
        return L, self._cache[1], self._cache[2]

    def forward(self, model: nn.Module, tokens: Tensor, doc_ids: Tensor | None = None) -> tuple[Tensor, dict]:
        K = self.options.n_queries
        L, mask, positions = self._layout(tokens.shape[1], tokens.device)
        inputs, answers = tokens[:, : L + K], tokens[:, L + K :]  # (B, L + K), (B, K)
        logits = model(inputs, attn_mask=mask, is_causal=False, position_ids=positions).logits[
            :, L:
        ]  # (B, K, V)
        return next_token_loss(logits, answers), {}
