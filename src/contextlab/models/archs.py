"""Model architectures by name: the plain GPT and the GPT variants whose inference differs.

An objective names the architecture it trains (``Objective.arch``) and its options
(``Objective.arch_options()``); the trainer builds it with ``build_arch`` from the run's
GPT shape, and checkpoints record the name so ``load_trained_model`` rebuilds the same
class. A variant lives here (not in an objective) when inference needs it too: ContextLM's
predictor feeds every token prediction; MTP's model evaluates with its next-token head.
"""

from __future__ import annotations

import dataclasses

from contextlab.errors import UserError
from contextlab.models.contextlm import ContextLM, ContextLMConfig
from contextlab.models.gpt import GPT, GPTConfig
from contextlab.models.mtp import MTPConfig, MTPModel

ARCHS: dict[str, tuple[type[GPTConfig], type[GPT]]] = {
    "gpt": (GPTConfig, GPT),
    "contextlm": (ContextLMConfig, ContextLM),
    "mtp": (MTPConfig, MTPModel),
}


def arch_config(arch: str, fields: dict) -> GPTConfig:
    """The config of architecture ``arch`` from a dict of its fields (e.g. a checkpoint's model_config)."""
    if arch not in ARCHS:
        raise UserError(f"unknown model architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    cls = ARCHS[arch][0]
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(fields) - names)
    if unknown:
        raise UserError(
            f"architecture {arch!r} has no option(s) {', '.join(unknown)}; "
            f"valid: {', '.join(sorted(names - {f.name for f in dataclasses.fields(GPTConfig)}))}"
        )
    return cls(**fields)


def build_arch(arch: str, base: GPTConfig, **arch_options):
    """A fresh model of architecture ``arch``: the GPT shape ``base`` plus the architecture's options."""
    cfg = arch_config(arch, {**dataclasses.asdict(base), **arch_options})
    return ARCHS[arch][1](cfg)
