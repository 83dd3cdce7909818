"""The run-config hash: only values that differ from their defaults are hashed, so an option added
later with a default changes no hash; hashes written by the rule before it still resume."""

from __future__ import annotations

import re
from dataclasses import dataclass

from contextlab.config import from_dict, opt
from contextlab.train.config import (
    RunConfig,
    TrainSection,
    config_hash,
    config_hash_matches,
    first_difference,
    legacy_config_hash,
    shown,
)

SETTINGS = {
    "model": {"mlp": "swiglu", "n_layer": 2},
    "data": {"store": "stores/x", "val_split": "tail"},
    "train": {"context": 64, "tokens_per_step": 1024, "out_dir": "runs/a", "dtype": "fp32"},
    "objective": {"name": "mtp", "options": {"k": 2}},
}
# written by the code before the non-default rule (commit 16fc8d5, train.seq_len = 64) for SETTINGS,
# for a continued-pretraining config, and for the defaults
OLD_HASHES = {
    "settings": "f96fee71a5f2c415a4d05149492cdfec10188988707222f92b8fc25a840b2843",
    "continued": "f80432ebb3dbd595415645a80d9e955795e63b83073fc4ca93a0e9582e0734a7",
    "defaults": "8d5a420680264994c9a0ff6f141e2deb06132aaae2126a912d3a120501a9fb2b",
}
CONTINUED = {
    "train": {"context": 64},
    "init": {"source": "runs/base"},
    "extend": {"method": "pi", "factor": 2.0},
    "data": {"train_tokens": 1000},
}


@dataclass
class LaterTrain(TrainSection):
    later_knob: int = opt(7, "an option added after runs existed")


@dataclass
class LaterSection:
    level: int = opt(3, "a section added after runs existed")


@dataclass
class LaterRunConfig(RunConfig):
    train: LaterTrain = opt(factory=LaterTrain, help="train")
    later: LaterSection = opt(factory=LaterSection, help="later")


def test_a_hash_written_before_the_rule_still_resumes():
    configs = {
        "settings": from_dict(RunConfig, SETTINGS),
        "continued": from_dict(RunConfig, CONTINUED),
        "defaults": RunConfig(),
    }
    for name, cfg in configs.items():
        assert legacy_config_hash(cfg) == OLD_HASHES[name]
        assert config_hash(cfg) != OLD_HASHES[name]  # a new rule, and still accepted
        assert config_hash_matches(cfg, OLD_HASHES[name]) and config_hash_matches(cfg, config_hash(cfg))


def test_a_changed_config_is_refused_under_either_rule():
    changed = from_dict(RunConfig, {**SETTINGS, "train": {**SETTINGS["train"], "context": 128}})
    assert not config_hash_matches(changed, OLD_HASHES["settings"])
    assert not config_hash_matches(changed, config_hash(from_dict(RunConfig, SETTINGS)))
    assert not config_hash_matches(RunConfig(), None)


def test_an_option_added_with_a_default_changes_no_hash():
    for settings in (SETTINGS, CONTINUED, {}):
        now, later = from_dict(RunConfig, settings), from_dict(LaterRunConfig, settings)
        assert config_hash(later) == config_hash(now)
        assert legacy_config_hash(later) == legacy_config_hash(now)  # old runs resume after it too
    later = from_dict(LaterRunConfig, SETTINGS)
    later.train.later_knob = 8
    assert config_hash(later) != config_hash(from_dict(RunConfig, SETTINGS))
    later.train.later_knob, later.later.level = 7, 4
    assert config_hash(later) != config_hash(from_dict(RunConfig, SETTINGS))
    assert legacy_config_hash(later) != OLD_HASHES["settings"]


def test_only_values_away_from_their_defaults_count():
    base = config_hash(from_dict(RunConfig, SETTINGS))
    same = from_dict(RunConfig, {**SETTINGS, "optim": {"lr": 1e-3}})  # the default, written out
    assert config_hash(same) == base
    for section, key, value in [("optim", "lr", 2e-3), ("model", "mlp", "gelu"), ("train", "seed", 1)]:
        changed = from_dict(RunConfig, SETTINGS)
        setattr(getattr(changed, section), key, value)
        assert config_hash(changed) != base, key
    free = from_dict(RunConfig, {**SETTINGS, "train": {**SETTINGS["train"], "log_every": 3}})
    assert config_hash(free) == base  # RESUME_FREE keys are never hashed


def test_the_first_difference_is_named_with_both_values():
    base = from_dict(RunConfig, SETTINGS)
    assert first_difference(base, from_dict(RunConfig, SETTINGS)) is None
    free = from_dict(
        RunConfig, {**SETTINGS, "train": {**SETTINGS["train"], "parallel": "fsdp", "threads": 3}}
    )
    assert first_difference(base, free) is None  # the parallel strategy and threads change no number
    later = from_dict(
        RunConfig, {**SETTINGS, "optim": {"lr": 5e-3}, "train": {**SETTINGS["train"], "seed": 2}}
    )
    key, before, now = first_difference(base, later)  # the config's own order: optim before train
    assert (key, shown(before), shown(now)) == ("optim.lr", "0.001", "0.005")
    options = from_dict(RunConfig, {**SETTINGS, "objective": {"name": "mtp", "options": {"k": 2, "n": 4}}})
    key, before, now = first_difference(base, options)
    assert (key, shown(before), shown(now)) == ("objective.options.n", "(not set)", "4")
    assert shown("") == '""' and shown(True) == "true" and shown(None) == "null"


def test_objective_options_compare_as_the_objective_reads_them():
    """n_future = 4 written out (the default) or as "4" was refused on resume as another config."""
    mtp = lambda **o: from_dict(RunConfig, {"objective": {"name": "mtp", "options": o}})
    plain = mtp()
    for same in (mtp(n_future=4), mtp(n_future="4")):
        assert first_difference(plain, same) is None  # a resume compares them key by key: the same
        assert config_hash(same) != config_hash(plain)  # hashes keep the options as written (recorded ones)
    key, _, now = first_difference(plain, mtp(n_future=3))
    assert (key, now) == ("objective.options.n_future", 3)
    unread = from_dict(RunConfig, {"objective": {"name": "clm", "options": {"typo": 1}}})
    assert first_difference(from_dict(RunConfig, {}), unread)[0] == "objective.options.typo"  # kept as given


def test_objective_options_out_of_range_are_refused_before_the_run_folder_exists():
    """mlm mask_rate 1.5 and fim fim_rate 2 trained; prefix_lm min > max failed at the first batch."""
    import pytest

    from contextlab.errors import UserError
    from contextlab.train.config import check_values

    bad = {
        "mlm": ({"mask_rate": 1.5}, "mlm needs 0 < mask_rate < 1"),
        "fim": ({"fim_rate": 2}, "fim needs fim_rate, spm_rate in [0, 1]"),
        "prefix_lm": (
            {"min_prefix": 0.8, "max_prefix": 0.2},
            "prefix_lm needs 0 <= min_prefix <= max_prefix",
        ),
        "span": ({"noise_density": 0}, "span needs 0 < noise_density < 1"),
        "clm": ({"x": 1}, "unknown config key 'objective.options.x': objective.options takes no keys"),
    }
    for name, (options, said) in bad.items():
        with pytest.raises(UserError, match=re.escape(said)):
            check_values(from_dict(RunConfig, {"objective": {"name": name, "options": options}}))
    check_values(from_dict(RunConfig, {"objective": {"name": "fim", "options": {"fim_rate": 1.0}}}))
