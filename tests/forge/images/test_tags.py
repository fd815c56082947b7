"""Image names and the Dockerfile-equivalent steps (no daemon needed; builds are tested in
tests/forge/sandboxes/test_docker*.py against a real dockerd)."""

from __future__ import annotations

import pytest

from forge.harnesses.app_tools import SERVICES_HOST
from forge.harnesses.install import PACKAGES
from forge.harnesses.react import PROGRAM, PROGRAM_HOST
from forge.images import tags as images
from forge.sandboxes import services


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
    copied = _copied(react)
    assert copied[PROGRAM_HOST] == PROGRAM
    # what tasks mount beside the harness, baked in (pods cannot mount host paths): the
    # services' client and commands, the services launcher and the web applications
    assert copied[SERVICES_HOST] == "/opt/forge/services"
    assert copied[services.LAUNCHER_HOST] == services.PROGRAM
    assert copied[services.WEBAPPS_HOST] == services.WEBAPPS
    assert services.MINIWOB not in copied.values()  # MiniWoB's HTML: the GUI harnesses only


def test_gui_harness_images_carry_miniwobs_html() -> None:
    try:
        html = services.miniwob_html()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    for name in sorted(images.GUI_HARNESSES):
        if name in PACKAGES and not PACKAGES[name].installed():
            continue  # its image cannot be described without its package
        assert _copied(images.dockerfile(name))[html] == services.MINIWOB, name


def _copied(dockerfile: str) -> dict[str, str]:
    """Host path -> where the image has it, from each ``# i = HOST`` / ``COPY i TARGET``."""
    lines = dockerfile.splitlines()
    return {
        line.split(" = ", 1)[1]: lines[n + 1].split()[2].rstrip("/")
        for n, line in enumerate(lines)
        if line.startswith("# ") and " = " in line
    }


@pytest.mark.parametrize("tool", ["python3", "procps", "ca-certificates", "jq", "git", "curl"])
def test_base_packages(tool: str) -> None:
    assert tool in images.PACKAGES
