"""The two hot operations of the GPT, each in the fastest form measured on its device.

- ``RMSNorm``: ``nn.RMSNorm`` (same parameter, same state dict) whose fp32 backward on CPU is
  written by hand: six passes over x instead of autograd's chain of composite ops (CUDA keeps
  PyTorch's own: the hand-written one broke compiled CUDA training, see the class).
- ``attention``: ``F.scaled_dot_product_attention`` (flash on CUDA, fused on CPU); a
  FlexAttention ``BlockMask`` goes to compiled FlexAttention (``models/masks.py``); unmasked
  bf16 on CPU with a small score tensor uses two batched matmuls, whose backward is faster.

Trade-off: the model (``models/gpt.py``) reads as what it computes and these functions carry
the device-specific speed tricks; each trick keeps the numbers of the plain op it replaces
up to floating-point rounding and falls back to it outside the measured case.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from contextlab.errors import UserError
from contextlab.models.masks import flex_attention


class _RMSNormFunction(torch.autograd.Function):
    """y = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps), and a hand-written backward.

    PyTorch's CPU rms_norm is a composite of pow, mean, add, rsqrt and two muls, and autograd
    differentiates each of them; this keeps (x, rstd) and computes the gradients in six
    passes over x: xhat = x rstd, dw = sum(g xhat), dx = rstd (g w - xhat mean(g w xhat)).
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        ss = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_()
        rstd = ss.div_(x.size(-1)).add_(eps).rsqrt_().to(x.dtype)  # (..., 1)
        ctx.save_for_backward(x, weight, rstd)
        return torch.mul(x, rstd).mul_(weight)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight, rstd = ctx.saved_tensors
        xhat = x * rstd
        grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = (grad * xhat).flatten(0, -2).sum(0)
        gw = grad * weight
        dot = (gw * xhat).mean(-1, keepdim=True)
        return torch.addcmul(gw, xhat, dot, value=-1.0).mul_(rstd), grad_weight, None


class RMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` (same parameter, same state dict) with a faster backward for fp32 inputs on CPU.

    Under bf16 autocast the residual stream stays fp32, so this is the path CPU training takes;
    other dtypes, a missing weight and every other device use PyTorch's own ``F.rms_norm``. Not on
    CUDA: there the hand-written Function inside a ``torch.compile``d model trained models that
    stopped near a bigram's loss (measured on an H200, 2026-11-26: compiled 5.80 vs eager 4.00 over
    the last quarter of 200 steps; compiled with PyTorch's RMSNorm 4.00), and PyTorch's CUDA
    rms_norm is fused already.
    """

    def forward(self, x: Tensor) -> Tensor:
        if (
            x.device.type != "cpu"
            or x.dtype != torch.float32
            or self.weight is None
            or self.weight.dtype != torch.float32
        ):
            return super().forward(x)
        return _RMSNormFunction.apply(x, self.weight, self.eps if self.eps is not None else 1e-6)


# Largest score tensor (batch x heads x T x T elements) for which bf16 attention on CPU is
# computed with two batched matmuls instead of SDPA's fused kernel: 2^25 elements = 64 MB of
# bf16 probabilities kept for backward per layer (batch 32 x 4 heads x 512^2 fits).
MATMUL_ATTENTION_MAX_SCORES = 1 << 25
_causal_bias: dict[tuple[int, torch.dtype], Tensor] = {}


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> Tensor:
    """Scaled dot-product attention of q, k, v (B, nh, T, hs) -> (B, nh, T, hs); arguments as SDPA's.

    Almost always ``F.scaled_dot_product_attention``; a FlexAttention ``BlockMask`` (a resolved
    ``AttentionMask``, see models/masks.py) goes to compiled FlexAttention. One exception, for
    speed: bf16 on CPU without a mask and with a small score tensor. There, SDPA's fused flash
    kernel runs its backward pass several times slower than two AMX/AVX-512 bf16 matmuls (at 4
    heads, T=256, batch 32: forward + backward 100 ms vs 68 ms; a 4x256 training step gains ~20%),
    so the scores are materialised: softmax(q k^T / sqrt(hs) + causal bias) v, bf16 scores and
    probabilities with fp32 accumulation inside the matmuls and the softmax, as a mixed-precision
    GPU step without flash attention computes them. fp32 and every other case take SDPA.
    """
    B, nh, T, _ = q.shape
    if attn_mask is not None and not isinstance(attn_mask, Tensor):  # a FlexAttention BlockMask
        if dropout_p > 0.0:
            raise UserError(
                "attention dropout does not combine with document or prefix masks on the GPU "
                "(FlexAttention); set model.dropout=0"
            )
        return flex_attention(q.contiguous(), k.contiguous(), v.contiguous(), attn_mask)
    if (
        q.device.type != "cpu"
        or q.dtype != torch.bfloat16
        or attn_mask is not None
        or k.size(-2) != T
        or B * nh * T * T > MATMUL_ATTENTION_MAX_SCORES
    ):
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=dropout_p
        )
    return _matmul_attention(q, k, v, is_causal, dropout_p)


def _matmul_attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, dropout_p: float) -> Tensor:
    """attention's CPU bf16 path: softmax(q k^T / sqrt(hs) + causal bias) v in two batched matmuls."""
    B, nh, T, hs = q.shape
    qf, kt, vf = q.reshape(B * nh, T, hs), k.reshape(B * nh, T, hs).transpose(1, 2), v.reshape(B * nh, T, hs)
    with torch.autocast(
        "cpu", enabled=False
    ):  # keep every product in bf16 (autocast would upcast the softmax)
        if is_causal:
            key = (T, q.dtype)
            if key not in _causal_bias:
                _causal_bias[key] = torch.full((T, T), float("-inf"), dtype=q.dtype).triu(1)
            scores = torch.baddbmm(_causal_bias[key], qf, kt, alpha=hs**-0.5)  # (B*nh, T, T)
        else:
            scores = torch.bmm(qf, kt).mul_(hs**-0.5)
        probs = scores.softmax(-1)
        if dropout_p > 0.0:
            probs = F.dropout(probs, dropout_p)
        return torch.bmm(probs, vf).view(B, nh, T, hs)
