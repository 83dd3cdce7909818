"""Self-speculative greedy decoding with an MTP model's extra heads (blockwise parallel decoding).

One cached forward of an ``MTPModel`` (``models/mtp.py``) on n = n_future input tokens per row
does two jobs at once:

- verify: the inputs are the pending token p (head 1's greedy token, exact) and the drafts
  d_2..d_n that heads 2..n proposed for the tokens after it. Head 1 at every input position
  gives the greedy token that follows it: g_0 after p, g_1 after d_2, ... The longest prefix
  of drafts with d_{i+2} = g_i is accepted, j drafts; the verifier's own token g_j becomes the
  next pending token. The j + 1 tokens emitted are exactly those plain greedy decoding emits.
- draft: heads 2..n at the last accepted position j propose the tokens after g_j.

The cache rows are then truncated to the accepted positions (``KVCache.truncate``): the k/v of
rejected drafts, in every layer and every head's block, are dropped and later forwards
overwrite them. The prompt's prefill forward gives the first pending token and drafts.

Trade-offs: greedy only (sampling would need the rejection-sampling acceptance rule, which
no longer reproduces plain decoding token for token); every forward runs all n head blocks
on all n inputs (each head block is a transformer block with its own cache, which must hold
every accepted position), so a forward costs (n_layer - 1 + n) blocks on n tokens against
n_layer blocks on one token for plain decoding: the extra heads pay back only when enough
drafts are accepted. Rows of a batch accept different numbers of drafts; the cache keeps a
length per row, so batches (left-padded prompts included) are supported, at the price of
the cache's masked, scattered path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from contextlab.errors import UserError
from contextlab.inference.decode import OnToken, _Rows, left_pad
from contextlab.models.mtp import MTPModel


@dataclass
class SpeculativeStats:
    """Counts of one speculative decoding run (rows of a batch summed, finished rows left out)."""

    n_future: int
    forwards: int = 0  # model forwards, the prefill included
    row_forwards: int = 0  # forwards x rows still generating in them
    row_tokens: int = 0  # tokens those rows emitted (before trimming to max_new_tokens)
    attempted: list[int] = field(default_factory=list)  # per head 2..n: drafts verified
    accepted: list[int] = field(default_factory=list)  # per head 2..n: drafts accepted

    def __post_init__(self):
        self.attempted = self.attempted or [0] * (self.n_future - 1)
        self.accepted = self.accepted or [0] * (self.n_future - 1)

    @property
    def tokens_per_forward(self) -> float:
        """Tokens a row gets from one forward (plain greedy decoding: 1)."""
        return self.row_tokens / max(self.row_forwards, 1)

    def line(self) -> str:
        """One line of what the drafts gave: tokens a forward, and how often each head's draft held."""
        heads = ", ".join(
            f"head {k} {'–' if rate is None else f'{100 * rate:.0f}%'}"
            for k, rate in zip(range(2, self.n_future + 1), self.acceptance_per_head().values())
        )
        return (
            f"speculative: {self.tokens_per_forward:.2f} tokens a forward (plain greedy decoding: 1) over "
            f"{self.forwards:,} forwards; drafts accepted: {heads}"
        )

    def acceptance_per_head(self) -> dict[str, float | None]:
        """{"head2": rate, ...}: head k's draft accepted given that the drafts of heads < k were."""
        return {
            f"head{k}": (a / t if t else None)
            for k, a, t in zip(range(2, self.n_future + 1), self.accepted, self.attempted)
        }


def check_speculative(model) -> MTPModel:
    """The model if it can draft for itself; else a UserError naming the fix."""
    if not isinstance(model, MTPModel):
        raise UserError(
            f"speculative decoding needs an MTP model (objective mtp, n_future >= 2), got a "
            f"{type(model).__name__}; drop --speculative or use a model trained with objective mtp (an "
            "export of one keeps only its next-token head: give the run folder, which has the others)"
        )
    if model.config.n_future < 2:
        raise UserError(
            "speculative decoding needs n_future >= 2 (extra heads that draft), this MTP model has "
            "n_future = 1; drop --speculative or train with objective.options.n_future >= 2"
        )
    return model


def _verify(model: MTPModel, pending: Tensor, drafts: Tensor, cache) -> tuple[Tensor, Tensor, Tensor]:
    """One forward on [pending, drafts] (B, n): (accepted drafts (B,), next pending (B,), next drafts)."""
    base = list(cache.lengths)
    inputs = torch.cat([pending[:, None], drafts], dim=1)  # (B, n)
    logits = model.future_logits(inputs, cache, last_only=False)  # (B, n inputs, n heads, V)
    greedy = logits[:, :, 0].argmax(-1)  # (B, n): head 1's greedy token after each input
    n_acc = (greedy[:, :-1] == drafts).long().cumprod(1).sum(1)  # (B,) longest agreeing prefix
    cache.truncate([b + 1 + a for b, a in zip(base, n_acc.tolist())])  # keep pending + accepted drafts
    rows = torch.arange(inputs.size(0), device=inputs.device)
    nxt = greedy[rows, n_acc]  # (B,) the verifier's own next token
    return n_acc, nxt, logits[rows, n_acc, 1:].argmax(-1)  # heads 2..n at the last accepted input


def _count(stats: SpeculativeStats, n_acc: list[int], active: list[bool]) -> None:
    """Add one verify forward's acceptances of the still-generating rows to ``stats``."""
    for a, live in zip(n_acc, active):
        if not live:
            continue
        stats.row_forwards += 1
        stats.row_tokens += a + 1
        for i in range(len(stats.attempted)):  # head i + 2 is tried when heads 2..i + 1 were accepted
            stats.attempted[i] += a >= i
            stats.accepted[i] += a >= i + 1


def _blocks(model: MTPModel, idx: Tensor, real: Tensor | None, live: list[bool], stats: SpeculativeStats):
    """Yield each forward's new tokens per row [[ids]] * B, forever: the prefill's head-1 token, then
    every verify's accepted drafts and the verifier's token. ``live`` (set by the caller) says which
    rows still generate; only those are counted in ``stats``."""
    B, T = idx.shape
    cache = model.new_cache(B, 2 * T + 64, heads=True)  # grows on demand
    first = model.future_logits(idx, cache, real).argmax(-1)  # (B, n): every head at the prompt's end
    pending, drafts = first[:, 0], first[:, 1:]  # (B,) head 1's token, (B, n - 1) the drafts after it
    stats.forwards += 1
    stats.row_forwards, stats.row_tokens = stats.row_forwards + sum(live), stats.row_tokens + sum(live)
    yield [[t] for t in pending.tolist()]
    while True:
        n_acc, nxt, new_drafts = _verify(model, pending, drafts, cache)
        stats.forwards += 1
        acc = n_acc.tolist()
        _count(stats, acc, live)
        yield [[*d[:a], p] for a, d, p in zip(acc, drafts.tolist(), nxt.tolist())]
        pending, drafts = nxt, new_drafts


@torch.no_grad()
def speculative_greedy(
    model: MTPModel,
    idx: Tensor,
    max_new_tokens: int,
    real: Tensor | None = None,
    stats: SpeculativeStats | None = None,
) -> Tensor:
    """Greedy continuation (B, max_new_tokens) of prompts idx (B, T), identical to plain greedy decoding.

    real (B, T) bool marks the prompt's real tokens (False = left padding); ``stats`` collects
    forwards and acceptances (see ``SpeculativeStats``).
    """
    model = check_speculative(model)
    if max_new_tokens < 1:
        raise UserError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    stats = stats if stats is not None else SpeculativeStats(model.config.n_future)
    out: list[list[int]] = [[] for _ in range(idx.size(0))]
    live = [True] * len(out)
    for block in _blocks(model, idx, real, live, stats):
        for row, tokens in zip(out, block):
            row.extend(tokens)
        live[:] = [len(o) < max_new_tokens for o in out]
        if not any(live):
            break
    return torch.tensor([o[:max_new_tokens] for o in out], dtype=torch.long, device=idx.device)


@torch.no_grad()
def speculative_generate(
    model,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    stop_ids: Sequence[int] = (),
    stop_strings: Sequence[str] = (),
    detokenize: Callable[[list[int]], str] | None = None,
    on_token: OnToken | None = None,
    lead: Sequence[int] = (),
    autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    stats: SpeculativeStats | None = None,
) -> list[list[int]]:
    """``models.decode.generate`` with greedy sampling, by self-speculative decoding: the same tokens,
    stops and streaming (a row's tokens stream as each forward accepts them)."""
    model = check_speculative(model)
    if stop_strings and detokenize is None:
        raise ValueError("stop strings need detokenize (ids -> text)")
    stats = stats if stats is not None else SpeculativeStats(model.config.n_future)
    rows = [_Rows(1, stop_ids, stop_strings, detokenize, _stream(on_token, r)) for r in range(len(prompts))]
    if max_new_tokens <= 0 or not prompts:
        return [[] for _ in prompts]
    idx, real = left_pad([[*lead, *p] for p in prompts], next(model.parameters()).device)
    steps = [0] * len(prompts)  # tokens decided per row, stop ids included (as generate counts them)
    live = [True] * len(prompts)
    with autocast():
        for block in _blocks(model, idx, real, live, stats):
            for r, tokens in enumerate(block):
                for tok in tokens:
                    if not live[r]:
                        break
                    steps[r] += 1
                    live[r] = not rows[r].add([tok]) and steps[r] < max_new_tokens
            if not any(live):
                break
    return [row.out[0] for row in rows]


def _stream(on_token: OnToken | None, row: int) -> OnToken | None:
    """A one-row ``_Rows``' callback that reports the batch row."""
    return None if on_token is None else (lambda _r, tok: on_token(row, tok))
