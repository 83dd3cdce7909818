"""AdamW with weight decay on matrices only, and the learning-rate schedule.

The schedule is a pure function of the step (linear warm-up, then cosine decay to
``min_lr_ratio * lr``), so a resumed run needs no scheduler state: step N gets the same
learning rate whether or not the run was interrupted before it.

Weight decay applies to parameters with two or more dimensions (linear weights and the
embedding matrix); norms' gains and biases are not decayed, as in GPT-2/nanoGPT practice.
"""

from __future__ import annotations

import inspect
import math

import torch
from torch import nn


def lr_at(step: int, *, lr: float, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.1) -> float:
    """Learning rate for optimizer step ``step`` (0-based)."""
    if warmup_steps > 0 and step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    if total_steps <= warmup_steps:
        return lr
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    min_lr = lr * min_lr_ratio
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


def param_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    seen: set[int] = set()
    for _, p in module.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (decay if p.dim() >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_adamw(
    module: nn.Module, *, lr: float, weight_decay: float, betas: tuple[float, float], eps: float = 1e-8
) -> torch.optim.AdamW:
    """AdamW over ``module``; the fused CPU/GPU kernel when this torch has it."""
    kwargs = {}
    if "fused" in inspect.signature(torch.optim.AdamW).parameters:
        device = next(module.parameters()).device
        if device.type in ("cuda", "cpu"):
            kwargs["fused"] = True
    return torch.optim.AdamW(param_groups(module, weight_decay), lr=lr, betas=betas, eps=eps, **kwargs)
