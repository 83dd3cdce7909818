"""A GPT decoder: rotary positions, RMSNorm, SDPA attention, tied embeddings.

One plain ``nn.Module`` readable top to bottom. The trade-offs:

- Rotary position embeddings instead of learned ones, so a model trained at a context of ``context`` tokens
  can be evaluated on longer sequences (the cos/sin cache grows on demand). Frequencies,
  tables and their context extension (position interpolation, NTK, YaRN) live in
  ``models/rope.py``; the config names the method.
- Attention (``models/attention.py``; an optional KV cache, ``models/kv_cache.py``, for
  generation) goes through ``models/kernels.py``'s ``attention``: SDPA (flash on CUDA, fused
  on CPU, flat memory in T) except where another kernel measured faster. Masks (documents,
  a bidirectional prefix) are passed as ``attn_mask``: described (``models/masks.py``:
  FlexAttention block masks on CUDA, a dense boolean mask on CPU) or as a dense mask; the
  plain causal case passes ``is_causal=True`` and no mask, which is the fastest path.
- The vocabulary is padded to a multiple of 64 for faster matmuls; logits are sliced back
  to ``vocab_size``, so callers never see the padding.
- Variants (ContextLM, MTP) subclass ``GPT`` and override its hooks instead of copying the
  forward: ``prepare`` (rope tables and the mask, once per forward) and ``mix`` (called
  on the residual stream after the embeddings and after every block; the identity here).
- The model knows nothing about objectives or losses. Objectives reuse the building
  blocks: ``embed``, ``blocks``, ``final_norm``, ``unembed``, ``rope`` and ``Block``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from contextlab.errors import UserError
from contextlab.models.attention import Attention, LayerKV
from contextlab.models.kernels import RMSNorm
from contextlab.models.kv_cache import CacheStep, KVCache
from contextlab.models.masks import AttentionMask, prepare_mask
from contextlab.models.rope import check_extension, rope_tables


@dataclass
class GPTConfig:
    vocab_size: int = 257  # number of token ids the tokenizer produces
    n_layer: int = 4  # number of transformer blocks
    n_head: int = 4  # attention heads per block (n_embd must be divisible by it)
    n_embd: int = 256  # width of the residual stream
    context: int = 256  # training context length (RoPE still works beyond it)
    rope_base: float = 10000.0  # RoPE base ("theta") of the inverse frequencies
    rope_extension: str = "none"  # RoPE context extension: none, pi, ntk or yarn (see models/rope.py)
    rope_factor: float = 1.0  # extension factor s = extended context / original context
    rope_original_context: int = 0  # context the RoPE was trained at (YaRN's ramp); 0 = context
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


# GPTConfig fields renamed since checkpoints and exports were written: old name -> new name.
RENAMED_FIELDS = {"block_size": "context"}


def current_fields(fields: dict) -> dict:
    """A stored GPTConfig dict (a checkpoint's model_config, an export's config.json) under the
    current field names; a dict naming a field by both its names keeps the current one."""
    out = dict(fields)
    for old, new in RENAMED_FIELDS.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    return out


class GPTOutput(NamedTuple):
    logits: Tensor  # (B, T, vocab_size)
    hidden: Tensor  # (B, T, C) final hidden state, after the final norm
    layers: list[Tensor] | None  # residual stream at the asked layers (0 = embeddings), or None


class TrunkState(NamedTuple):
    """What every block of one forward shares, prepared once by ``GPT.prepare``."""

    rope: tuple[Tensor, Tensor]  # cos, sin ([B,] T, hs) fp32 (models/rope.py)
    attn_mask: object  # what the blocks get: a dense mask, a FlexAttention BlockMask, or None
    is_causal: bool  # the blocks add causality to a dense mask / to no mask
    given_mask: AttentionMask | Tensor | None  # the caller's mask before resolution (for variants)
    kv: CacheStep | None = None  # a cached forward: where its k/v go (models/kv_cache.py)

    def layer_kv(self, layer: int) -> LayerKV | None:
        """The cache view of attention layer ``layer`` (0-based), or None without a cache."""
        return None if self.kv is None else LayerKV(self.kv, layer)


# ---------------------------------------------------------------------------------------
# The transformer block


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
        kv: LayerKV | None = None,
    ) -> Tensor:
        """x (B, T, C); rope = model.rope(T, device) or None for no positions; attn_mask see GPT.forward;
        kv: this block's view of a cached forward (models/attention.py)."""
        x = x + self.drop(self.attn(self.norm1(x), rope, attn_mask, is_causal, kv))
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
            length = max(offset + T, self.config.context)
            cache = self._rope_cache = rope_tables(torch.arange(length, device=device), self.config)
        cos, sin = cache
        return cos[offset : offset + T].to(device), sin[offset : offset + T].to(device)

    # --- forward ------------------------------------------------------------------------

    def prepare(
        self,
        idx: Tensor,
        attn_mask=None,
        is_causal: bool = True,
        position_ids: Tensor | int | None = None,
        cache: KVCache | None = None,
        real: Tensor | None = None,
    ) -> TrunkState:
        """The rope tables and the resolved mask of a forward on idx (B, T): built once for every block.

        With a cache, idx are the next T tokens of each row (``real`` (B, T) False marks left padding):
        positions come from the cache and the mask is the cache step's."""
        T = idx.shape[1]
        if cache is not None:
            step = cache.step(T, real)
            cos, sin = self.rope(step.span, idx.device)  # (S, hs) each
            return TrunkState((cos[step.positions], sin[step.positions]), step.mask, False, None, step)
        if isinstance(position_ids, Tensor):  # (T,) or (B, T) explicit positions: no cache, no host sync
            rope = rope_tables(position_ids.to(idx.device), self.config)  # ([B,] T, hs)
        else:  # None or an int offset
            rope = self.rope(T, idx.device, offset=position_ids or 0)
        return TrunkState(rope, prepare_mask(attn_mask, is_causal, T, idx.device), is_causal, attn_mask)

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        """An empty KV cache for ``batch`` rows of up to ``capacity`` tokens (it grows past that)."""
        return KVCache(self.config.n_layer, batch, capacity, self.wte.weight.device)

    def mix(self, i: int, x: Tensor, state: TrunkState) -> Tensor:
        """Hook on the residual stream x (B, T, C) after block i (0 = embeddings); variants override it."""
        return x

    def run_blocks(
        self, x: Tensor, state: TrunkState, blocks: Iterable[nn.Module], wanted: set[int] = frozenset()
    ) -> tuple[Tensor, list[Tensor]]:
        """x (B, T, C) through ``blocks`` with ``mix`` after each: (output, residual stream at ``wanted``)."""
        layers = [x] if 0 in wanted else []  # layer 0: the embeddings, before any mix
        x = self.mix(0, x, state)
        for i, block in enumerate(blocks, start=1):
            y = block(x, state.rope, state.attn_mask, state.is_causal, state.layer_kv(i - 1))  # (B, T, C)
            x = self.mix(i, y, state)
            if i in wanted:
                layers.append(x)
        return x, layers  # layers in depth order

    def trunk(
        self,
        idx: Tensor,
        *,
        attn_mask: Tensor | None = None,
        is_causal: bool = True,
        position_ids: Tensor | int | None = None,
        return_hidden: bool | list[int] = False,
        cache: KVCache | None = None,
        real: Tensor | None = None,
    ):
        """Everything but the output layer: returns (final-normed hidden (B, T, C), layers or None)."""
        state = self.prepare(idx, attn_mask, is_causal, position_ids, cache, real)
        wanted = _layer_indices(return_hidden, self.config.n_layer)
        x, layers = self.run_blocks(self.embed(idx), state, self.blocks, wanted)
        return self.final_norm(x), (layers if return_hidden is not False else None)

    def forward(
        self,
        idx: Tensor,
        *,
        attn_mask: Tensor | None = None,
        is_causal: bool = True,
        position_ids: Tensor | int | None = None,
        return_hidden: bool | list[int] = False,
        cache: KVCache | None = None,
        real: Tensor | None = None,
    ) -> GPTOutput:
        """Run the model on token ids idx (B, T).

        attn_mask: an ``AttentionMask`` (documents, a bidirectional prefix: models/masks.py; it holds
            its own causality), or a bool (True = may attend) or additive float mask broadcastable
            to (B, 1, T, T). A tensor mask is combined with the causal mask when is_causal=True
            (default); pass is_causal=False to use it as given.
        position_ids: None (0..T-1), an int offset, or explicit positions (T,) or (B, T).
        return_hidden: False; True for the residual stream at every layer (n_layer + 1 tensors,
            index 0 = embeddings, i = after block i, before the final norm); or a list of indices.
        cache: a ``KVCache`` (``new_cache``): idx are the next tokens of each cached row, appended to
            it; the logits equal those of the full sequence. ``real`` (B, T) bool marks real tokens
            (False = left padding, never attended, no position). Masks and positions are the cache's.
        """
        hidden, layers = self.trunk(
            idx,
            attn_mask=attn_mask,
            is_causal=is_causal,
            position_ids=position_ids,
            return_hidden=return_hidden,
            cache=cache,
            real=real,
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
    def from_size(cls, name: str, vocab_size: int, context: int, **overrides) -> GPT:
        """A fresh model of a named size from SIZES, e.g. GPT.from_size("tiny-4x256", 257, 256)."""
        return cls(size_config(name, vocab_size, context, **overrides))


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


def size_config(name: str, vocab_size: int, context: int, **overrides) -> GPTConfig:
    """The GPTConfig of a named size; overrides replace any field."""
    if name not in SIZES:
        raise UserError(f"unknown model size {name!r}; choose one of: {', '.join(SIZES)}")
    return GPTConfig(**{**SIZES[name], "vocab_size": vocab_size, "context": context, **overrides})


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
        f"({_human(model.num_params(True))} non-embedding), vocab {c.vocab_size}, context {c.context}"
    )
