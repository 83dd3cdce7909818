"""A clone tests with nothing beside it: no test may point at the data folder beside the repository.

A static scan, so it costs milliseconds and names the file and line; the real proof is running
the suite from a clone with nothing beside it (see tests/fixtures/README.md). Trade-off: it
catches the ways this repository has spelled that path (the SHARED_DATA constant, the shared_data
fixture, a "shared" path part, a path built above the repository root), not every conceivable one.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

OUTSIDE = re.compile(
    r"\bSHARED_DATA\b"  # the old constant
    r"|(?<![/.\w])shared_data\b(?!/)"  # the old fixture
    r"|[\"']shared[\"']"  # a "shared" path part
    r"|[\"'](?:\.\./)+shared\b"  # a relative path that climbs out of the repository to the data
    r"|\bREPO\.parent\b|\bparents\[\d+\]\.parent\b"  # a path built above the repository root
)


def outside_references(repo: Path = REPO) -> list[str]:
    """``file:line: text`` for every line of tests/**/*.py that points outside the repository."""
    tests = repo / "tests"
    hits = []
    for path in sorted(tests.rglob("*.py")):
        if path == tests / "test_self_contained.py":  # spells the patterns out
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(repo)}:{n}: {line.strip()}")
    return hits


def test_no_test_reads_outside_the_repository():
    hits = outside_references()
    assert not hits, (
        "tests must read tests/fixtures, not the data folder outside the repository (data checks go in "
        "scripts/):\n" + "\n".join(hits)
    )


def test_the_scan_catches_each_spelling(tmp_path):
    bad = [
        "from tests.conftest import SHARED_DATA",
        "def test_x(tmp_path, shared_data):",
        'DATA = REPO / ".." / "shared" / "data"',
        'open("' + "../" + 'shared/data/x.txt")',  # written in two parts: this file names no outside path
        "ROOT = REPO.parent",
        'DATA = Path(__file__).resolve().parents[2].parent / "data"',
    ]
    fine = ["REPO / 'tests'", '{"out_dir": "../x/tiny"}', '"""See scripts/check_fixtures.py."""']
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    for i, line in enumerate(bad + fine):
        (tmp_path / "tests" / f"test_{i}.py").write_text(line + "\n")
    (tmp_path / "tests" / "sub" / "test_nested.py").write_text(bad[0] + "\n")  # folders are scanned too
    hits = outside_references(tmp_path)
    expected = [f"tests/test_{i}.py" for i in range(len(bad))] + ["tests/sub/test_nested.py"]
    assert sorted(h.split(":")[0] for h in hits) == sorted(expected)
