"""Attention masks described, not materialised: documents, a bidirectional prefix, causality.

Objectives say *which* keys a query may see (``AttentionMask``: per-position document ids,
per-row prefix lengths, causal or not); the model decides *how* that becomes attention:

- on CUDA, a FlexAttention ``BlockMask`` (``block_mask``): the (T/128)^2 tiles of the score
  matrix are classified from per-tile document ranges and prefix bounds as empty (skipped),
  full (no mask evaluated) or partial (the mask function runs inside the kernel). Building it
  costs O(B (T/128)^2), memory stays linear in T, and a packed row of many short documents
  costs *less* than plain causal attention because cross-document tiles are skipped;
- elsewhere, the dense (B, 1, T, T) boolean mask that ``F.scaled_dot_product_attention``
  takes (``dense``). FlexAttention has no CPU backward (torch 2.13), and at the contexts a CPU
  trains at the dense mask is cheap; it is O(T^2) memory, which is what the GPU path removes.

Both are the same function of the description: query q may see key k when
``(k <= q or not causal or (q < P and k < P)) and segments[q] == segments[k]``.
``backend="flex"`` forces FlexAttention (on CPU only without gradients, e.g. for tests and
long-context evaluation); ``"dense"`` forces the dense mask.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from contextlab.errors import UserError

BLOCK = 128  # FlexAttention tile (query and key) size
BACKENDS = ("auto", "flex", "dense")


@dataclass(frozen=True, eq=False)  # holds tensors: compared by identity
class AttentionMask:
    """Which keys each query may see, for rows of ``length`` positions."""

    length: int  # T, the number of positions (queries = keys)
    segments: Tensor | None = None  # (B, T) document id of each position: no attention across ids; None = one
    prefix: Tensor | None = None  # (B,) bidirectional prefix length P: q < P and k < P see each other
    causal: bool = True  # keys after the query are hidden (except inside the prefix)
    backend: str = "auto"  # auto (FlexAttention on CUDA, dense elsewhere), flex or dense

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise UserError(f"unknown attention backend {self.backend!r}; use one of {', '.join(BACKENDS)}")

    @property
    def device(self) -> torch.device | None:
        t = self.segments if self.segments is not None else self.prefix
        return t.device if t is not None else None

    def select(self, positions: Tensor) -> AttentionMask:
        """The mask between the given positions only, causal (ContextLM's chunk ends): keeps the documents."""
        segments = None if self.segments is None else self.segments[:, positions]
        return replace(self, length=len(positions), segments=segments, prefix=None, causal=True)

    # ------------------------------------------------------------------ the two forms
    def dense(self) -> Tensor:
        """(B or 1, 1, T, T) bool, True = may attend."""
        T, dev = self.length, self.device
        pos = torch.arange(T, device=dev)
        allowed = (
            (pos[None, :] <= pos[:, None]) if self.causal else torch.ones(T, T, dtype=torch.bool, device=dev)
        )
        allowed = allowed[None]  # (1, T, T) [b, q, k]
        if self.prefix is not None:
            inside = pos[None, :] < self.prefix[:, None]  # (B, T)
            allowed = allowed | (inside[:, :, None] & inside[:, None, :])
        if self.segments is not None:
            allowed = allowed & (self.segments[:, :, None] == self.segments[:, None, :])
        return allowed[:, None]

    def block_mask(self, device: torch.device | None = None):
        """The FlexAttention BlockMask: tiles classified as empty, full or partial (see the module
        docstring)."""
        from torch.nn.attention.flex_attention import BlockMask

        device = torch.device(device) if device is not None else (self.device or torch.device("cpu"))
        T = self.length
        n = -(-T // BLOCK)
        segments = None if self.segments is None else _pad_to(self.segments.to(device), n * BLOCK)
        prefix = None if self.prefix is None else self.prefix.to(device)
        # on CUDA the ~30 small tensor ops run as a few compiled kernels (they are launch-bound otherwise)
        build = _compiled_tiles() if device.type == "cuda" else tile_blocks
        kv, kv_idx, full, full_idx, q, q_idx, full_q, full_q_idx = build(
            segments, prefix, self.causal, n, _batch(self), device
        )
        return BlockMask(
            seq_lengths=(T, T),
            kv_num_blocks=kv,
            kv_indices=kv_idx,
            full_kv_num_blocks=full,
            full_kv_indices=full_idx,
            q_num_blocks=q,
            q_indices=q_idx,
            full_q_num_blocks=full_q,
            full_q_indices=full_q_idx,
            BLOCK_SIZE=(BLOCK, BLOCK),
            mask_mod=_mask_mod(self.causal, prefix, segments),
        )

    @torch.compiler.disable  # built eagerly even inside a compiled model (see flex_attention)
    def resolve(self, device: torch.device):
        """The form attention takes on ``device``: a BlockMask (FlexAttention) or a dense bool mask."""
        flex = self.backend == "flex" or (self.backend == "auto" and device.type == "cuda")
        if flex and device.type == "cpu" and torch.is_grad_enabled():
            raise UserError(
                "FlexAttention has no CPU backward; use the dense attention mask on CPU "
                "(backend auto) or train on a GPU"
            )
        return self.block_mask(device) if flex else self.dense()


def _batch(mask: AttentionMask) -> int:
    if mask.segments is not None:
        return mask.segments.shape[0]
    return mask.prefix.shape[0] if mask.prefix is not None else 1


def _pad_to(segments: Tensor, length: int) -> Tensor:
    pad = length - segments.shape[1]
    if pad == 0:
        return segments
    return torch.cat([segments, segments.new_full((segments.shape[0], pad), -1)], dim=1)


def tile_blocks(
    segments: Tensor | None, prefix: Tensor | None, causal: bool, n: int, B: int, device: torch.device
) -> tuple[Tensor, ...]:
    """Classify the n x n tiles and list them as FlexAttention wants: (partial kv counts, indices, full kv
    counts, indices, partial q counts, indices, full q counts, indices); segments padded to n * BLOCK."""
    tile = torch.arange(n, device=device)
    qi, kj = tile[:, None], tile[None, :]  # (n, 1), (1, n)
    if causal:
        some, every = (kj <= qi)[None], (kj < qi)[None]  # (1, n, n) [b, q tile, kv tile]
    else:
        some = every = torch.ones(1, n, n, dtype=torch.bool, device=device)
    if prefix is not None:
        P = prefix[:, None, None]  # (B, 1, 1)
        some = some | ((qi * BLOCK < P) & (kj * BLOCK < P))
        every = every | (((qi + 1) * BLOCK <= P) & ((kj + 1) * BLOCK <= P))
    if segments is not None:
        tiles = segments.view(B, n, BLOCK)
        lo, hi = tiles.amin(-1), tiles.amax(-1)  # (B, n) id range of each tile
        some = some & (lo[:, None, :] <= hi[:, :, None]) & (lo[:, :, None] <= hi[:, None, :])
        single = lo == hi
        every = every & (single[:, :, None] & single[:, None, :] & (lo[:, :, None] == lo[:, None, :]))
    full = every.expand(B, n, n)
    partial = some.expand(B, n, n) & ~full
    return (
        *_ordered(partial),
        *_ordered(full),
        *_ordered(partial.transpose(1, 2)),
        *_ordered(full.transpose(1, 2)),
    )


def _ordered(tiles: Tensor) -> tuple[Tensor, Tensor]:
    """(B, n, n) bool tiles -> counts (B, 1, n) and indices (B, 1, n, n) int32, the chosen tiles first
    in order."""
    num = tiles.sum(-1, dtype=torch.int32)
    order = torch.argsort(tiles.to(torch.int8), dim=-1, descending=True, stable=True).to(torch.int32)
    return num[:, None].contiguous(), order[:, None].contiguous()


_TILES = None


def _compiled_tiles():
    global _TILES
    if _TILES is None:
        _raise_recompile_limit()
        _TILES = torch.compile(tile_blocks, dynamic=False)
    return _TILES


def _raise_recompile_limit(limit: int = 64) -> None:
    """Every new row shape recompiles FlexAttention; past dynamo's limit (8) it would fall back to the eager
    version, which materialises the scores (out of memory at long contexts). Evaluations meet many shapes."""
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name) and getattr(cfg, name) < limit:
            setattr(cfg, name, limit)


def _mask_mod(causal: bool, prefix: Tensor | None, segments: Tensor | None):
    """The element rule of partial tiles, one closure per combination (stable code for torch.compile)."""
    if prefix is None and segments is not None:
        if causal:

            def document_causal(b, h, q, k):
                return (k <= q) & (segments[b, q] == segments[b, k])

            return document_causal

        def document(b, h, q, k):
            return segments[b, q] == segments[b, k]

        return document
    if prefix is not None and segments is None:

        def prefix_lm(b, h, q, k):
            return (k <= q) | ((q < prefix[b]) & (k < prefix[b]))

        return prefix_lm if causal else _everything
    if prefix is not None:

        def document_prefix_lm(b, h, q, k):
            return ((k <= q) | ((q < prefix[b]) & (k < prefix[b]))) & (segments[b, q] == segments[b, k])

        return document_prefix_lm if causal else document
    return _causal if causal else _everything


def _causal(b, h, q, k):
    return k <= q


def _everything(b, h, q, k):
    return q >= 0


_FLEX = None


@torch.compiler.disable
def flex_attention(q: Tensor, k: Tensor, v: Tensor, block_mask) -> Tensor:
    """FlexAttention through torch.compile (the eager one materialises the scores); q, k, v (B, nh, T, hs).

    Its own compiled function even inside a compiled model (train.compile): there the outer graph breaks
    around it, because lowering FlexAttention inside the model's graph failed on CUDA with torch 2.11
    ("'function' object has no attribute 'graph'") and gave wrong outputs on CPU for strided q, k, v."""
    global _FLEX
    if _FLEX is None:
        from torch.nn.attention.flex_attention import flex_attention as flex

        _raise_recompile_limit()
        _FLEX = torch.compile(flex, dynamic=False)
    return _FLEX(q, k, v, block_mask=block_mask)


def prepare_mask(attn_mask, is_causal: bool, T: int, device: torch.device):
    """What the blocks get: an AttentionMask resolved for ``device``; a dense mask restricted to its
    causal part when ``is_causal``; None stays None."""
    if attn_mask is None:
        return None
    if isinstance(attn_mask, AttentionMask):
        if attn_mask.length != T:
            raise ValueError(f"attention mask for {attn_mask.length} positions given to rows of {T}")
        return attn_mask.resolve(device)
    if is_causal:
        causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
        if attn_mask.dtype == torch.bool:
            return attn_mask & causal
        return torch.where(causal, attn_mask, float("-inf"))
    return attn_mask
