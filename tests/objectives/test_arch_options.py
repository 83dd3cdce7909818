"""Architecture options are declared once (models layer) and reach the model unchanged.

ContextLM's and MTP's options live in ``ContextLMOptions`` / ``MTPOptions``; the model configs
extend them and the objectives' ``Options`` are (or extend) them, so a TOML options table
builds the same model whichever way it travels.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from contextlab.config import field_help, from_dict
from contextlab.errors import UserError
from contextlab.models.archs import ARCHS, arch_option_names, build_arch
from contextlab.models.contextlm import ContextLMConfig, ContextLMOptions
from contextlab.models.gpt import GPTConfig
from contextlab.models.mtp import MTPConfig, MTPOptions
from contextlab.objectives import OBJECTIVES

SHAPE = GPTConfig(vocab_size=50, n_layer=2, n_head=2, n_embd=32, context=32)


def test_each_option_has_one_declaration():
    """The objective's field, the model config's field and the options class' field are one object."""
    for options, config in ((ContextLMOptions, ContextLMConfig), (MTPOptions, MTPConfig)):
        declared = {f.name: f for f in dataclasses.fields(options)}
        name = next(a for a, arch in ARCHS.items() if arch.config is config)
        assert list(declared) == arch_option_names(name)
        in_config = {f.name: f for f in dataclasses.fields(config)}
        assert all(in_config[name] is field for name, field in declared.items())
        assert all(field_help(options, name) for name in declared)  # each documents itself
    assert OBJECTIVES["contextlm"].Options is ContextLMOptions
    mtp_fields = {f.name: f for f in dataclasses.fields(OBJECTIVES["mtp"].Options)}
    assert mtp_fields["n_future"] is {f.name: f for f in dataclasses.fields(MTPOptions)}["n_future"]


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_arch_options_are_the_architectures_fields(name):
    cls = OBJECTIVES[name]
    options = cls.Options()
    arch_options = cls(options).arch_options()
    assert list(arch_options) == arch_option_names(cls.arch)
    assert arch_options == {k: getattr(options, k) for k in arch_option_names(cls.arch)}


@pytest.mark.parametrize(
    "name,table,expected",
    [
        (  # recipes/quickstart.toml: options = { chunk_size = 4, predictor_layers = 2, fusion = "gated" }
            "contextlm",
            {"chunk_size": 4, "predictor_layers": 2, "fusion": "gated"},
            ContextLMConfig(**dataclasses.asdict(SHAPE), chunk_size=4, predictor_layers=2, fusion="gated"),
        ),
        (
            "contextlm",
            {"chunk_size": 2, "encoder_layers": 1, "fusion": "normalised"},
            ContextLMConfig(**dataclasses.asdict(SHAPE), chunk_size=2, encoder_layers=1, fusion="normalised"),
        ),
        (
            "mtp",
            {"n_future": 3, "loss_weights": [2.0, 1.0, 1.0]},
            MTPConfig(**dataclasses.asdict(SHAPE), n_future=3),
        ),
    ],
)
def test_a_toml_options_table_builds_the_same_model(name, table, expected):
    cls = OBJECTIVES[name]
    objective = cls(from_dict(cls.Options, table, prefix="objective.options"))
    torch.manual_seed(0)
    model = build_arch(cls.arch, SHAPE, **objective.arch_options())
    assert model.config == expected
    torch.manual_seed(0)
    direct = ARCHS[cls.arch].model(expected)
    for (key, ours), (_, theirs) in zip(model.state_dict().items(), direct.state_dict().items(), strict=True):
        assert torch.equal(ours, theirs), key


def test_bad_options_fail_when_the_options_are_read():
    with pytest.raises(UserError, match="fusion"):
        from_dict(OBJECTIVES["contextlm"].Options, {"fusion": "sum"})
    with pytest.raises(UserError, match="chunk_size"):
        from_dict(OBJECTIVES["contextlm"].Options, {"chunk_size": 0})
    with pytest.raises(UserError, match="n_future"):
        from_dict(OBJECTIVES["mtp"].Options, {"n_future": 0})
    with pytest.raises(UserError, match="unknown config key 'objective.options.heads'"):
        from_dict(OBJECTIVES["mtp"].Options, {"heads": 2}, prefix="objective.options")
