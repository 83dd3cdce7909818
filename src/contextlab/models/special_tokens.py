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
