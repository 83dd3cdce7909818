"""Multi-token prediction in Meta's arrangement (Gloeckle et al. 2024): a GPT with n heads.

A shared trunk (blocks 1..n_layer-1) feeds n head blocks; head k predicts token t+k from
positions <= t. Every head ends in the *shared* final norm and unembedding. Head 1 is the
GPT's own last block, so the next-token path is exactly a ``GPT`` of ``n_layer`` blocks:

    trunk = blocks[:-1]      head 1 = blocks[-1]      heads 2..n = future_heads[0..n-2]
    logits_k = unembed(final_norm(head_k(trunk(x))))

Trade-off: with n_future = 1 the model *is* the GPT (same parameters, same numbers), and
``forward`` / evaluation / generation / export use head 1 only, as in the paper; the
price is that the extra heads cost one block and one output layer each during training.
The extra heads' logits are computed one after another by the objective, not kept at once.

Cached generation (``models/kv_cache.py``): ``new_cache(..., heads=False)`` caches the trunk and
head 1 only, the next-token GPT. ``heads=True`` adds a layer per extra head; every cached
forward then runs all heads (so their caches never miss a position) and
``future_logits`` gives every head's logits at the last position, the drafts of
self-speculative decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
from torch import Tensor

from contextlab.config import opt
from contextlab.errors import UserError
from contextlab.models.gpt import GPT, Block, GPTConfig, TrunkState
from contextlab.models.kv_cache import KVCache


@dataclass
class MTPOptions:
    """What an MTP model adds to the GPT shape: the one declaration of its options (the ``mtp``
    objective's ``Options`` extend it with the loss weights)."""

    n_future: int = opt(4, "heads: head k predicts the token k steps ahead")

    def __post_init__(self):
        if self.n_future < 1:
            raise UserError(f"mtp n_future must be >= 1, got {self.n_future}")


@dataclass
class MTPConfig(MTPOptions, GPTConfig):
    """An MTP model's config: the GPT shape plus MTPOptions (fields in that order)."""

    def __post_init__(self):
        GPTConfig.__post_init__(self)
        MTPOptions.__post_init__(self)
        if self.n_layer < 2 and self.n_future > 1:
            raise UserError(
                "mtp needs n_layer >= 2: one trunk block at least, plus the next-token head block"
            )


class MTPModel(GPT):
    """GPT whose last block is head 1, plus n_future - 1 more head blocks on the same trunk."""

    def __init__(self, config: MTPConfig):
        super().__init__(config)
        self.future_heads = nn.ModuleList([Block(config) for _ in range(config.n_future - 1)])
        for block in self.future_heads:
            block.apply(self._init_module)

    def trunk_states(
        self,
        idx: Tensor,
        *,
        attn_mask: Tensor | None = None,
        is_causal: bool = True,
        position_ids: Tensor | int | None = None,
        cache: KVCache | None = None,
        real: Tensor | None = None,
    ) -> tuple[Tensor, TrunkState]:
        """(residual stream after the shared trunk (B, T, C), the rope and mask every head shares)."""
        state = self.prepare(idx, attn_mask, is_causal, position_ids, cache, real)
        z, _ = self.run_blocks(self.embed(idx), state, self.blocks[:-1])  # (B, T, C)
        return z, state

    def head_blocks(self) -> list[nn.Module]:
        """[head 1, head 2, ...]: head 1 is the GPT's last block."""
        return [self.blocks[-1], *self.future_heads]

    def head_logits(self, z: Tensor, k: int, state: TrunkState) -> Tensor:
        """Logits (B, T, V) of head k (1-based) from trunk states z (B, T, C)."""
        return self.unembed(self.head_hidden(z, k, state))

    def head_hidden(self, z: Tensor, k: int, state: TrunkState) -> Tensor:
        """Final-normed hidden state (B, T, C) of head k from trunk states z; cache layer n_layer - 2 + k."""
        block, layer = self.head_blocks()[k - 1], self.config.n_layer - 2 + k
        return self.final_norm(block(z, state.rope, state.attn_mask, state.is_causal, state.layer_kv(layer)))

    # --- cached generation ----------------------------------------------------------------

    def new_cache(self, batch: int, capacity: int, heads: bool = False) -> KVCache:
        """A KV cache of the trunk and head 1; with ``heads`` also of heads 2..n (for future_logits)."""
        extra = self.config.n_future - 1 if heads else 0
        return KVCache(self.config.n_layer + extra, batch, capacity, self.wte.weight.device)

    def mix(self, i: int, x: Tensor, state: TrunkState) -> Tensor:
        """After the trunk (block n_layer - 1) of a forward with a ``heads=True`` cache, run heads 2..n on
        it too (their caches never miss a position) and keep their hidden states for future_logits."""
        kv = state.kv
        if kv is not None and i == self.config.n_layer - 1 and kv.cache.n_layer > self.config.n_layer:
            n = self.config.n_future
            kv.cache.outputs["future_hidden"] = [self.head_hidden(x, k, state) for k in range(2, n + 1)]
        return x

    def future_logits(
        self, idx: Tensor, cache: KVCache, real: Tensor | None = None, last_only: bool = True
    ) -> Tensor:
        """Append idx (B, t) to a ``heads=True`` cache; every head's logits at the last position, (B, n, V)
        (row k-1 predicts the token k steps after it; row 0 is the next-token logits), or at every new
        position with last_only=False, (B, t, n, V) (verifying drafts also drafts after any of them)."""
        if cache.n_layer != self.config.n_layer + self.config.n_future - 1:
            raise ValueError("future_logits needs a cache made with new_cache(..., heads=True)")
        out = self(idx, cache=cache, real=real)
        hidden = [out.hidden, *cache.outputs.pop("future_hidden")]  # [(B, t, C)] * n
        if last_only:
            return self.unembed(torch.stack([h[:, -1] for h in hidden], dim=1))  # (B, n, V)
        return self.unembed(torch.stack(hidden, dim=2))  # (B, t, n, V)

    def all_logits(
        self, idx: Tensor, *, attn_mask: Tensor | None = None, is_causal: bool = True
    ) -> list[Tensor]:
        """Every head's logits, [(B, T, V)] * n_future; element k-1 predicts token t+k at position t."""
        z, state = self.trunk_states(idx, attn_mask=attn_mask, is_causal=is_causal)
        return [self.head_logits(z, k, state) for k in range(1, self.config.n_future + 1)]

    def to_gpt(self) -> GPT:
        """The next-token model as a plain GPT sharing these weights (for export)."""
        cfg = GPTConfig(**{f: getattr(self.config, f) for f in GPTConfig.__dataclass_fields__})
        gpt = GPT(cfg)
        state = {k: v for k, v in self.state_dict().items() if not k.startswith("future_heads.")}
        gpt.load_state_dict(state)
        return gpt
