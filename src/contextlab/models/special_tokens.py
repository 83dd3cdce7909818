"""Special tokens an objective adds to a tokenizer: their names and how they get their ids.

A model trained with an objective that adds tokens (FIM's sentinels, UL2's mode tokens,
span corruption's sentinels) has a vocabulary larger than its data's tokenizer; the extra
ids are not written anywhere, they follow from one rule: a name the data's tokenizer
already has keeps that id, the others are appended after the data's vocabulary in the
objective's order. Training (``Objective.bind_tokenizer``) and inference (infilling,
``contextlab.eval.fim_prompt``) both use ``bind_special_tokens``, so the two cannot disagree.
Trade-off: the ids are recomputed from the tokenizer spec rather than stored in every
checkpoint, so runs written before this module exist keep working.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch only where the lead is put on a tensor
    from torch import Tensor

FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"
FIM_SENTINELS = (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)  # the FIM objective's special tokens, in order


def bind_special_tokens(spec: dict, names: Sequence[str]) -> tuple[dict[str, int], int]:
    """(name -> id for each of ``names``, the model's vocabulary size) for a tokenizer spec
    (``vocab_size``, optional ``special_tokens``): known names keep their id, new ones are appended."""
    existing = spec.get("special_tokens") or {}
    ids, nxt = {}, int(spec["vocab_size"])
    for name in names:
        if name in existing:
            ids[name] = int(existing[name])
        else:
            ids[name] = nxt
            nxt += 1
    return ids, nxt


# ------------------------------------------------------------ tokens before every row


def with_lead(idx: Tensor, lead: list[int]) -> Tensor:
    """``idx`` (B, T) with the ``lead`` ids (a BOS, a mode token) put before every row; ``idx`` for none."""
    if not lead:
        return idx
    import torch

    ids = torch.tensor(lead, dtype=idx.dtype, device=idx.device).expand(idx.size(0), -1)
    return torch.cat([ids, idx], dim=1)


def without_lead(t: Tensor, lead: list[int]) -> Tensor:
    """An output over ``with_lead(idx, lead)`` (B, T + len(lead), ...) cut back to ``idx``'s positions."""
    return t[:, len(lead) :] if lead else t
