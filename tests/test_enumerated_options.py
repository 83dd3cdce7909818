"""Enumerated options are ``Literal[...]``: the config loader refuses a value outside the set with one
line naming the key and the allowed values, and ``--help`` lists them."""

from __future__ import annotations

import argparse

import pytest

from contextlab.config import add_dataclass_args, from_dict, load_config
from contextlab.data.packing import PackConfig
from contextlab.data.sources import SourceOptions
from contextlab.errors import UserError
from contextlab.eval.needle import Options as NeedleOptions
from contextlab.eval.visible import Options as VisibleOptions
from contextlab.models.contextlm import ContextLMOptions
from contextlab.quickstart.config import PackSection as QuickstartPack
from contextlab.train.config import RunConfig


@pytest.mark.parametrize(
    "override, message",
    [
        ("train.dtype=fp16", "config key 'train.dtype' must be 'auto' | 'bf16' | 'fp32', got 'fp16'"),
        ("train.device=tpu", "config key 'train.device' must be 'auto' | 'cpu' | 'cuda', got 'tpu'"),
        ("train.parallel=zero", "config key 'train.parallel' must be 'ddp' | 'fsdp', got 'zero'"),
        ("model.mlp=relu", "config key 'model.mlp' must be 'gelu' | 'swiglu', got 'relu'"),
        ("data.mode=rows", "config key 'data.mode' must be 'packed' | 'long_docs', got 'rows'"),
        ("data.val_split=head", "config key 'data.val_split' must be 'documents' | 'tail', got 'head'"),
        (
            "extend.method=rope",
            "config key 'extend.method' must be 'none' | 'pi' | 'ntk' | 'yarn' | 'base', got 'rope'",
        ),
    ],
)
def test_a_bad_run_config_value_names_the_key_and_the_choices(override, message):
    with pytest.raises(UserError) as err:
        load_config(RunConfig, None, [override])
    assert str(err.value) == message and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "cls, data, message",
    [
        (PackConfig, {"order": "random"}, "'order' must be 'identity' | 'reverse' | 'shuffle', got 'random'"),
        (PackConfig, {"remainder": "keep"}, "'remainder' must be 'drop' | 'next' | 'pool', got 'keep'"),
        (
            SourceOptions,
            {"encoding": "ascii"},
            "'encoding' must be 'strict' | 'replace' | 'skip' | 'latin-1'",
        ),
        (SourceOptions, {"strip_gutenberg": "maybe"}, "'strip_gutenberg' must be 'auto' | 'yes' | 'no'"),
        (ContextLMOptions, {"fusion": "sum"}, "'fusion' must be 'plain' | 'gated' | 'normalised'"),
        (NeedleOptions, {"scoring": "exact"}, "'scoring' must be 'likelihood' | 'generate' | 'both'"),
        (
            VisibleOptions,
            {"task": "needle"},
            "'task' must be 'niah' | 'kv' | 'passkey' | 'vartrack' | 'icl' | 'loss', got 'needle'",
        ),
        (QuickstartPack, {"retriever": "bm26"}, "'retriever' must be 'bm25' | 'dense' | 'repo', got 'bm26'"),
    ],
)
def test_a_bad_option_value_names_the_key_and_the_choices(cls, data, message):
    with pytest.raises(UserError, match="config key " + message.replace("|", r"\|")) as err:
        from_dict(cls, data)
    assert "\n" not in str(err.value)


def test_help_lists_the_choices():
    parser = argparse.ArgumentParser()
    add_dataclass_args(parser, PackConfig)
    text = " ".join(parser.format_help().split())
    assert "'identity' | 'reverse' | 'shuffle'; default: 'identity'" in text
    assert "'eot' | 'none'; default: 'eot'" in text
