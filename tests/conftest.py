"""Shared test helpers: where ../shared/data is, and tiny corpora in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
FIXTURES = REPO / "tests" / "fixtures"  # small files the tests read (see its README)


@pytest.fixture
def shared_data() -> Path:
    assert SHARED_DATA.is_dir(), f"tests need ../shared/data beside the repository ({SHARED_DATA})"
    return SHARED_DATA


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    """Create ``files`` (relative path -> text or bytes) under ``root``."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_bytes(content.encode("utf-8"))
    return root
