"""Autoregressive decoding of contextlab models with the KV cache: batches, stops, streaming.

``generate(model, prompts, ...)`` left-pads prompts of any lengths into one batch, runs the
prompt once (prefill) into a ``KVCache`` and then one token per step, choosing tokens with
``inference/sampling.py``. A row stops at a stop id (not kept), at a stop string in its decoded
text (kept; ``cut_at_stop`` trims the text) or after ``max_new_tokens``. ``on_token(row, id)``
streams every kept token. ``recompute_greedy`` is the reference it must equal: greedy decoding
that re-runs the whole sequence at every step (tests and benchmarks compare the two).

Trade-offs: finished rows keep stepping with the batch until every row is done (no batch
compaction: simpler, and rows of one batch usually end together); only the last position's
logits are computed (the output layer on one row per step). The loop makes one host sync per
step (the new tokens, for stops and streaming).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from contextlab.inference.sampling import Sampling, next_tokens

OnToken = Callable[[int, int], None]  # (row, token id) of each kept token


def left_pad(prompts: Sequence[Sequence[int]], device) -> tuple[Tensor, Tensor | None]:
    """(ids (B, P) left-padded with 0, real (B, P) bool or None when every prompt has the same length)."""
    P = max(len(p) for p in prompts)
    idx = torch.zeros(len(prompts), P, dtype=torch.long)
    real = torch.zeros(len(prompts), P, dtype=torch.bool)
    for r, p in enumerate(prompts):
        if p:
            idx[r, P - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)
            real[r, P - len(p) :] = True
    same = len({len(p) for p in prompts}) == 1
    return idx.to(device), (None if same else real.to(device))


def last_logits(model, idx: Tensor, cache, real: Tensor | None = None) -> Tensor:
    """Append idx (B, t) to the cache; fp32 logits (B, V) of each row's last position."""
    hidden, _ = model.trunk(idx, cache=cache, real=real)  # (B, t, C)
    return model.unembed(hidden[:, -1]).float()


class _Rows:
    """Per-row outputs and stop state of one batch."""

    def __init__(self, n: int, stop_ids, stop_strings, detokenize, on_token):
        self.out: list[list[int]] = [[] for _ in range(n)]
        self.done = [False] * n
        self.stop_ids, self.stop_strings = set(stop_ids), list(stop_strings)
        self.detokenize, self.on_token = detokenize, on_token

    def add(self, tokens: list[int]) -> bool:
        """Record one step's tokens; True once every row is done."""
        for r, tok in enumerate(tokens):
            if self.done[r]:
                continue
            if tok in self.stop_ids:
                self.done[r] = True
                continue
            self.out[r].append(tok)
            if self.on_token is not None:
                self.on_token(r, tok)
            if self.stop_strings and any(s in self.detokenize(self.out[r]) for s in self.stop_strings):
                self.done[r] = True
        return all(self.done)


@torch.no_grad()
def generate(
    model,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    sampling: Sampling | None = None,
    stop_ids: Sequence[int] = (),
    stop_strings: Sequence[str] = (),
    detokenize: Callable[[list[int]], str] | None = None,
    on_token: OnToken | None = None,
    lead: Sequence[int] = (),
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> list[list[int]]:
    """The new token ids of every prompt (see the module docstring); ``lead`` ids go before every
    prompt (a model's left-to-right mode tokens) and are never returned. Needs ``detokenize`` (ids ->
    text) when ``stop_strings`` are given."""
    if stop_strings and detokenize is None:
        raise ValueError("stop strings need detokenize (ids -> text)")
    sampling = sampling or Sampling()
    rows = _Rows(len(prompts), stop_ids, stop_strings, detokenize, on_token)
    if max_new_tokens <= 0 or not prompts:
        return rows.out
    device = next(model.parameters()).device
    idx, real = left_pad([[*lead, *p] for p in prompts], device)
    generator = sampling.generator(device)
    cache = model.new_cache(idx.size(0), idx.size(1) + max_new_tokens)
    with autocast():
        logits = last_logits(model, idx, cache, real)  # (B, V)
        for step in range(max_new_tokens):
            tokens = next_tokens(logits, sampling, generator)  # (B,)
            if rows.add(tokens.tolist()) or step == max_new_tokens - 1:
                break
            logits = last_logits(model, tokens[:, None], cache)
    return rows.out


@torch.no_grad()
def recompute_greedy(
    model, prompt: Sequence[int], max_new_tokens: int, stop_ids: Sequence[int] = ()
) -> list[int]:
    """Greedy decoding without a cache: the whole sequence is re-run at every step (the reference)."""
    device = next(model.parameters()).device
    ids, out = list(prompt), []
    for _ in range(max_new_tokens):
        logits = model(torch.tensor([ids], device=device)).logits[0, -1].float()
        tok = int(logits.argmax())
        if tok in stop_ids:
            break
        out.append(tok)
        ids.append(tok)
    return out


def cut_at_stop(text: str, stop_strings: Sequence[str]) -> str:
    """text up to (not including) the earliest stop string in it."""
    cut = min((i for i in (text.find(s) for s in stop_strings) if i >= 0), default=len(text))
    return text[:cut]
