"""What both model backends share: the interface and chunked log-probabilities.

A backend wraps one loaded model and answers the few forward passes an evaluation needs
(logits, output rows for chunked log-probabilities, hidden states of a layer, a layer plus
the last token's log-probability); ``ModelAdapter`` holds one, chosen once at load, and adds
what does not depend on the kind of model (batching, length checks, scoring, generation).
Trade-off: a small protocol instead of one class with ``if is_gpt`` in every method, so each
kind of model keeps its fast path (a contextlab GPT never builds the full fp32 logits) and
evaluations never look inside the model.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

LOGPROB_CHUNK = 4096  # most rows (tokens) per fp32 log-softmax chunk: bounds memory to chunk x vocab floats
CHUNK_ELEMENTS = 1 << 21  # logits per chunk: 8 MB of fp32, so the chunk stays in cache while it is reduced


def logprob_chunk(vocab_size: int) -> int:
    """Rows per chunk for a vocabulary: about CHUNK_ELEMENTS logits (cache-sized: measured 0.73x ->
    1.02x a raw forward at V = 4096 going from 4096 to 512 rows), at least 128 rows so the output
    layer's matmul stays efficient, at most LOGPROB_CHUNK."""
    return max(128, min(LOGPROB_CHUNK, CHUNK_ELEMENTS // max(1, vocab_size)))


class ModelBackend(Protocol):
    """One kind of model. ``idx`` is a (B, T) long tensor on the model's device; every method runs
    under ``torch.no_grad`` and applies the compute dtype itself (``autocast``)."""

    model: torch.nn.Module

    @property
    def vocab_size(self) -> int: ...

    def logits(self, idx: Tensor) -> Tensor:
        """(B, T, V) in the compute dtype."""

    def output_rows(self, idx: Tensor) -> Callable[[int, int], Tensor]:
        """A function (a, b) -> logits of the flattened positions a:b of ``idx`` (B*T rows)."""

    def last_logits(self, idx: Tensor) -> Tensor:
        """(B, V) the logits at the last position only, in the compute dtype: the output layer runs on
        one row of each sequence instead of T (for a 50k vocabulary, most of a small model's forward)."""

    def hidden_states(self, idx: Tensor, layer: int, what: str) -> Tensor:
        """(B, T, C) residual stream after block ``layer``; ``what`` names the model in errors."""

    def layer_and_last_logprob(self, idx: Tensor, layer: int, what: str) -> tuple[Tensor, Tensor]:
        """(hidden states (B, T-1, C) of ``layer`` over ``idx[:, :-1]``,
        fp32 log p(idx[:, -1] | idx[:, :-1]) (B,))."""


Autocast = Callable[[], AbstractContextManager]


def chunked_logprobs(
    rows: Callable[[int, int], Tensor], targets: Tensor, autocast: Autocast, chunk: int = LOGPROB_CHUNK
) -> Tensor:
    """fp32 log p(targets[i]) from the logits rows, ``chunk`` rows at a time (``logprob_chunk``): (N,)."""
    out = torch.empty(targets.numel(), dtype=torch.float32, device=targets.device)
    for a in range(0, out.numel(), chunk):
        b = min(a + chunk, out.numel())
        with autocast():
            logits = rows(a, b)
        # fused log_softmax + gather, in fp32
        out[a:b] = -F.cross_entropy(logits.float(), targets[a:b], reduction="none")
    return out
