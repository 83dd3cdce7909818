"""A GPT decoder: rotary positions, RMSNorm, SDPA attention, tied embeddings.

One plain ``nn.Module`` readable top to bottom. The trade-offs:

- Rotary position embeddings instead of learned ones, so a model trained at ``block_size``
  can be evaluated on longer sequences (the cos/sin cache grows on demand). The inverse
  frequencies and their context extension (position interpolation, NTK, YaRN) come from
  ``models/rope.py`` through ``scaled_rope_cache``; the config names the method.
- Attention goes through ``F.scaled_dot_product_attention``: flash attention on CUDA, a
  fused kernel on CPU, flat memory in T. Masks (documents, a bidirectional prefix) are
  passed as ``attn_mask``: described (``models/masks.py``: FlexAttention block masks on
  CUDA, a dense boolean mask on CPU) or as a dense mask; the plain causal case passes
  ``is_causal=True`` and no mask, which is the fastest path. One measured exception
  (``attention``): unmasked bf16 on CPU with a small score tensor uses two batched matmuls,
  whose backward is much faster there.
- The vocabulary is padded to a multiple of 64 for faster matmuls; logits are sliced back
  to ``vocab_size``, so callers never see the padding.
- The model knows nothing about objectives or losses. Objectives reuse the building
  blocks: ``embed``, ``blocks``, ``final_norm``, ``unembed``, ``rope`` and ``Block``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from contextlab.errors import UserError
from contextlab.models.masks import flex_attention, prepare_mask
from contextlab.models.rope import check_extension, rope_frequencies


@dataclass
class GPTConfig:
    vocab_size: int = 257  # number of token ids the tokenizer produces
    n_layer: int = 4  # number of transformer blocks
    n_head: int = 4  # attention heads per block (n_embd must be divisible by it)
    n_embd: int = 256  # width of the residual stream
    block_size: int = 256  # training context length (RoPE still works beyond it)
    rope_base: float = 10000.0  # RoPE base ("theta") of the inverse frequencies
    rope_extension: str = "none"  # RoPE context extension: none, pi, ntk or yarn (see models/rope.py)
    rope_factor: float = 1.0  # extension factor s = extended context / original context
    rope_original_context: int = 0  # context the RoPE was trained at (YaRN's ramp); 0 = block_size
    mlp: str = "gelu"  # MLP kind: "gelu" (GPT-2 style, exact erf GELU) or "swiglu" (LLaMA style)
    mlp_ratio: float = 4.0  # MLP hidden width / n_embd (swiglu uses 2/3 of it, see mlp_dim)
    mlp_hidden: int | None = None  # explicit MLP hidden width; None derives it from mlp_ratio
    dropout: float = 0.0  # dropout on attention probabilities and residual branches
    bias: bool = False  # biases in the Linear layers
    norm_eps: float = 1e-5  # RMSNorm epsilon
    tie_embeddings: bool = True  # share the token embedding with the output layer
    init_std: float = 0.02  # std of the normal init (residual projections get /sqrt(2*n_layer))

    def __post_init__(self):
        if self.n_embd % self.n_head or (self.n_embd // self.n_head) % 2:
            raise UserError(
                f"model: n_embd={self.n_embd} must split into n_head={self.n_head} heads of even "
                "size; change n_embd or n_head"
            )
        if self.mlp not in ("gelu", "swiglu"):
            raise UserError(f"model.mlp={self.mlp!r} is unknown; use 'gelu' or 'swiglu'")
        try:
            check_extension(self.rope_extension, self.rope_factor)
        except ValueError as exc:
            raise UserError(f"model: {exc}") from None

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.n_embd // self.n_head

    @property
    def padded_vocab_size(self) -> int:
        """vocab_size rounded up to a multiple of 64 (rows of the embedding matrix)."""
        return -(-self.vocab_size // 64) * 64

    @property
    def mlp_dim(self) -> int:
        """MLP hidden width: mlp_hidden if given; for swiglu 2/3 of mlp_ratio*n_embd rounded up to 64."""
        if self.mlp_hidden is not None:
            return self.mlp_hidden
        if self.mlp == "swiglu":  # same parameter count as a gelu MLP of mlp_ratio
            return -(-int(2 / 3 * self.mlp_ratio * self.n_embd) // 64) * 64
        return int(self.mlp_ratio * self.n_embd)


class GPTOutput(NamedTuple):
    logits: Tensor  # (B, T, vocab_size)
    hidden: Tensor  # (B, T, C) final hidden state, after the final norm
    layers: list[Tensor] | None  # residual stream at the asked layers (0 = embeddings), or None


# ---------------------------------------------------------------------------------------
# Rotary position embeddings (half-split convention, as GPT-NeoX and LLaMA in HF)


def rope_inv_freq(head_dim: int, base: float, device=None) -> Tensor:
    """Inverse frequencies base^(-2i/head_dim), i < head_dim/2 (unscaled; see models/rope.py)."""
    exponents = torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
    return 1.0 / (base**exponents)  # (hs/2,)


def rope_tables(angles: Tensor) -> tuple[Tensor, Tensor]:
    """Angles (..., hs/2) -> cos = [cos, cos] and sin = [-sin, sin], each (..., hs), for apply_rope."""
    cos, sin = angles.cos(), angles.sin()
    return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)


def scaled_rope_cache(length: int, config: GPTConfig, device=None) -> tuple[Tensor, Tensor]:
    """rope_cache with the config's RoPE extension (models/rope.py): cos, sin (length, hs) fp32, times its scale."""
    inv_freq, scale = rope_frequencies(config, device)
    positions = torch.arange(length, device=device, dtype=torch.float32)
    cos, sin = rope_tables(torch.outer(positions, inv_freq))  # (length, hs) each
    return (cos * scale, sin * scale) if scale != 1.0 else (cos, sin)


def rope_cache(length: int, head_dim: int, base: float, device=None) -> tuple[Tensor, Tensor]:
    """rope_tables for positions 0..length-1: cos, sin each (length, hs), fp32."""
    positions = torch.arange(length, device=device, dtype=torch.float32)
    return rope_tables(torch.outer(positions, rope_inv_freq(head_dim, base, device)))


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate each pair (x[i], x[i + hs/2]) of x (..., hs); cos, sin from rope_tables, broadcast to x.

    x * [cos, cos] + [x2, x1] * [-sin, sin] = [x1 cos - x2 sin, x2 cos + x1 sin]; rolling by
    hs/2 swaps the halves. Three kernels, ~25% faster on CPU than chunk + cat.
    """
    return torch.addcmul(x * cos, x.roll(x.size(-1) // 2, dims=-1), sin)


# ---------------------------------------------------------------------------------------
# RMSNorm


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
    """``nn.RMSNorm`` (same parameter, same state dict) with a faster backward for fp32 inputs.

    Under bf16 autocast the residual stream stays fp32, so this is the path training takes;
    other dtypes and a missing weight use PyTorch's own ``F.rms_norm``.
    """

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype != torch.float32 or self.weight is None or self.weight.dtype != torch.float32:
            return super().forward(x)
        return _RMSNormFunction.apply(x, self.weight, self.eps if self.eps is not None else 1e-6)


# ---------------------------------------------------------------------------------------
# Attention

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
    ``AttentionMask``, see models/masks.py) goes to compiled FlexAttention. One exception, for speed: bf16 on CPU
    without a mask and with a small score tensor. There, SDPA's fused flash kernel
    runs its backward pass several times slower than two AMX/AVX-512 bf16 matmuls (at 4 heads,
    T=256, batch 32: forward + backward 100 ms vs 68 ms; a 4x256 training step gains ~20%),
    so the scores are materialised: softmax(q k^T / sqrt(hs) + causal bias) v, bf16 scores and
    probabilities with fp32 accumulation inside the matmuls and the softmax, as a mixed-precision
    GPU step without flash attention computes them. fp32 and every other case take SDPA.
    """
    B, nh, T, hs = q.shape
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


# ---------------------------------------------------------------------------------------
# The transformer block


class Attention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head, self.head_dim = config.n_head, config.head_dim
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # fused q, k, v
        self.proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.proj.residual_proj = True  # scaled init, see GPT._init_module
        self.dropout = config.dropout

    def forward(
        self, x: Tensor, rope: tuple[Tensor, Tensor] | None, attn_mask: Tensor | None, is_causal: bool
    ) -> Tensor:
        B, T, C = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.n_head, self.head_dim)  # (B, T, 3, nh, hs)
        if rope is not None:
            cos, sin = (t.to(qkv.dtype)[..., None, None, :] for t in rope)  # ([B,] T, 1, 1, hs)
            qk = apply_rope(qkv[:, :, :2], cos, sin)  # q and k in one go: (B, T, 2, nh, hs)
            q, k = qk.unbind(2)
        else:
            q, k = qkv[:, :, 0], qkv[:, :, 1]
        v = qkv[:, :, 2]  # (B, T, nh, hs)
        y = attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),  # (B, nh, T, hs) strided views
            attn_mask=attn_mask,
            is_causal=is_causal and attn_mask is None,  # a given mask already holds the causal part
            dropout_p=self.dropout if self.training else 0.0,
        )  # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, C)  # re-assemble heads; no copy when SDPA wrote (B, T, nh, hs)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.swiglu = config.mlp == "swiglu"
        hidden = config.mlp_dim
        self.up = nn.Linear(config.n_embd, (2 if self.swiglu else 1) * hidden, bias=config.bias)
        self.down = nn.Linear(hidden, config.n_embd, bias=config.bias)
        self.down.residual_proj = True

    def forward(self, x: Tensor) -> Tensor:
        h = self.up(x)  # (B, T, H) or (B, T, 2H) for swiglu (gate and value fused)
        if self.swiglu:
            gate, value = h.chunk(2, dim=-1)
            h = F.silu(gate) * value
        else:
            h = F.gelu(h)  # exact (erf) GELU: ~6x faster than the tanh approximation on CPU
        return self.down(h)  # (B, T, C)


class Block(nn.Module):
    """Pre-norm transformer block. Usable on its own (MTP heads, a context predictor)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.norm1 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.attn = Attention(config)
        self.norm2 = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.mlp = MLP(config)
        self.drop = nn.Dropout(config.dropout) if config.dropout > 0 else nn.Identity()

    def forward(
        self,
        x: Tensor,
        rope: tuple[Tensor, Tensor] | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = True,
    ) -> Tensor:
        """x (B, T, C); rope = model.rope(T, device) or None for no positions; attn_mask see GPT.forward."""
        x = x + self.drop(self.attn(self.norm1(x), rope, attn_mask, is_causal))
        x = x + self.drop(self.mlp(self.norm2(x)))
        return x  # (B, T, C)


# ---------------------------------------------------------------------------------------
# The model


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.padded_vocab_size, config.n_embd)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.final_norm = RMSNorm(config.n_embd, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.n_embd, config.padded_vocab_size, bias=False)  # padded logits
        if config.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        # RoPE cos/sin cache (L, hs) fp32: a plain attribute, not a buffer, so that .to(dtype),
        # meta-device init and checkpoint loading never touch it; built and grown by rope()
        self._rope_cache: tuple[Tensor, Tensor] | None = None
        self.apply(self._init_module)

    def _init_module(self, module: nn.Module) -> None:
        """GPT-2 init: N(0, init_std); residual projections N(0, init_std / sqrt(2 * n_layer))."""
        std = self.config.init_std
        if isinstance(module, nn.Linear):
            if getattr(module, "residual_proj", False):
                std = std / math.sqrt(2 * self.config.n_layer)
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.RMSNorm):
            nn.init.ones_(module.weight)

    # --- building blocks ----------------------------------------------------------------

    def embed(self, idx: Tensor) -> Tensor:
        """Token ids (B, T) -> embeddings (B, T, C)."""
        return self.wte(idx)

    def unembed(self, h: Tensor) -> Tensor:
        """Final-normed hidden states (B, T, C) -> logits (B, T, vocab_size)."""
        logits = self.lm_head(h)  # (B, T, padded_vocab)
        return logits[..., : self.config.vocab_size] if logits.size(-1) != self.config.vocab_size else logits

    def rope(self, T: int, device: torch.device | str | None = None, offset: int = 0):
        """cos, sin (see rope_tables) for positions offset..offset+T-1, each (T, hs) fp32; grows the cache."""
        device = torch.device(device) if device is not None else self.wte.weight.device
        cache = self._rope_cache
        if cache is None or cache[0].size(0) < offset + T or cache[0].device.type != device.type:
            length = max(offset + T, self.config.block_size)
            cache = self._rope_cache = scaled_rope_cache(length, self.config, device)
        cos, sin = cache
        return cos[offset : offset + T].to(device), sin[offset : offset + T].to(device)

    # --- forward ------------------------------------------------------------------------

    def trunk(
        self,
        idx: Tensor,
        *,
        attn_mask: Tensor | None = None,
        is_causal: bool = True,
        position_ids: Tensor | int | None = None,
        return_hidden: bool | list[int] = False,
    ):
        """Everything but the output layer: returns (final-normed hidden (B, T, C), layers or None)."""
        B, T = idx.shape
        if isinstance(position_ids, Tensor):  # (T,) or (B, T) explicit positions: no cache, no host sync
            inv_freq, scale = rope_frequencies(self.config, idx.device)  # with the RoPE extension, if any
            rope = rope_tables(position_ids.to(torch.float32)[..., None] * inv_freq)  # ([B,] T, hs)
            rope = tuple(t * scale for t in rope) if scale != 1.0 else rope
        else:  # None or an int offset
            rope = self.rope(T, idx.device, offset=position_ids or 0)
        attn_mask = prepare_mask(attn_mask, is_causal, T, idx.device)  # resolved once for every block

        x = self.embed(idx)  # (B, T, C)
        wanted = _layer_indices(return_hidden, self.config.n_layer)
        layers = [x] if 0 in wanted else []
        for i, block in enumerate(self.blocks, start=1):
            x = block(x, rope, attn_mask, is_causal)  # (B, T, C)
            if i in wanted:
                layers.append(x)
        return self.final_norm(x), (layers if return_hidden is not False else None)  # layers in depth order

    def forward(
        self,
        idx: Tensor,
        *,
        attn_mask: Tensor | None = None,
        is_causal: bool = True,
        position_ids: Tensor | int | None = None,
        return_hidden: bool | list[int] = False,
    ) -> GPTOutput:
        """Run the model on token ids idx (B, T).

        attn_mask: an ``AttentionMask`` (documents, a bidirectional prefix: models/masks.py; it holds
            its own causality), or a bool (True = may attend) or additive float mask broadcastable
            to (B, 1, T, T). A tensor mask is combined with the causal mask when is_causal=True
            (default); pass is_causal=False to use it as given.
        position_ids: None (0..T-1), an int offset, or explicit positions (T,) or (B, T).
        return_hidden: False; True for the residual stream at every layer (n_layer + 1 tensors,
            index 0 = embeddings, i = after block i, before the final norm); or a list of indices.
        """
        hidden, layers = self.trunk(
            idx,
            attn_mask=attn_mask,
            is_causal=is_causal,
            position_ids=position_ids,
            return_hidden=return_hidden,
        )
        return GPTOutput(self.unembed(hidden), hidden, layers)

    # --- bookkeeping --------------------------------------------------------------------

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; non_embedding leaves out the token embedding and output layer (tied or not)."""
        n = sum(p.numel() for p in self.parameters())  # a tied weight is counted once
        if non_embedding:
            n -= self.wte.weight.numel()
            if not self.config.tie_embeddings:
                n -= self.lm_head.weight.numel()
        return n

    @classmethod
    def from_size(cls, name: str, vocab_size: int, block_size: int, **overrides) -> GPT:
        """A fresh model of a named size from SIZES, e.g. GPT.from_size("tiny-4x256", 257, 256)."""
        return cls(size_config(name, vocab_size, block_size, **overrides))


def _layer_indices(return_hidden: bool | list[int], n_layer: int) -> set[int]:
    if return_hidden is True:
        return set(range(n_layer + 1))
    if return_hidden is False:
        return set()
    return {i % (n_layer + 1) for i in return_hidden}  # negative indices count from the end


# Named sizes (depth x width). Pythia-like entries copy only the shapes of those models.
SIZES: dict[str, dict] = {
    "tiny-2x128": dict(n_layer=2, n_embd=128, n_head=2),
    "tiny-4x256": dict(n_layer=4, n_embd=256, n_head=4),
    "tiny-6x384": dict(n_layer=6, n_embd=384, n_head=6),
    "small-8x512": dict(n_layer=8, n_embd=512, n_head=8),
    "gpt2-small": dict(n_layer=12, n_embd=768, n_head=12),
    "gpt2-medium": dict(n_layer=24, n_embd=1024, n_head=16),
    "gpt2-large": dict(n_layer=36, n_embd=1280, n_head=20),
    "gpt2-xl": dict(n_layer=48, n_embd=1600, n_head=25),
    "pythia-70m": dict(n_layer=6, n_embd=512, n_head=8),
    "pythia-160m": dict(n_layer=12, n_embd=768, n_head=12),
    "pythia-410m": dict(n_layer=24, n_embd=1024, n_head=16),
    "pythia-1b": dict(n_layer=16, n_embd=2048, n_head=8),
    "pythia-1.4b": dict(n_layer=24, n_embd=2048, n_head=16),
}


def size_config(name: str, vocab_size: int, block_size: int, **overrides) -> GPTConfig:
    """The GPTConfig of a named size; overrides replace any field."""
    if name not in SIZES:
        raise UserError(f"unknown model size {name!r}; choose one of: {', '.join(SIZES)}")
    return GPTConfig(**{**SIZES[name], "vocab_size": vocab_size, "block_size": block_size, **overrides})


def _human(n: float) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(int(n))


def describe_model(model: GPT) -> str:
    """One line: 'GPT 4x256 (4 heads, gelu), 3.2M parameters (3.1M non-embedding), vocab 257, context 256'."""
    c = model.config
    return (
        f"{type(model).__name__} {c.n_layer}x{c.n_embd} ({c.n_head} heads, {c.mlp}), "
        f"{_human(model.num_params(False))} parameters "
        f"({_human(model.num_params(True))} non-embedding), vocab {c.vocab_size}, context {c.block_size}"
    )
