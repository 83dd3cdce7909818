"""UL2 (Tay et al. 2023): a mixture of denoisers, each row tagged with its mode token.

Every row draws one denoiser from ``denoisers`` (weights ``weights``, default uniform):

- ``R:mean:density`` regular span corruption (T5), e.g. R:3:0.15
- ``X:mean:density`` extreme span corruption (long spans or high density), e.g. X:64:0.5
- ``S`` sequential denoising: a prefix LM split at a uniform point of the row

and becomes ``[mode] ...`` in the decoder-only inputs → targets form: the mode token and
the corrupted input (or the S prefix) are attended bidirectionally, the targets causally,
and only targets carry a loss. Mode tokens ``[R]``, ``[S]``, ``[X]`` and the sentinels are
added to the vocabulary. The default mixture is UL2's seven denoisers.

Trade-off: rows of one denoiser share a layout, so the batch is corrupted per denoiser
group and reassembled; the attention mask is per row (B, 1, T, T).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.objectives.base import Batch, Objective
from contextlab.objectives.prefix_lm import split_points
from contextlab.objectives.span import prefix_batch, random_spans_noise_mask, span_layout, span_sequence

MODES = ("[R]", "[S]", "[X]")
UL2_DENOISERS = ["R:3:0.15", "R:8:0.15", "S", "X:3:0.5", "X:8:0.5", "X:64:0.15", "X:64:0.5"]


def parse_denoiser(spec: str) -> tuple[str, float, float]:
    """'R:3:0.15' -> ('R', 3.0, 0.15); 'S' -> ('S', 0, 0)."""
    parts = spec.split(":")
    try:
        if parts[0] == "S" and len(parts) == 1:
            return "S", 0.0, 0.0
        if parts[0] in ("R", "X") and len(parts) == 3:
            mean, density = float(parts[1]), float(parts[2])
            if mean >= 1 and 0 < density < 1:
                return parts[0], mean, density
    except ValueError:
        pass
    raise UserError(f"UL2 denoiser {spec!r} is not R:mean:density, X:mean:density or S (e.g. R:3:0.15)")


class UL2(Objective):
    """Mixture of R/S/X denoisers with mode tokens."""

    name = "ul2"
    loss_name = "UL2 loss (all denoisers)"
    prefix_masks = True
    lm_prefix = ("[S]",)  # S-mode with an empty prefix: a causal LM after its mode token

    @dataclass
    class Options:
        denoisers: list[str] = opt(list(UL2_DENOISERS), "the mixture: R:mean:density, X:mean:density or S")
        weights: list[float] = opt([], "probability of each denoiser (normalised); empty = uniform")
        n_sentinels: int = opt(100, "sentinel tokens <extra_id_i> added to the vocabulary")

    def __init__(self, options, *, doc_mask: bool = False):
        super().__init__(options, doc_mask=doc_mask)
        self.parsed = [parse_denoiser(d) for d in options.denoisers]
        w = list(options.weights) or [1.0] * len(self.parsed)
        if not self.parsed or len(w) != len(self.parsed) or any(x < 0 for x in w) or sum(w) <= 0:
            raise UserError(
                "objective.options.weights needs one non-negative weight per denoiser (not all 0)"
            )
        self.probs = torch.tensor(w, dtype=torch.float) / sum(w)

    @property
    def special_tokens(self) -> tuple[str, ...]:
        return MODES + tuple(f"<extra_id_{i}>" for i in range(self.options.n_sentinels))

    def prepare(self, tokens: Tensor, doc_ids: Tensor | None = None) -> Batch:
        B, total = tokens.shape
        device = tokens.device
        gens = self.row_generators(tokens)  # one per row
        probs = self.probs.to(device)
        choice = self.draw(gens, B, lambda k, g: torch.multinomial(probs, k, replacement=True, generator=g))
        sentinels = torch.tensor(
            [self.special_ids[f"<extra_id_{i}>"] for i in range(self.options.n_sentinels)],
            dtype=torch.long,
            device=device,
        )
        eos = self.eot_id if self.eot_id is not None else int(sentinels[-1])
        seq = torch.empty_like(tokens)
        prefix = torch.empty(B, dtype=torch.long, device=device)
        n_targets = torch.empty(B, dtype=torch.long, device=device)
        for j, (kind, mean, density) in enumerate(self.parsed):
            rows = (choice == j).nonzero().flatten()
            if len(rows) == 0:
                continue
            n = len(rows)
            mine = None if gens is None else [gens[int(r)] for r in rows]  # each row's own generator
            lead = torch.full((n, 1), self.special_ids[f"[{kind}]"], dtype=tokens.dtype, device=device)
            if kind == "S":  # [S] + the first total-1 tokens, split at a uniform point
                P = 1 + self.draw(mine, n, lambda k, g: split_points(k, total - 1, 0.0, 1.0, g, device))
                seq[rows] = torch.cat([lead, tokens[rows, : total - 1]], dim=1)
                prefix[rows], n_targets[rows] = P, total - P
            else:
                L, N, S = span_layout(total, density, mean, reserve=1)
                noise = self.draw(
                    mine, n, lambda k, g, L=L, N=N, S=S: random_spans_noise_mask(k, L, N, S, g, device)
                )
                seq[rows], P, nt = span_sequence(tokens[rows, :L], noise, sentinels, eos, total, lead=lead)
                prefix[rows], n_targets[rows] = P, nt
        return prefix_batch(seq, prefix, n_targets)
