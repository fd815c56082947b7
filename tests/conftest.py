"""Shared fixtures: one real local Ray cluster per test session, started on first use."""

from __future__ import annotations

import os
import sys

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


@pytest.fixture(autouse=True, scope="module")
def _serve_apps_end_with_their_module():
    """Serve applications a module deployed are deleted after it. An idle one still costs the
    session's cluster about 1.5% of a core (its replica's and the controller's periodic work),
    and the suite deploys a few dozen: left for the session, they took a share of the 2 cores
    from every later test."""
    yield
    if "ray" not in sys.modules:
        return
    import ray

    if not ray.is_initialized():
        return
    from ray import serve

    for app in list(serve.status().applications):  # none where Serve was never started
        serve.delete(app)
