"""Packing robustness (issue 21): pack-stats --json carries what the text shows, options a method
ignores are refused, validation creates nothing, progress inside a shard, workers die with the
parent's death."""

from __future__ import annotations

import json

from contextlab.cli.pack import cmd_pack_stats
from contextlab.data.packing import PackConfig, pack, pack_stats
from contextlab.data.packing.stats import format_pack_stats
from tests.data.packing.helpers import make_store, mixed_corpus


class _Spy(dict):
    """A dict that records the leaf keys read from it (nested ones as ``outer.inner``)."""

    def __init__(self, data: dict, seen: set, prefix: str = ""):
        super().__init__(data)
        self.seen, self.prefix = seen, prefix

    def __getitem__(self, key):
        value = super().__getitem__(key)
        if isinstance(value, dict):
            return _Spy(value, self.seen, f"{self.prefix}{key}.")
        self.seen.add(self.prefix + key)
        return value


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
    return out


def test_pack_stats_json_carries_everything_the_text_shows(tmp_path, capsys):
    store = make_store(tmp_path, mixed_corpus(16))
    packed = pack(store, tmp_path / "p", PackConfig(method="splice", context=63), progress=False).packed
    seen: set[str] = set()
    format_pack_stats(_Spy(pack_stats(packed), seen))
    assert {"docs_per_sequence.mean", "domains_per_sequence", "directories_per_sequence"} <= seen
    assert cmd_pack_stats([str(packed.path), "--json", "--no-plot"]) == 0
    shown = _flat(json.loads(capsys.readouterr().out))
    want = _flat(pack_stats(packed))
    assert seen <= set(shown)
    assert {k: shown[k] for k in seen} == {k: want[k] for k in seen}
