"""Typed configs: strict TOML loading, --set overrides, round trips."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Literal

import pytest

from contextlab.config import (
    add_dataclass_args,
    apply_overrides,
    dataclass_from_args,
    from_dict,
    load_config,
    opt,
    parse_override,
    read_toml,
    save_toml,
    to_dict,
)
from contextlab.errors import UserError


@dataclass
class Optim:
    lr: float = opt(3e-4, "peak learning rate")
    betas: list[float] = opt([0.9, 0.95], "AdamW betas")


@dataclass
class Run:
    name: str = opt("run", "run name")
    steps: int = opt(100, "optimizer steps")
    bf16: bool = opt(False, "bf16 autocast")
    mode: Literal["fast", "exact"] = opt("fast", "how")
    seed: int | None = opt(None, "seed")
    optim: Optim = opt(factory=Optim, help="optimizer")


def test_toml_and_overrides(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('name = "a"\nsteps = 10\n[optim]\nlr = 0.01\n')
    cfg = load_config(Run, f, ["steps=20", "optim.betas=[0.8, 0.9]", "bf16=true", "mode=exact", "seed=3"])
    assert cfg == Run(
        name="a", steps=20, bf16=True, mode="exact", seed=3, optim=Optim(lr=0.01, betas=[0.8, 0.9])
    )


def test_int_accepts_scientific_and_float_accepts_int():
    cfg = from_dict(Run, {"steps": "1e3", "optim": {"lr": 1}})
    assert cfg.steps == 1000 and isinstance(cfg.optim.lr, float) and cfg.optim.lr == 1.0


@pytest.mark.parametrize(
    "data, key",
    [
        ({"stepz": 1}, "stepz"),
        ({"optim": {"lrr": 1.0}}, "optim.lrr"),
    ],
)
def test_unknown_key_names_the_key(data, key):
    with pytest.raises(UserError, match=f"unknown config key '{key}'") as e:
        from_dict(Run, data)
    assert "\n" not in str(e.value) and "valid keys" in str(e.value)


@pytest.mark.parametrize(
    "data, key",
    [
        ({"steps": "ten"}, "steps"),
        ({"steps": 1.5}, "steps"),
        ({"bf16": "maybe"}, "bf16"),
        ({"mode": "slow"}, "mode"),
        ({"optim": {"lr": "fast"}}, "optim.lr"),
        ({"optim": {"betas": ["a"]}}, r"optim.betas\[0\]"),
        ({"optim": 3}, "optim"),
    ],
)
def test_wrong_type_names_the_key(data, key):
    with pytest.raises(UserError, match=f"config key '{key}' must be"):
        from_dict(Run, data)


def test_parse_override_values():
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("a=hello") == (["a"], "hello")
    assert parse_override('a="x y"') == (["a"], "x y")
    assert parse_override("a=[1,2]") == (["a"], [1, 2])
    with pytest.raises(UserError, match="KEY=VALUE"):
        parse_override("novalue")
    with pytest.raises(UserError, match="not a table"):
        apply_overrides({"a": 1}, ["a.b=2"])


def test_save_and_reload_round_trip(tmp_path):
    cfg = Run(name="x", steps=7, seed=None, optim=Optim(lr=0.5))
    save_toml(cfg, tmp_path / "r.toml")
    assert load_config(Run, tmp_path / "r.toml") == cfg
    assert read_toml(tmp_path / "r.toml")["optim"]["lr"] == 0.5
    assert to_dict(cfg)["optim"]["betas"] == [0.9, 0.95]


def test_bad_files(tmp_path):
    with pytest.raises(UserError, match="not found"):
        read_toml(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("a = = 1")
    with pytest.raises(UserError, match="not valid TOML"):
        read_toml(tmp_path / "bad.toml")


def test_argparse_flags_use_the_same_rules():
    p = argparse.ArgumentParser()
    add_dataclass_args(p, Run)
    help_text = p.format_help()
    assert "--steps" in help_text and "optimizer steps" in help_text and "--optim" not in help_text
    cfg = dataclass_from_args(Run, p.parse_args(["--steps", "2e2", "--bf16"]))
    assert cfg.steps == 200 and cfg.bf16 is True and cfg.name == "run"
    with pytest.raises(UserError, match="'steps'"):
        dataclass_from_args(Run, p.parse_args(["--steps", "x"]))


def test_a_leading_byte_order_mark_is_read_past(tmp_path):
    """Windows Notepad saves UTF-8 with a BOM; tomllib calls it an invalid statement at line 1."""
    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbf" + b'name = "x"\n[optim]\nlr = 0.5\n')
    assert read_toml(tmp_path / "bom.toml") == {"name": "x", "optim": {"lr": 0.5}}
    assert load_config(Run, tmp_path / "bom.toml").optim.lr == 0.5


def test_the_objective_help_names_every_objective():
    """`contextlab train --help` named a Python dict (objectives.OBJECTIVES), not the objectives."""
    from contextlab.config import field_help
    from contextlab.objectives import OBJECTIVES
    from contextlab.train.config import ObjectiveSection

    text = field_help(ObjectiveSection, "name")
    assert all(f" {name}" in text for name in OBJECTIVES) and "OBJECTIVES" not in text
