"""Fill-in-the-middle (Bavarian et al. 2022) at token level, per document inside packed rows.

Each document of a row (a run of equal ``doc_ids``; without them, the text between
separators) is, with probability ``fim_rate``, cut at two uniform points into prefix,
middle and suffix and rearranged, then trained as ordinary next-token prediction:

    PSM   [PRE] prefix [SUF] suffix [MID] middle
    SPM   [SUF] suffix [PRE] prefix [MID] middle        (with probability spm_rate)

Trade-offs: the three sentinels must fit in the document's own slots so that packing,
document ids and the row length stay unchanged; the transformed document therefore uses
its first n - 3 tokens (the 3 dropped tokens are the tail of that document in this row).
A separator at the end of a document stays in place. Documents shorter than
``min_doc_tokens`` are left alone. Attention is causal (document-masked with
``data.doc_mask``), and every position carries a loss, as in the paper.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.models.special_tokens import FIM_SENTINELS
from contextlab.objectives.base import Batch, Objective

PRE, SUF, MID = FIM_SENTINELS  # <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>


def fim_document(doc: list[int], cut1: int, cut2: int, spm: bool, pre: int, suf: int, mid: int) -> list[int]:
    """The FIM rewrite of one document's tokens (same length): cuts 0 <= cut1 <= cut2 <= len(doc) - 3."""
    body = doc[: len(doc) - 3]
    prefix, middle, suffix = body[:cut1], body[cut1:cut2], body[cut2:]
    if spm:
        return [suf, *suffix, pre, *prefix, mid, *middle]
    return [pre, *prefix, suf, *suffix, mid, *middle]


def document_runs(row_docs: list[int] | None, row: list[int], eot: int | None) -> list[tuple[int, int]]:
    """[start, end) of each document in a row: runs of equal doc ids, else split after each separator."""
    n = len(row)
    bounds = [0]
    for i in range(1, n):
        if (
            (row_docs[i] != row_docs[i - 1])
            if row_docs is not None
            else (eot is not None and row[i - 1] == eot)
        ):
            bounds.append(i)
    bounds.append(n)
    return list(zip(bounds[:-1], bounds[1:]))


class FIM(Objective):
    """Fill-in-the-middle, PSM and SPM, applied to fim_rate of the documents."""

    name = "fim"
    loss_name = "FIM loss (next-token on FIM-rearranged rows)"
    special_tokens = (PRE, SUF, MID)

    @dataclass
    class Options:
        fim_rate: float = opt(0.5, "probability that a document is rearranged")
        spm_rate: float = opt(0.5, "of the rearranged documents, probability of SPM instead of PSM")
        min_doc_tokens: int = opt(8, "documents shorter than this (in the row) stay as they are")

        def __post_init__(self):
            if not (0 <= self.fim_rate <= 1 and 0 <= self.spm_rate <= 1) or self.min_doc_tokens < 1:
                raise UserError(
                    f"fim needs fim_rate, spm_rate in [0, 1] and min_doc_tokens >= 1 (got {self.fim_rate}, "
                    f"{self.spm_rate}, {self.min_doc_tokens})"
                )

    def transform(self, tokens: Tensor, doc_ids: Tensor | None, generator=None) -> Tensor:
        """Rows (B, L) -> rows with FIM applied per document (same shape). ``generator``: one for all
        rows (None: the global RNG), or a list of one per row."""
        o = self.options
        pre, suf, mid = (self.special_ids[n] for n in (PRE, SUF, MID))
        rows = tokens.tolist()
        docs = doc_ids.tolist() if doc_ids is not None else [None] * len(rows)
        out = []
        gens = generator if isinstance(generator, list) else [generator] * len(rows)
        for row, row_docs, gen in zip(rows, docs, gens):
            new = list(row)
            for start, end in document_runs(row_docs, row, self.eot_id):
                stop = end - 1 if (self.eot_id is not None and row[end - 1] == self.eot_id) else end
                n = stop - start
                draw = torch.rand(4, generator=gen).tolist()  # apply?, spm?, two cut points
                if n < max(self.options.min_doc_tokens, 4) or draw[0] >= o.fim_rate:
                    continue
                m = n - 3
                cut1, cut2 = sorted(min(int(u * (m + 1)), m) for u in draw[2:])
                new[start:stop] = fim_document(
                    row[start:stop], cut1, cut2, draw[1] < o.spm_rate, pre, suf, mid
                )
            out.append(new)
        return torch.tensor(out, dtype=tokens.dtype, device=tokens.device)

    def prepare(self, tokens: Tensor, doc_ids: Tensor | None = None) -> Batch:
        seq = self.transform(tokens, doc_ids, self.row_generators(tokens, torch.device("cpu")))
        x, y = seq[:, :-1], seq[:, 1:]
        mask = self.attn_mask(None if doc_ids is None else doc_ids[:, :-1])
        return Batch(x, y, mask, is_causal=True)
