"""One local Ray instance (2 CPUs, no dashboard, offline) for every test of tests/ray: Ray takes
seconds to start, so it starts once per session, and only when a test here asks for it."""

from __future__ import annotations

import os

import pytest

from tests.conftest import REPO


@pytest.fixture(scope="session")
def cluster():
    """Start the instance; yields its address (subprocesses join it with --ray ADDRESS)."""
    import ray

    path = os.pathsep.join([str(REPO / "src"), str(REPO)])
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=256 * 1024**2,  # the tests pass small records: not sized from the machine
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()
