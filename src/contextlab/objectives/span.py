"""T5 span corruption in the decoder-only "inputs → targets" form.

T5 (Raffel et al. 2020) corrupts 15% of the tokens in spans of mean length 3 (the exact
``random_spans_noise_mask``: the noise and non-noise token counts are each split into the
same number of spans at random, interleaved starting with non-noise), replaces each noise
span by a unique sentinel in the inputs, and asks for the sentinels and spans as targets::

    tokens   10 11 12 13 14 15 16 17 18 19        noise = 12 13, 17
    inputs   10 11 <s0> 14 15 16 <s1> 18 19
    targets  <s0> 12 13 <s1> 17 <s2> EOS

One row of the batch becomes ``[inputs][targets][pad]``; attention is bidirectional over the
inputs and causal over the targets (a prefix LM), and only the target tokens carry a loss.
The number of source tokens L is the largest for which everything fits the row, so the
layout (and the prefix length) is the same for every row of a given context. Sentinels are
special tokens ``<extra_id_i>`` appended to the vocabulary; EOS is the data's ``eot_id``.

Trade-off: the row is corrupted as a whole (T5 also corrupts packed text), so a span may
cross a document boundary; ``data.doc_mask`` is not applied here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.objectives.base import Batch, Objective, prefix_lm_mask


def _round(x: float) -> int:
    return int(x + 0.5)  # round half up: Python's round() is banker's


def span_layout(total: int, density: float, mean_span: float, reserve: int = 0) -> tuple[int, int, int]:
    """(L, N, S): the most source tokens L whose corruption fits ``total`` positions.

    N = round(L * density) noise tokens in S = round(N / mean_span) spans; inputs take
    L - N + S positions and targets N + S + 1 (sentinels and the EOS), plus ``reserve``
    leading positions (a mode token).
    """
    for L in range(total, 1, -1):
        N = min(max(_round(L * density), 1), L - 1)
        S = max(1, min(_round(N / mean_span), L - N))
        if L + 2 * S + 1 + reserve <= total:
            return L, N, S
    raise UserError(f"a row of {total} tokens is too short for span corruption; raise train.context")


def random_segmentation(B: int, n_items: int, n_segments: int, generator, device) -> Tensor:
    """(B, n_segments) positive lengths summing to n_items, uniform over such compositions (T5)."""
    if n_segments == 1:
        return torch.full((B, 1), n_items, dtype=torch.long, device=device)
    scores = torch.rand(B, n_items - 1, generator=generator, device=device)
    first = scores.argsort(dim=1).argsort(dim=1) < (n_segments - 1)  # S-1 segment starts among items 1..n-1
    seg = torch.cat(
        [torch.zeros(B, 1, dtype=torch.long, device=device), first.long().cumsum(1)], dim=1
    )  # (B, n)
    return torch.zeros(B, n_segments, dtype=torch.long, device=device).scatter_add_(
        1, seg, torch.ones_like(seg)
    )


def random_spans_noise_mask(B: int, L: int, N: int, S: int, generator=None, device=None) -> Tensor:
    """bool (B, L): N noise tokens in S spans, alternating with S non-noise spans, non-noise first."""
    noise = random_segmentation(B, N, S, generator, device)  # (B, S)
    clean = random_segmentation(B, L - N, S, generator, device)  # (B, S)
    lengths = torch.stack([clean, noise], dim=2).reshape(B, 2 * S)  # clean_0, noise_0, clean_1, ...
    ends = lengths.cumsum(1)  # (B, 2S) exclusive end of each segment
    pos = torch.arange(L, device=device).expand(B, L).contiguous()
    segment = torch.searchsorted(ends, pos, right=True)  # (B, L) segment index of each position
    return segment % 2 == 1


def replace_spans(tokens: Tensor, spans: Tensor, sentinels: Tensor) -> Tensor:
    """Drop the ``spans`` (bool, same shape) tokens, putting sentinel i where span i began: (B, L')."""
    B = tokens.shape[0]
    prev = torch.cat([torch.zeros_like(spans[:, :1]), spans[:, :-1]], dim=1)
    start = spans & ~prev
    span_id = (start.long().cumsum(1) - 1).clamp(min=0)
    if int(span_id.max()) >= len(sentinels):
        raise UserError(
            f"a row needs more than {len(sentinels)} sentinels; raise the objective's n_sentinels"
        )
    out = torch.where(start, sentinels[span_id], tokens)
    keep = ~spans | start
    return out[keep].view(B, -1)  # every row keeps the same count (callers guarantee it)


def span_sequence(
    tokens: Tensor, noise: Tensor, sentinels: Tensor, eos: int, total: int, lead: Tensor | None = None
) -> tuple[Tensor, int, int]:
    """-> (sequence (B, total), prefix length P, number of target tokens).

    sequence = [lead][inputs][targets][EOS padding]; inputs and lead form the bidirectional
    prefix; targets = the non-noise spans replaced by sentinels, then EOS.
    """
    B = tokens.shape[0]
    inputs = replace_spans(tokens, noise, sentinels)  # (B, Li)
    targets = replace_spans(tokens, ~noise, sentinels)  # (B, Lt - 1)
    eos_col = torch.full((B, 1), eos, dtype=tokens.dtype, device=tokens.device)
    parts = ([lead] if lead is not None else []) + [inputs, targets, eos_col]
    seq = torch.cat(parts, dim=1)
    prefix = seq.shape[1] - targets.shape[1] - 1
    n_targets = targets.shape[1] + 1
    if seq.shape[1] > total:
        raise UserError(f"span corruption produced {seq.shape[1]} tokens for a row of {total}")
    pad = torch.full((B, total - seq.shape[1]), eos, dtype=tokens.dtype, device=tokens.device)
    return torch.cat([seq, pad], dim=1), prefix, n_targets


def prefix_batch(seq: Tensor, prefix: Tensor, n_targets: Tensor | None = None) -> Batch:
    """A row (B, T+1) with a bidirectional prefix of ``prefix`` (B,) tokens -> Batch.

    Labels: every next token from position P-1 on (the whole suffix), or only the first
    ``n_targets`` (B,) of them (padding after the targets carries no loss).
    """
    x, y = seq[:, :-1], seq[:, 1:]
    T = x.shape[1]
    nxt = torch.arange(1, T + 1, device=seq.device)[None, :]  # index in seq of the token y predicts
    keep = nxt >= prefix[:, None]
    if n_targets is not None:
        keep &= nxt < (prefix + n_targets)[:, None]
    labels = torch.where(keep, y, torch.full_like(y, -100))
    return Batch(x, labels, prefix_lm_mask(prefix, T), is_causal=False)


class SpanCorruption(Objective):
    """T5 span corruption (noise density 0.15, mean span 3) as a decoder-only prefix LM."""

    name = "span"
    loss_name = "span-corruption loss (target spans)"
    prefix_masks = True
    lm_prefix = None
    not_lm = (
        "it learned to write sentinel-marked spans after a bidirectionally read input, never to "
        "continue plain text left to right"
    )

    @dataclass
    class Options:
        noise_density: float = opt(0.15, "fraction of the tokens corrupted")
        mean_span: float = opt(3.0, "mean length of a corrupted span")
        n_sentinels: int = opt(100, "sentinel tokens <extra_id_i> added to the vocabulary (T5: 100)")

        def __post_init__(self):
            if not 0 < self.noise_density < 1 or self.mean_span < 1 or self.n_sentinels < 1:
                raise UserError(
                    f"span needs 0 < noise_density < 1, mean_span >= 1 and n_sentinels >= 1 (got "
                    f"{self.noise_density}, {self.mean_span}, {self.n_sentinels})"
                )

    @property
    def special_tokens(self) -> tuple[str, ...]:
        return tuple(f"<extra_id_{i}>" for i in range(self.options.n_sentinels))

    def sentinel_ids(self, device) -> Tensor:
        return torch.tensor(
            [self.special_ids[n] for n in self.special_tokens], dtype=torch.long, device=device
        )

    def eos_id(self) -> int:
        return self.eot_id if self.eot_id is not None else self.special_ids[self.special_tokens[-1]]

    def prepare(self, tokens: Tensor, doc_ids: Tensor | None = None) -> Batch:
        o = self.options
        B, total = tokens.shape
        L, N, S = span_layout(total, o.noise_density, o.mean_span)
        gens, dev = self.row_generators(tokens), tokens.device  # one per row
        noise = self.draw(gens, B, lambda k, g: random_spans_noise_mask(k, L, N, S, g, dev))
        seq, prefix, n_targets = span_sequence(
            tokens[:, :L], noise, self.sentinel_ids(tokens.device), self.eos_id(), total
        )
        full = torch.full((B,), prefix, dtype=torch.long, device=tokens.device)
        return prefix_batch(seq, full, torch.full_like(full, n_targets))
