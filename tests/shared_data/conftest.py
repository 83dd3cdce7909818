"""The opt-in suite: tests that read ../shared/data, the real data sets beside the repository.

Every test module here sets ``pytestmark = pytest.mark.shared_data``; pyproject.toml deselects
that marker by default, so a clone's ``make test`` neither runs nor skips them, and
``make test-shared`` (run by CI, which has ../shared) runs them. Trade-off: the default suite
reads small cuts of these data sets from tests/fixtures, and this suite is what ties those cuts
to their sources (and checks the whole sets where a cut cannot).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO

SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    assert SHARED_DATA.is_dir(), f"this suite needs ../shared/data beside the repository ({SHARED_DATA})"
    return SHARED_DATA
