"""Recall: next-token loss on the answers of associative-recall rows only (MQAR).

For the stores of ``contextlab data synthetic mqar``: rows ``[k_1 v_1 .. k_N v_N, q_1 a_1 ..]``
whose answers are found by the store's rule (``meta.json`` ``mqar.answer_rule``): a target is
an answer when the input token before it is a key id (``key_ids``) that already occurred
earlier in the row. Keys occur once among the pairs, so only the values after the repeated
(query) keys carry the loss; the values of the pairs themselves are random draws that no
model can predict, and training on them adds only noise. The model runs causally over the
whole row, as in evaluation. Metrics: ``answer_acc`` (argmax over the whole vocabulary at the
answers) and ``answers`` (answer targets per row).

Trade-off: the rule needs an earlier-occurrence test over every pair of positions, a
(B, T, T) comparison per batch, cheap next to the attention at these lengths; in return the
rows need no side channel of loss masks and the trainer, loader and store stay unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.objectives.base import Objective, masked_loss

MQAR_TOKENIZER = re.compile(r"mqar-k(\d+)-v(\d+)$")


def answer_labels(x: Tensor, y: Tensor, key_lo: int, key_hi: int) -> Tensor:
    """(B, T) inputs and targets -> labels: y where x_t is a key id that occurred at some s < t, else -100."""
    is_key = (x >= key_lo) & (x < key_hi)  # (B, T)
    T = x.shape[1]
    earlier = torch.ones(T, T, dtype=torch.bool, device=x.device).tril(-1)  # [t, s]: s < t
    seen = ((x[:, :, None] == x[:, None, :]) & earlier).any(-1)  # (B, T)
    return torch.where(is_key & seen, y, torch.full_like(y, -100))


class Recall(Objective):
    """Mean cross-entropy of the answers of associative-recall rows (the values after repeated keys)."""

    counts_tokens = True  # rows hold unequal numbers of answers: its forward returns loss_tokens

    name = "recall"
    loss_name = "answer loss (recall answers)"

    @dataclass
    class Options:
        key_ids: list[int] = opt(
            [],
            "[first, end) of the key ids (the store's meta.json mqar.layout.key_ids); empty = read them "
            "from the data's MQAR tokenizer (named mqar-kK-vV: [0, K])",
        )

        def __post_init__(self):
            if self.key_ids and (len(self.key_ids) != 2 or not 0 <= self.key_ids[0] < self.key_ids[1]):
                raise ValueError(f"key_ids={self.key_ids} must be [first, end) with 0 <= first < end")

    def __init__(self, options: Recall.Options, *, doc_mask: bool = False):
        super().__init__(options, doc_mask=doc_mask)
        self.keys: tuple[int, int] | None = tuple(options.key_ids) if options.key_ids else None
        self._checked = False

    def bind_tokenizer(self, spec: dict) -> None:
        super().bind_tokenizer(spec)
        if self.keys is None:
            m = MQAR_TOKENIZER.match(str(spec.get("name", "")))
            if m is None:
                raise UserError(
                    f"objective recall: the data's tokenizer ({spec.get('name')}) is no MQAR vocabulary; "
                    "set objective.options.key_ids = [first, end) of the key ids"
                )
            self.keys = (0, int(m.group(1)))

    def forward(self, model: nn.Module, tokens: Tensor, doc_ids: Tensor | None = None) -> tuple[Tensor, dict]:
        if self.keys is None:  # built without a tokenizer: the options must name the keys
            raise UserError("objective recall needs objective.options.key_ids (or bind_tokenizer first)")
        x, y = tokens[:, :-1], tokens[:, 1:]  # (B, T) each
        labels = answer_labels(x, y, *self.keys)  # (B, T), -100 off the answers
        if not self._checked:
            if not bool((labels != -100).any()):
                raise UserError(
                    f"objective recall: no answers in the batch (no key id in {list(self.keys)} repeats "
                    "within a row); is the data an MQAR store, read with data.mode long_docs and "
                    "train.context 0, and do objective.options.key_ids match its meta.json?"
                )
            self._checked = True
        mask = self.attn_mask(None if doc_ids is None else doc_ids[:, :-1])
        logits = model(x, attn_mask=mask, is_causal=mask is None).logits  # (B, T, V)
        scored = labels != -100
        n = scored.sum()
        hits = ((logits.argmax(-1) == labels) & scored).sum()
        return masked_loss(logits, labels), {
            "answer_acc": hits.float() / n.clamp(min=1),
            "answers": n.float() / x.shape[0],
            "loss_tokens": n,  # rows hold unequal numbers of answers: the trainer weighs by them
        }
