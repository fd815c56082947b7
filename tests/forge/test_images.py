"""Image names and the Dockerfile-equivalent steps (no daemon needed; builds are tested in
tests/forge/sandboxes/test_docker*.py against a real dockerd)."""

from __future__ import annotations

import pytest

from forge import images
from forge.harnesses.install import PACKAGES
from forge.harnesses.react import PROGRAM, PROGRAM_HOST


def test_tags_are_stable_and_name_what_goes_in() -> None:
    base = images.base_tag()
    assert base == images.base_tag()
    assert base.startswith(f"openforge/base:{images.SUITE}-")
    assert images.rootfs_tag().startswith(f"openforge/rootfs:{images.SUITE}-")
    assert images.image_for(None) == base
    react = images.harness_tag("react")
    assert react.startswith("openforge/react:") and react.endswith("-" + base.rsplit("-", 1)[1])
    assert images.image_for("react") == react
    assert images.harness_tag("pi").startswith(f"openforge/pi:{PACKAGES['pi'].version}-")


def test_agent_change_makes_a_new_base_tag(monkeypatch) -> None:
    before = images.base_tag()
    tree = dict(images._agent_tree())
    tree["forge/sandboxes/agent.py"] += b"\n# changed\n"
    monkeypatch.setattr(images, "_agent_tree", lambda: tree)
    assert images.base_tag() != before


def test_dockerfiles_reproduce_the_builds() -> None:
    base = images.dockerfile("base")
    assert "debootstrap --variant=minbase --include=python3," in base
    assert f"FROM {images.rootfs_tag()}" in base and "COPY agent/ /opt/forge/agent/" in base
    react = images.dockerfile("react")
    assert react.startswith(f"FROM {images.base_tag()}\n")
    assert f"# 0 = {PROGRAM_HOST}" in react and f"COPY 0 {PROGRAM}" in react
    # the services' client and commands, for tasks with services (pods cannot mount them)
    assert "COPY 1/ /opt/forge/services/" in react


@pytest.mark.parametrize("tool", ["python3", "procps", "ca-certificates", "jq", "git", "curl"])
def test_base_packages(tool: str) -> None:
    assert tool in images.PACKAGES
