"""The egress proxy relayed into a docker sandbox (no network of its own): with its phase's
grant the stand-in internet (127.0.0.2 on the host) answers through it; without the variables
(proxy-only) or with a revoked key it does not, and nothing is reachable directly."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge.config import SandboxConfig
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.egress import proxy_env
from forge.sandboxes.registry import sandbox_for

from .standin import FETCH, STAND_IN, policy

pytestmark = pytest.mark.docker


def test_a_docker_sandbox_reaches_out_only_through_its_phases_grant(
    docker_daemon, docker_images, internet, served, tmp_path: Path
) -> None:
    proxy, _, path = served
    url = f"http://{STAND_IN}:{internet}/from-the-container"
    config = SandboxConfig(backend="docker", docker_host=docker_daemon.host)
    box = sandbox_for(config, None)
    box.create(SandboxSpec(labels={"run": "egress", "attempt": "0"}, egress_socket=path))
    try:
        box.put_file("fetch.py", FETCH)
        key = proxy.grant(policy("allowlist", [], [f"{STAND_IN}/32"], [internet]))
        r = box.exec(["python3", "fetch.py", url], 30, proxy_env(key))
        assert r.stdout.strip().endswith("/from-the-container"), r.stdout + r.stderr
        direct = box.exec(["python3", "fetch.py", url], 30)  # proxy-only: no way there
        assert "URLError" in direct.stdout, direct.stdout
        proxy.revoke(key)
        assert "407" in box.exec(["python3", "fetch.py", url], 30, proxy_env(key)).stdout
    finally:
        box.destroy()
