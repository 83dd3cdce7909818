"""A clone tests with nothing beside it: no file under tests/ may point at the data folder beside it.

A static scan of tests/**/*.py (milliseconds; names the file and line), run by ``make lint`` and by
``tests/test_self_contained.py``; the real proof is running the suite from a clone with nothing beside
it (see tests/fixtures/README.md). The patterns and the spellings they must catch live here, not
under tests/, so that no test file spells the outside path. Trade-off: it catches the ways this
repository has spelled that path (the SHARED_DATA constant, the shared_data fixture, a "shared" path
part, a relative path climbing out to it, a path built above the repository root), not every
conceivable one. Exit status 1 and one line per hit when something points outside.

    python scripts/check_self_contained.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

OUTSIDE = re.compile(
    r"\bSHARED_DATA\b"  # the old constant
    r"|(?<![/.\w])shared_data\b(?!/)"  # the old fixture
    r"|[\"']shared[\"']"  # a "shared" path part
    r"|[\"'](?:\.\./)+shared\b"  # a relative path that climbs out of the repository to the data
    r"|\bREPO\.parent\b|\bparents\[\d+\]\.parent\b"  # a path built above the repository root
)

# Lines the scan must flag, one per pattern, and lines it must leave alone.
CAUGHT = [
    "from tests.conftest import SHARED_DATA",
    "def test_x(tmp_path, shared_data):",
    'DATA = REPO / ".." / "shared" / "data"',
    'open("../shared/data/x.txt")',
    "ROOT = REPO.parent",
    'DATA = Path(__file__).resolve().parents[2].parent / "data"',
]
LEFT = ["REPO / 'tests'", '{"out_dir": "../x/tiny"}', '"""See scripts/check_fixtures.py."""']


def outside_references(repo: Path = REPO) -> list[str]:
    """``file:line: text`` for every line of tests/**/*.py that points outside the repository."""
    tests = repo / "tests"
    hits = []
    for path in sorted(tests.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(repo)}:{n}: {line.strip()}")
    return hits


def main() -> int:
    hits = outside_references()
    for hit in hits:
        print(f"{hit}  <- tests must read tests/fixtures, not the data folder outside the repository")
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main())
