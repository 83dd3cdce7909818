"""FLOPs per token of a GPT (and of the extra blocks and heads objectives add).

Pure arithmetic on a ``GPTConfig``: lives with the models so that objectives can count
their extra compute without importing the trainer. MFU and the measured peak stay in
``contextlab.train.flops``.

Convention (Kaplan et al. 2020 / nanoGPT's ``estimate_mfu``), all per token:

- Every parameter in a matrix multiply costs 2 FLOPs forward and 4 backward: 6N for a
  training step, 2N for a forward pass. N is the non-embedding parameter count (attention
  and MLP weights, biases and norm gains, which are negligible but counted so that N equals
  ``GPT.num_params(non_embedding=True)``) **plus the output layer** ``n_embd * vocab_size``:
  the token-embedding lookup is free, but the logits matmul is not, tied or untied.
  ``vocab_size`` is the real vocabulary, not the padded one: padding is an implementation
  detail and counting it would inflate MFU.
- Attention scores and the weighted sum cost 2 * 2 * n_layer * n_embd * T forward per
  token with T keys; times 3 for training gives nanoGPT's ``12 * n_layer * n_embd * T``.
  With ``causal_attention_discount=True`` it is halved, since a causal token sees T/2 keys
  on average (what flash attention actually computes). The default keeps nanoGPT's number
  so MFU figures compare with published ones.

Objectives that add compute (multi-token-prediction heads, a ContextLM predictor) add their
own per-token FLOPs through a function with the signature of ``extra_flops_per_token``,
built from ``block_flops_per_token`` and ``lm_head_flops_per_token``.
"""

from __future__ import annotations

from collections.abc import Callable

from contextlab.models.gpt import GPTConfig


def _flops_per_param(training: bool) -> int:
    return 6 if training else 2  # forward 2 (multiply + add); backward 4 (grads wrt input and weight)


def block_params(cfg: GPTConfig) -> int:
    """Parameters of one transformer Block: qkv, proj, MLP, two norm gains, biases if any."""
    C, H = cfg.n_embd, cfg.mlp_dim
    mlp_out = 2 * H if cfg.mlp == "swiglu" else H  # the first MLP Linear fuses gate and value for swiglu
    weights = C * 3 * C + C * C + C * mlp_out + H * C
    biases = (3 * C + C + mlp_out + C) if cfg.bias else 0
    return weights + biases + 2 * C


def non_embedding_params(cfg: GPTConfig) -> int:
    """Equals GPT(cfg).num_params(non_embedding=True): all blocks plus the final norm gain."""
    return cfg.n_layer * block_params(cfg) + cfg.n_embd


def block_flops_per_token(
    cfg: GPTConfig, context: int, *, training: bool = True, causal_attention_discount: bool = False
) -> float:
    """FLOPs per token of one Block attending over context keys (for objectives adding blocks)."""
    attention = 4 * cfg.n_embd * context * (0.5 if causal_attention_discount else 1.0)
    return _flops_per_param(training) * block_params(cfg) + (3 if training else 1) * attention


def lm_head_flops_per_token(cfg: GPTConfig, *, training: bool = True) -> float:
    """FLOPs per token of one output layer (n_embd x vocab_size matmul)."""
    return _flops_per_param(training) * cfg.n_embd * cfg.vocab_size


def extra_flops_per_token(cfg: GPTConfig, context: int, *, training: bool = True) -> float:
    """The hook for objectives: extra FLOPs per *input* token beyond the plain GPT. This default adds none.

    An objective with more compute writes a function with this signature and passes it as
    ``flops_per_token(..., extra=fn)``. Examples:

    - k extra multi-token-prediction heads, each one Block and one output layer:
      ``k * (block_flops_per_token(cfg, context) + lm_head_flops_per_token(cfg))``
    - a 2-layer ContextLM predictor over chunks of w tokens (one predictor position per w
      tokens, attending over context / w chunks):
      ``2 * block_flops_per_token(cfg, context // w) / w``
    """
    return 0.0


def flops_per_token(
    cfg: GPTConfig,
    context: int,
    *,
    training: bool = True,
    causal_attention_discount: bool = False,
    extra: Callable[..., float] = extra_flops_per_token,
) -> float:
    """Model FLOPs per token: (6 or 2) * (N_non_embedding + n_embd * vocab) + attention + extra."""
    n = non_embedding_params(cfg) + cfg.n_embd * cfg.vocab_size  # the output layer is a real matmul
    attention = 12 * cfg.n_layer * cfg.n_embd * context  # nanoGPT: 6 * (2 * L * C * T) for training
    if causal_attention_discount:
        attention /= 2
    if not training:
        attention /= 3
    return _flops_per_param(training) * n + attention + extra(cfg, context, training=training)
