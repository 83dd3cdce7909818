"""Model architectures by name: the plain GPT and the GPT variants whose inference differs.

An objective names the architecture it trains (``Objective.arch``) and its options
(``Objective.arch_options()``: the fields ``arch_option_names`` lists, which each variant
declares once in its options dataclass, e.g. ``ContextLMOptions``); the trainer builds it
with ``build_arch`` from the run's GPT shape, and checkpoints record the name so
``load_trained_model`` rebuilds the same class. A variant lives here (not in an objective)
when inference needs it too: ContextLM's predictor feeds every token prediction; MTP's
model evaluates with its next-token head.
"""

from __future__ import annotations

import dataclasses

from contextlab.errors import UserError
from contextlab.models.contextlm import ContextLM, ContextLMConfig
from contextlab.models.gpt import GPT, GPTConfig, current_fields
from contextlab.models.mtp import MTPConfig, MTPModel

ARCHS: dict[str, tuple[type[GPTConfig], type[GPT]]] = {
    "gpt": (GPTConfig, GPT),
    "contextlm": (ContextLMConfig, ContextLM),
    "mtp": (MTPConfig, MTPModel),
}


def _config_class(arch: str) -> type[GPTConfig]:
    if arch not in ARCHS:
        raise UserError(f"unknown model architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    return ARCHS[arch][0]


def arch_option_names(arch: str) -> list[str]:
    """The options architecture ``arch`` adds to the GPT shape, in declaration order ([] for "gpt")."""
    shape = {f.name for f in dataclasses.fields(GPTConfig)}
    return [f.name for f in dataclasses.fields(_config_class(arch)) if f.name not in shape]


def arch_config(arch: str, fields: dict) -> GPTConfig:
    """The config of architecture ``arch`` from a dict of its fields (e.g. a checkpoint's model_config)."""
    cls = _config_class(arch)
    fields = current_fields(fields)  # checkpoints written before a field was renamed
    unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise UserError(
            f"architecture {arch!r} has no option(s) {', '.join(unknown)}; "
            f"valid: {', '.join(sorted(arch_option_names(arch)))}"
        )
    return cls(**fields)


def build_arch(arch: str, base: GPTConfig, **arch_options):
    """A fresh model of architecture ``arch``: the GPT shape ``base`` plus the architecture's options."""
    cfg = arch_config(arch, {**dataclasses.asdict(base), **arch_options})
    return ARCHS[arch][1](cfg)
