"""Infilling with a FIM-trained model: the prompt in its training layout, and the middle it generates.

``objectives/fim.py`` trains on documents rewritten as

    PSM   [PRE] prefix [SUF] suffix [MID] middle [EOT]
    SPM   [SUF] suffix [PRE] prefix [MID] middle [EOT]

(the separator [EOT] follows the middle when the document ended inside the training row).
An infilling prompt is exactly that layout up to and including [MID]; the model's greedy
continuation, cut at the first end-of-text or sentinel, is the middle. The sentinel ids
come from the model's own tokenizer spec by the rule training used
(``models.special_tokens.bind_special_tokens``); a model not trained with ``fim`` has no
sentinels and asking it for a FIM prompt is refused in one line.

Trade-offs: prefix and suffix are tokenized separately (for a byte tokenizer this is exactly
the training layout; for BPE, training cut at token boundaries of the whole document, so
the tokens at the two cuts may differ from training's). Generation is ``ModelAdapter.generate``
(greedy) as it is; this module never runs the model itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from contextlab.errors import UserError
from contextlab.models.special_tokens import (
    FIM_MIDDLE,
    FIM_PREFIX,
    FIM_SENTINELS,
    FIM_SUFFIX,
    bind_special_tokens,
)

Mode = Literal["psm", "spm"]
MODES = ("psm", "spm")


@dataclass(frozen=True)
class Sentinels:
    """The FIM sentinel ids of one model, and the ids that end a generated middle."""

    prefix: int
    suffix: int
    middle: int
    eot: int | None = None

    @property
    def stops(self) -> tuple[int, ...]:
        """End-of-text and every sentinel: a middle ends at the first of them."""
        ids = (self.prefix, self.suffix, self.middle)
        return ids if self.eot is None else (self.eot, *ids)


def fim_sentinels(adapter) -> Sentinels:
    """The sentinels of the adapter's model; a one-line error when it was not trained with ``fim``."""
    info = adapter.info
    if info.objective != "fim":
        raise UserError(
            f"{info.id} was trained with objective {info.objective}, not fim: it has no infilling "
            'sentinels; infill with a model trained with objective.name = "fim" (or use left-to-right '
            "generation from the prefix)"
        )
    spec = info.tokenizer or adapter.tokenizer.spec()
    ids, vocab = bind_special_tokens(spec, FIM_SENTINELS)
    if vocab > adapter.vocab_size:
        raise UserError(
            f"{info.id} has {adapter.vocab_size} token ids but its FIM sentinels need {vocab}: its "
            "tokenizer is not the one it was trained with; load the run's own tokenizer"
        )
    eot = spec.get("eot_id")
    return Sentinels(ids[FIM_PREFIX], ids[FIM_SUFFIX], ids[FIM_MIDDLE], None if eot is None else int(eot))


def infill_prompt(
    prefix_ids: Sequence[int], suffix_ids: Sequence[int], mode: Mode, sentinels: Sentinels
) -> list[int]:
    """The token ids before the middle, in the training layout of ``objectives/fim.py``."""
    s = sentinels
    if mode == "psm":
        return [s.prefix, *prefix_ids, s.suffix, *suffix_ids, s.middle]
    if mode == "spm":
        return [s.suffix, *suffix_ids, s.prefix, *prefix_ids, s.middle]
    raise UserError(f"infilling mode {mode!r} is unknown; use psm or spm")


def cut_at_stop(generated: Sequence[int], stops: Sequence[int]) -> tuple[list[int], bool]:
    """(the ids before the first stop id, whether a stop id was met)."""
    for i, t in enumerate(generated):
        if t in stops:
            return list(generated[:i]), True
    return list(generated), False


def infill(adapter, prefix: str, suffix: str, mode: Mode = "psm", max_new_tokens: int = 128) -> str:
    """The middle text a FIM-trained model generates (greedy) between ``prefix`` and ``suffix``.

    Prefix and suffix are cut to fit the model's context (prefix from the left, suffix from the
    right); generation stops at end-of-text, a sentinel, or ``max_new_tokens``."""
    if max_new_tokens < 1:
        raise UserError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    sentinels = fim_sentinels(adapter)
    pre, suf = adapter.encode(prefix), adapter.encode(suffix)
    room = adapter.context - 3 - max_new_tokens  # prompt tokens that fit with the answer
    if room < 2:
        raise UserError(
            f"max_new_tokens {max_new_tokens} leaves no room for a prompt in the context of "
            f"{adapter.context}; lower it"
        )
    keep_suf = min(len(suf), room // 2 if len(pre) > room // 2 else room - len(pre))
    suf = suf[:keep_suf]
    pre = pre[max(0, len(pre) - (room - len(suf))) :]
    prompt = infill_prompt(pre, suf, mode, sentinels)
    out = adapter.generate(prompt, max_new_tokens, stop=sentinels.stops)
    return adapter.tokenizer.decode(out)
