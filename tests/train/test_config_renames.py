"""Renamed config keys: ``train.seq_len`` is read as ``train.context`` (TOML, --set, old run
directories), once noted on stderr, and its legacy hash is the one from before the rename, so
runs from before it resume."""

from __future__ import annotations

import hashlib
import json

import pytest

from contextlab import config as config_mod
from contextlab.config import from_dict, load_config, to_dict
from contextlab.errors import UserError
from contextlab.train.config import LEGACY_RESUME_FREE, RunConfig, legacy_config_hash, renamed_keys


def test_the_old_key_is_read_as_the_new_one(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(config_mod, "_RENAME_NOTED", set())
    f = tmp_path / "old.toml"
    f.write_text("[train]\nseq_len = 48\ntokens_per_step = 96\n")
    assert load_config(RunConfig, f).train.context == 48
    assert load_config(RunConfig, None, ["train.seq_len=24"]).train.context == 24
    err = capsys.readouterr().err
    assert err.count("config key 'train.seq_len' is read as 'train.context'") == 1  # once per process
    with pytest.raises(UserError, match="'train.seq_len' and 'train.context' are the same; keep only"):
        load_config(RunConfig, f, ["train.context=64"])
    assert renamed_keys() == {"train.seq_len": "train.context"}


def test_the_hash_of_a_run_is_the_one_it_had_before_the_rename():
    cfg = from_dict(RunConfig, {"train": {"context": 32, "tokens_per_step": 256}})
    d = to_dict(cfg)  # the hash as it was computed before the rename: the key was train.seq_len
    d["train"]["seq_len"] = d["train"].pop("context")
    d["train"]["dtype"] = "bf16"  # the default then; "auto" since, hashed as bf16
    for section, key in LEGACY_RESUME_FREE:
        d[section].pop(key, None)
    for section in ("init", "extend"):
        d.pop(section)
    d["data"].pop("mixture"), d["data"].pop("train_tokens")
    d["train"].pop("rows_per_step"), d["train"].pop("val_rows")  # added since, at their defaults here
    old = hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()
    assert old == "f84e26a138a775b7d4bb8c3a3d0bcac5fc74163bd6cf2e85c4e426ab842f8957"  # as computed then
    assert legacy_config_hash(cfg) == old
    assert legacy_config_hash(from_dict(RunConfig, {"train": {"seq_len": 32, "tokens_per_step": 256}})) == old
