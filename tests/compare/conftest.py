"""Shared with the evaluation tests: the tiny byte-level store."""

from tests.eval.conftest import byte_store  # noqa: F401  (a fixture, found by pytest here)
