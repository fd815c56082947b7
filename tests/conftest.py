"""Shared fixtures: one real local Ray cluster per test session, started on first use."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster bound to loopback (16 logical CPUs so the many small actors and
    Serve replicas that test modules leave for the session all fit)."""
    import ray
    from ray import serve

    from forge.cluster import init_ray

    init_ray(address="local", num_cpus=16, include_dashboard=False, log_to_driver=False)
    yield ray
    serve.shutdown()
    ray.shutdown()
