"""Batched generation of a Hugging Face causal LM with ``transformers``' own ``generate``.

Any local causal LM (and a contextlab export, native Llama or with its custom code) is
decoded as the ecosystem decodes it: left padding with an attention mask, ``use_cache=True``,
``do_sample`` with temperature / top-k / top-p. contextlab's semantics are added around it:
a stop id ends a row and is not kept; a stop string ends a row once its decoded text holds it
(a ``StoppingCriteria``); ``on_token`` streams a single prompt through a ``BaseStreamer``.
Trade-off: ``transformers`` draws from torch's global generator, so a seed is applied with
``torch.manual_seed`` (reproducible on one machine, not the same draws as contextlab's loop).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer


class _StopStrings(StoppingCriteria):
    """Done per row once the text generated after the prompt holds one of the stop strings."""

    def __init__(self, start: int, stops: Sequence[str], detokenize: Callable[[list[int]], str]):
        self.start, self.stops, self.detokenize = start, list(stops), detokenize

    def __call__(self, input_ids, scores, **kwargs):
        done = [
            any(s in self.detokenize(row[self.start :].tolist()) for s in self.stops) for row in input_ids
        ]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


class _Stream(BaseStreamer):
    """Hands each new token of a one-row generation to ``on_token(0, id)`` (the prompt is skipped)."""

    def __init__(self, on_token, stop_ids: set[int]):
        self.on_token, self.stop_ids, self.prompt_seen, self.stopped = on_token, stop_ids, False, False

    def put(self, value):
        if not self.prompt_seen:  # generate first puts the whole prompt
            self.prompt_seen = True
            return
        for tok in value.reshape(-1).tolist():
            self.stopped = self.stopped or tok in self.stop_ids
            if not self.stopped:
                self.on_token(0, tok)

    def end(self):
        pass


def hf_generate_many(
    model, prompts, max_new_tokens: int, sampling, stop_ids, stop_strings, detokenize, on_token, autocast
) -> list[list[int]]:
    """New token ids of each prompt (see the module docstring)."""
    T = max(len(p) for p in prompts)
    pad = next(iter(stop_ids), 0)
    idx = torch.full((len(prompts), T), pad, dtype=torch.long)
    mask = torch.zeros(len(prompts), T, dtype=torch.long)
    for r, p in enumerate(prompts):
        idx[r, T - len(p) :], mask[r, T - len(p) :] = torch.as_tensor(list(p)), 1
    kwargs: dict = dict(do_sample=not sampling.greedy, max_new_tokens=max_new_tokens, use_cache=True)
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k or None, top_p=sampling.top_p)
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
    if stop_strings:
        kwargs["stopping_criteria"] = StoppingCriteriaList([_StopStrings(T, stop_strings, detokenize)])
    if on_token is not None and len(prompts) == 1:
        kwargs["streamer"] = _Stream(on_token, set(stop_ids))
    with torch.no_grad(), autocast():
        out = model.generate(
            input_ids=idx.to(model.device),
            attention_mask=mask.to(model.device),
            eos_token_id=list(stop_ids) or None,
            pad_token_id=pad,
            **kwargs,
        )
    return [_cut(row[T:].tolist(), stop_ids, stop_strings, detokenize) for row in out]


def _cut(ids: list[int], stop_ids, stop_strings, detokenize) -> list[int]:
    """A row's tokens up to its first stop id (not kept) or through the token completing a stop string."""
    for i, tok in enumerate(ids):
        if tok in stop_ids:
            return ids[:i]
        if stop_strings and any(s in detokenize(ids[: i + 1]) for s in stop_strings):
            return ids[: i + 1]
    return ids
