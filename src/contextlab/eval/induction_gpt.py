"""A GPT whose weights are written, not learned, to copy from its context: the positive control
that runs through the whole model path (RoPE attention, RMSNorm, the KV cache, the export).

``induction_gpt(vocab_size, order=m)`` builds an (m + 1)-block contextlab ``GPT`` (one head per
block) that predicts, at every position t, the token that followed an earlier occurrence of
the last m tokens (x[t-m+1], ..., x[t]), the most recent one when there are several: an
induction circuit over m tokens. Every token has a random unit code of ``code_dim`` numbers;
the residual stream holds m + 2 such slots and a constant:

    E       the current token's code (the embedding)
    P1..Pm  the codes of the tokens 1..m before
    O       the code the induction head copied
    C       a constant 1 (what positional queries and keys are made of)

- Blocks 1..m (previous-token heads): queries and keys come from C alone, placed in the
  high-frequency RoPE pairs so that their score is A * sum_i cos((delta - 1) * theta_i): it
  peaks at the previous position whatever the tokens. Block j's value copies slot j-1 (E, then
  P1, ...) of the previous position into slot j.
- Block m + 1 (induction head): the query is (E, P1..P(m-1)) at t, the key (P1..Pm) at s, both
  in RoPE pairs whose frequency is so low (``rope_base`` 1e12) that the rotation over the
  longest prompt is negligible: the score counts matching codes, m where the m tokens before s
  equal the last m tokens at t. A low-frequency positional term prefers the most recent match.
  The value copies E of s (the token that followed the match) into O; the MLP (GELU pairs:
  gelu(z) - gelu(-z) = z, so the MLP is linear here) replaces E by O.
- The output layer is the embedding (tied), read through the final norm on E only.

Every scale is set from a wanted margin in nats (``margin``) and the exact RMS of the stream,
which is constant because every slot holds one unit code. ``positional_margin`` computes, for a
prompt length, how far the previous-token score stands above every other position: RoPE's
frequencies are fixed by the base and the head size, and far positions whose phases all align
again could rival the previous one; the builder checks the margin up to ``context`` and refuses
lengths where it fails. Trade-off: a match of m = 3 tokens needs a BPE (with bytes, the last
three bytes recur all over a text and the copy is ambiguous; with a small BPE two tokens are
not enough either: "sky is" and "key is" end in the same two); the MLPs but the last are zero.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from contextlab.errors import UserError
from contextlab.models.gpt import GPT, GPTConfig

ROPE_BASE = 1e12  # low enough frequencies for content matching, high ones for positions
POSITIONAL_PAIRS = 64  # RoPE pairs 0..63 (highest frequencies) carry the previous-token scores


def _thetas(cfg: GPTConfig) -> np.ndarray:
    half = cfg.head_dim // 2
    return cfg.rope_base ** (-np.arange(half) * 2.0 / cfg.head_dim)


def positional_margin(cfg: GPTConfig, length: int, offset: int = 1) -> float:
    """sum_i cos((delta - offset) theta_i) over the positional pairs: its value at delta = offset
    minus its largest value at any other delta in [0, length) (the unscaled previous-token margin)."""
    theta = _thetas(cfg)[:POSITIONAL_PAIRS]
    delta = np.arange(length)[:, None]
    score = np.cos((delta - offset) * theta).sum(axis=1)
    return float(score[offset] - np.delete(score, offset).max())


def induction_gpt(
    vocab_size: int,
    *,
    context: int = 4096,
    order: int = 3,
    code_dim: int = 64,
    seed: int = 0,
    margin: float = 30.0,
) -> GPT:
    """The written induction GPT of the module docstring for a vocabulary of ``vocab_size`` ids,
    matching the last ``order`` tokens, checked to hold up to ``context`` tokens; ``margin``: nats
    by which every attention and the output prefer what the construction means them to."""
    if order < 1:
        raise UserError(f"order must be at least 1, got {order}")
    d = (order + 2) * code_dim + 4  # E, P1..P_order, O, C and three spare dims (an even head)
    cfg = GPTConfig(
        vocab_size=vocab_size,
        n_layer=order + 1,
        n_head=1,
        n_embd=d,
        context=context,
        rope_base=ROPE_BASE,
        mlp="gelu",
        mlp_hidden=2 * code_dim,
        tie_embeddings=True,
    )
    half = cfg.head_dim // 2
    if half - POSITIONAL_PAIRS - 2 < order * code_dim // 2:
        raise UserError(f"code_dim {code_dim} leaves no room for the content pairs; lower it")
    gap = positional_margin(cfg, context)
    if gap < 0.05:
        raise UserError(
            f"the previous-token head does not hold at {context} tokens (margin {gap:.3f}): RoPE's "
            "phases realign at a far position; lower the context"
        )
    codes = np.random.default_rng(seed).standard_normal((vocab_size, code_dim))
    codes /= np.linalg.norm(codes, axis=1, keepdims=True)
    model = GPT(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        _write(model, torch.tensor(codes, dtype=torch.float32), order, gap, margin)
    return model.eval()


def _write(model: GPT, codes: torch.Tensor, order: int, gap: float, margin: float) -> None:
    cfg = model.config
    V, k = codes.shape
    d, hs = cfg.n_embd, cfg.head_dim
    slots = [slice(i * k, (i + 1) * k) for i in range(order + 2)]  # E, P1..P_order, O
    E, O, C = slots[0], slots[-1], (order + 2) * k
    model.wte.weight[:V, E] = codes
    model.wte.weight[:V, C] = 1.0
    for block in model.blocks:
        block.norm1.weight.fill_(1.0)
        block.norm2.weight.fill_(1.0)
    theta = _thetas(cfg)
    for j in range(order):  # block j copies slot j of the previous position into slot j + 1
        r = math.sqrt((j + 2) / d)  # the stream holds E, P1..Pj and C: unit codes and a 1
        _previous_token_head(model.blocks[j], theta, C, slots[j], slots[j + 1], r, hs, margin / gap)
    r = math.sqrt((order + 2) / d)
    recency = int(
        np.argmin(np.abs(theta[:POSITIONAL_PAIRS] * cfg.context - 1.0))
    )  # cos falls over the context
    _induction_head(model.blocks[order], theta, slots, C, r, hs, margin, recency)
    _replace_by_copy(model.blocks[order].mlp, E, O, k, math.sqrt((order + 3) / d))
    # output logits: 3 * margin per unit of code match, read from E alone
    model.final_norm.weight[E] = margin * 3.0 * math.sqrt((order + 3) / d)


def _previous_token_head(block, theta, C: int, src: slice, dst: slice, r: float, hs: int, scale: float):
    """q, k from the constant: score = A * sum_i cos((delta - 1) theta_i); the value copies ``src``."""
    q, kk, v = block.attn.qkv.weight.view(3, hs, -1)  # (hs, d) each, one head
    c_hat = 1.0 / r  # the constant after the norm
    amp = scale * math.sqrt(hs) / c_hat**2
    for i in range(POSITIONAL_PAIRS):
        q[i, C] = amp
        kk[i, C], kk[i + hs // 2, C] = math.cos(theta[i]), math.sin(theta[i])
    n = src.stop - src.start
    v[torch.arange(n), torch.arange(src.start, src.stop)] = 1.0
    block.attn.proj.weight[torch.arange(dst.start, dst.stop), torch.arange(n)] = r  # undo the norm


def _induction_head(
    block, theta, slots: list[slice], C: int, r: float, hs: int, margin: float, recency_pair: int
):
    """query (E, P1..P_{m-1}) at t, key (P1..P_m) at s in the lowest-frequency pairs; value E -> O;
    ``recency_pair``: a pair whose cosine falls monotonically over the context (most recent first)."""
    order = len(slots) - 2
    n = slots[0].stop - slots[0].start
    q, kk, v = block.attn.qkv.weight.view(3, hs, -1)
    half = hs // 2
    pairs = torch.arange(half - order * n // 2, half)  # the lowest-frequency pairs
    dims = torch.cat([pairs, pairs + half])  # order * n dims, rotated by a negligible angle
    per_match = 2.0 * margin * math.sqrt(hs) * r * r  # one matching code adds 2 * margin to the score
    for j in range(order):
        chunk = dims[j * n : (j + 1) * n]
        q[chunk, torch.arange(slots[j].start, slots[j].stop)] = per_match  # x[t - j]
        kk[chunk, torch.arange(slots[j + 1].start, slots[j + 1].stop)] = 1.0  # x[s - 1 - j]
    recency = 0.25 * margin * math.sqrt(hs) * r * r  # at most half a margin between far and near matches
    q[recency_pair, C], kk[recency_pair, C] = recency, 1.0
    v[torch.arange(n), torch.arange(slots[0].start, slots[0].stop)] = 1.0
    O = slots[-1]
    block.attn.proj.weight[torch.arange(O.start, O.stop), torch.arange(n)] = r


def _replace_by_copy(mlp, E: slice, O: slice, n: int, r: float) -> None:
    """E += O - E through GELU pairs (gelu(z) - gelu(-z) = z): the stream's E becomes the copy."""
    rows = torch.arange(n)
    mlp.up.weight[rows, torch.arange(O.start, O.stop)] = 1.0
    mlp.up.weight[rows, torch.arange(E.start, E.stop)] = -1.0
    mlp.up.weight[rows + n, torch.arange(O.start, O.stop)] = -1.0
    mlp.up.weight[rows + n, torch.arange(E.start, E.stop)] = 1.0
    mlp.down.weight[torch.arange(E.start, E.stop), rows] = r
    mlp.down.weight[torch.arange(E.start, E.stop), rows + n] = -r
