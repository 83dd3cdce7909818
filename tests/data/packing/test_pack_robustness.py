"""Packing robustness (issue 21): pack-stats --json carries what the text shows, options a method
ignores are refused, validation creates nothing, progress inside a shard, workers die with the
parent's death."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from contextlab.cli.pack import cmd_pack_stats
from contextlab.data.packing import PackConfig, pack, pack_stats
from contextlab.data.packing.stats import format_pack_stats
from contextlab.data.shards.ranges import shard_ranges
from tests.conftest import process_alive
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


class _Bar:
    """Records what the pack progress bar is told: ("update", n) and ("write", line) events."""

    def __init__(self, total: int, enabled: bool, *style):
        self.total, self.n, self.events = total, 0, []
        _Bar.last = self

    def update(self, n: int) -> None:
        self.n += n
        self.events.append(("update", n))

    def write(self, line: str) -> None:
        self.events.append(("write", line))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_pack_bar_moves_inside_a_shard_and_counts_every_document(tmp_path, monkeypatch):
    """issue 21 item 18: the bar stood still for a whole shard (25 s of silence on 14K files)."""
    from contextlab.data.shards import local_pool, progress

    monkeypatch.setattr(local_pool, "progress_bar", _Bar)
    store = make_store(tmp_path, mixed_corpus(300))
    pack(store, tmp_path / "p", PackConfig(method="splice", context=63), progress=True)
    events = _Bar.last.events
    first_line = next(i for i, (kind, _) in enumerate(events) if kind == "write")
    assert sum(kind == "update" for kind, _ in events[:first_line]) >= 300 // progress.BATCH
    packed = 300 - 6  # the documents it packs: all but the 2% held out for validation
    assert _Bar.last.n == _Bar.last.total == packed
    # across worker processes: the shared counter reaches every document too
    cfg = PackConfig(method="splice", context=63, shards=2)
    pack(store, tmp_path / "w", cfg, workers=2, progress=True)
    assert _Bar.last.n == _Bar.last.total == packed
    assert sum(kind == "write" for kind, _ in _Bar.last.events) == 2


def test_a_resumed_pack_reports_the_rate_of_the_documents_it_packed(tmp_path, capsys):
    """issue 21 item 18: a resumed pack divided all documents by its own time."""
    from contextlab.cli.pack import cmd_pack

    store = make_store(tmp_path, mixed_corpus(40))
    args = [
        str(store.path),
        "--out",
        str(tmp_path / "p"),
        "--context",
        "63",
        "--shards",
        "4",
        "--val-fraction",
        "0",
        "--no-progress",
    ]
    assert cmd_pack([*args, "--only-shards", "0,1,2"]) == 0
    first = pack(
        store,
        tmp_path / "q",
        PackConfig(context=63, shards=4, val_fraction=0),
        only_shards=[0, 1, 2],
        progress=False,
    )
    report = pack(store, tmp_path / "q", PackConfig(context=63, shards=4, val_fraction=0), progress=False)
    sizes = [hi - lo for lo, hi in shard_ranges(store.lengths(), 4)]
    assert (first.docs_packed, report.docs_packed) == (sum(sizes[:3]), sizes[3])
    capsys.readouterr()
    assert cmd_pack(args) == 0
    out = capsys.readouterr().out
    assert f"{sizes[3]} documents packed now" in out and "3 shard(s) resumed" in out, out


def test_only_shards_names_the_partial_folder_as_the_out_was_given(tmp_path, capsys, monkeypatch):
    """``data pack --out packed/s4b --only-shards ...`` says the shards went into packed/s4b.partial, not
    into a bare s4b.partial the user cannot place."""
    from contextlab.cli.pack import cmd_pack

    store = make_store(tmp_path, mixed_corpus(12))
    monkeypatch.chdir(tmp_path)
    args = [str(store.path), "--out", "packed/s4b", "--context", "63", "--shards", "2", "--no-progress"]
    assert cmd_pack([*args, "--only-shards", "0"]) == 0
    assert "into packed/s4b.partial (" in capsys.readouterr().out


def test_the_parent_watchdog_ends_a_worker_whose_parent_died():
    """issue 21 item 16, the portable fallback of PR_SET_PDEATHSIG: a worker exits when its parent
    pid changes (it was re-parented after the parent died)."""
    worker = (
        "import sys; from contextlab.data.shards.local_pool import _watch_parent; "
        "_watch_parent(int(sys.argv[1]), 0.05); raise SystemExit('the watchdog returned')"
    )
    parent = (
        "import os, subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', {worker!r}, str(os.getpid())]); "
        "print(p.pid, flush=True); time.sleep(120)"
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline())
    try:
        time.sleep(0.3)
        assert process_alive(pid)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 3
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not process_alive(pid)
    finally:
        if process_alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_shard_ranges_from_the_store_offsets_cut_where_the_token_share_is_reached(tmp_path):
    """Each cut is after the first document whose cumulative tokens reach s/n of the total, found
    by binary search in the store's offsets with an integer needle (a float one would convert the
    whole map); the shards are non-empty and cover every document."""
    import numpy as np

    from contextlab.data.packing.shards import store_shard_ranges
    from contextlab.data.shards.ranges import ranges_of_ends

    rng = np.random.default_rng(3)
    for lengths in [rng.integers(1, 500, 997), rng.integers(1, 3, 50), np.array([1000, 1, 1, 1, 1000])]:
        cum = np.cumsum(lengths)
        for n in (2, 3, min(7, len(cum))):
            got = ranges_of_ends(cum, n)
            assert got[0][0] == 0 and got[-1][1] == len(cum) and all(hi > lo for lo, hi in got)
            assert all(a[1] == b[0] for a, b in zip(got, got[1:]))
            for s, (lo, _) in enumerate(got[1:], 1):  # moved from `first` only to keep shards non-empty
                first = int(np.argmax(cum.astype(np.float64) >= cum[-1] * s / n)) + 1
                assert lo == min(max(first, got[s - 1][0] + 1), len(cum) - (n - s))
    store = make_store(tmp_path, mixed_corpus(40))
    assert store_shard_ranges(store, 4) == ranges_of_ends(np.cumsum(store.lengths()), 4)
