"""Model architectures by name: one record each, for training, loading and export alike.

An objective names the architecture it trains (``Objective.arch``) and its options
(``Objective.arch_options()``: the fields ``arch_option_names`` lists, which each variant
declares once in its options dataclass, e.g. ``ContextLMOptions``); the trainer builds it
with ``build_arch`` from the run's GPT shape, checkpoints record the name, and the model
opener (``contextlab.inference``) rebuilds the same class from it. A variant lives here (not
in an objective) when inference needs it too: ContextLM's predictor feeds every token
prediction; MTP's model evaluates with its next-token head.

Adding an architecture is one ``Arch`` record in ``ARCHS``: its config class, its model class
and what its Hugging Face export holds (``export``: the model to save and the entries the
export's config records). A run that continued a Hugging Face model records ``HF_ARCH``:
that model is ``transformers``' own and has no record here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

from torch import nn

from contextlab.errors import UserError
from contextlab.models.contextlm import ContextLM, ContextLMConfig
from contextlab.models.gpt import GPT, GPTConfig, current_fields
from contextlab.models.mtp import MTPConfig, MTPModel

HF_ARCH = "hf"  # the arch a checkpoint of a continued Hugging Face model records


class Arch(NamedTuple):
    config: type[GPTConfig]
    model: type[GPT]
    # (model to save, entries for the export's config): MTP saves its next-token GPT
    export: Callable[[nn.Module], tuple[nn.Module, dict]]


ARCHS: dict[str, Arch] = {
    "gpt": Arch(GPTConfig, GPT, lambda m: (m, {})),
    "contextlm": Arch(ContextLMConfig, ContextLM, lambda m: (m, {"arch": "contextlm"})),
    "mtp": Arch(
        MTPConfig, MTPModel, lambda m: (m.to_gpt(), {"arch": "mtp", "trained_heads": m.config.n_future})
    ),
}


def arch_of(model: nn.Module) -> str:
    """The name of ``model``'s architecture (the most derived record it is an instance of)."""
    model = getattr(model, "_orig_mod", model)  # a torch.compile'd model
    return next(name for name, arch in ARCHS.items() if type(model) is arch.model)


def _record(arch: str) -> Arch:
    if arch not in ARCHS:
        raise UserError(f"unknown model architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    return ARCHS[arch]


def arch_option_names(arch: str) -> list[str]:
    """The options architecture ``arch`` adds to the GPT shape, in declaration order ([] for "gpt")."""
    shape = {f.name for f in dataclasses.fields(GPTConfig)}
    return [f.name for f in dataclasses.fields(_record(arch).config) if f.name not in shape]


def arch_config(arch: str, fields: dict) -> GPTConfig:
    """The config of architecture ``arch`` from a dict of its fields (e.g. a checkpoint's model_config)."""
    cls = _record(arch).config
    fields = current_fields(fields)  # checkpoints written before a field was renamed
    unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise UserError(
            f"architecture {arch!r} has no option(s) {', '.join(unknown)}; "
            f"valid: {', '.join(sorted(arch_option_names(arch)))}"
        )
    return cls(**fields)


def build_from_fields(arch: str, fields: dict) -> GPT:
    """A fresh model of architecture ``arch`` from its config fields (a checkpoint's model_config)."""
    return _record(arch).model(arch_config(arch, fields))


def build_arch(arch: str, base: GPTConfig, **arch_options) -> GPT:
    """A fresh model of architecture ``arch``: the GPT shape ``base`` plus the architecture's options."""
    return build_from_fields(arch, {**dataclasses.asdict(base), **arch_options})
