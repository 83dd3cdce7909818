"""The report's runs table: runs in the order a person counts (context-64 before context-128), and a
sweep's stale runs (trained with another config than its sweep file's) named as such."""

from __future__ import annotations

from pathlib import Path

from contextlab.report.runs import natural_key, stale_runs


def test_runs_sort_by_their_numbers_and_stale_runs_are_read_from_the_results(tmp_path):
    names = ["context-128__seed-0", "context-64__seed-1", "context-64__seed-0", "context-1024__seed-0"]
    assert [p.name for p in sorted((Path(n) for n in names), key=natural_key)] == [
        "context-64__seed-0",
        "context-64__seed-1",
        "context-128__seed-0",
        "context-1024__seed-0",
    ]
    assert stale_runs(tmp_path) == set()  # no sweep here
    (tmp_path / "results.csv").write_text("run,status\ncontext-64,done\ncontext-128,stale\n")
    assert stale_runs(tmp_path) == {"context-128"}
