"""A clone tests with nothing beside it: scripts/check_self_contained.py finds no test that points
at the data folder beside the repository, and it catches each spelling it knows (its own list, so
that no file under tests/ spells that path)."""

from __future__ import annotations

import importlib.util

from tests.conftest import REPO


def load_check():
    spec = importlib.util.spec_from_file_location(
        "check_self_contained", REPO / "scripts" / "check_self_contained.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_test_reads_outside_the_repository():
    hits = load_check().outside_references(REPO)
    assert not hits, (
        "tests must read tests/fixtures, not the data folder outside the repository (data checks go in "
        "scripts/):\n" + "\n".join(hits)
    )


def test_the_scan_catches_each_spelling(tmp_path):
    check = load_check()
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    for i, line in enumerate(check.CAUGHT + check.LEFT):
        (tmp_path / "tests" / f"test_{i}.py").write_text(line + "\n")
    (tmp_path / "tests" / "sub" / "test_nested.py").write_text(check.CAUGHT[0] + "\n")  # folders too
    hits = check.outside_references(tmp_path)
    expected = [f"tests/test_{i}.py" for i in range(len(check.CAUGHT))] + ["tests/sub/test_nested.py"]
    assert sorted(h.split(":")[0] for h in hits) == sorted(expected)
