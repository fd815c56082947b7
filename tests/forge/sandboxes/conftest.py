"""The docker tests' own Docker daemon: a real dockerd from Debian's docker.io, started for the
session under /tmp/openforge-test-dockerd/<random> (its own socket, data and exec roots; no
iptables, forwarding or bridge, so the host's network is never touched) and stopped by its pid
at the end. Daemons of crashed sessions (their owner process dead) are swept first. The base
and react images are built into it: from the cached Debian root filesystem in seconds, or
bootstrapped once (about a minute) when the cache lacks it."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forge.harnesses.install import PACKAGES
from forge.images import builder
from forge.images import tags as images
from forge.sandboxes import dockerd
from forge.sandboxes.docker_api import client_for
from forge.sandboxes.tmproot import private_root
from serve.models import cache_dir

from . import standin

PARENT = Path(tempfile.gettempdir()) / "openforge-test-dockerd"


def _why_not() -> str | None:
    if shutil.which("dockerd") is None and not os.access("/usr/sbin/dockerd", os.X_OK):
        return "no dockerd binary (apt-get install docker.io)"
    if os.geteuid() != 0:
        return "a private dockerd needs root"
    if shutil.which("debootstrap") is None and not os.access("/usr/sbin/debootstrap", os.X_OK):
        return "no debootstrap to build the base image (apt-get install debootstrap)"
    return None


@pytest.fixture(scope="session")
def docker_daemon() -> Iterator[dockerd.Daemon]:
    why = _why_not()
    if why is not None:
        pytest.skip(why)
    private_root(PARENT)  # a private folder of ours, never one another user made
    dockerd.sweep_stale(PARENT)
    root = Path(tempfile.mkdtemp(prefix="d", dir=PARENT))
    daemon = dockerd.start_daemon(root)
    try:
        yield daemon
    finally:
        dockerd.stop_daemon(daemon)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def docker_images(docker_daemon: dockerd.Daemon) -> dict[str, str]:
    """The base and react images in the session's daemon: name -> tag."""
    import docker

    client = docker.DockerClient(base_url=docker_daemon.host, timeout=300)
    t0 = time.monotonic()
    base, react = builder.build(client, ["base", "react"], progress=lambda m: None)
    print(f"[docker tests] base and react images ready in {time.monotonic() - t0:.1f}s")
    client.close()
    return {"base": base, "react": react}


def _gui_rootfs_cached() -> bool:
    return (cache_dir() / "images" / f"{images.rootfs_tag(gui=True).split(':', 1)[1]}.tar").exists()


@pytest.fixture(scope="session")
def gui_images(docker_daemon: Any) -> dict[str, str]:
    """The browser and desktop images (and the gui base) in the session's daemon. The gui root
    filesystem is made once (apt-get in a chroot, minutes) and cached as a tar; without that
    tar the GUI container tests skip rather than spend minutes in CI."""
    if not PACKAGES["browser"].installed():
        pytest.skip("Playwright for the sandbox is not installed: forge harness install browser")
    client = client_for(docker_daemon.host)
    if not builder.has_image(client, images.base_tag(gui=True)) and not _gui_rootfs_cached():
        pytest.skip(
            "the gui root filesystem is not cached (building it takes minutes): "
            "forge image build gui"
        )
    t0 = time.monotonic()
    tags = builder.build(client, ["gui", "browser", "desktop"], progress=lambda m: None)
    print(f"\n[docker gui] gui, browser and desktop images ready in {time.monotonic() - t0:.1f}s")
    return dict(zip(["base", "gui", "browser", "desktop"], tags, strict=True))


@pytest.fixture(scope="module")
def internet() -> Iterator[int]:
    """A stand-in internet on 127.0.0.2 (standin.py); its port."""
    yield from standin.serve_internet()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Any]:
    """An egress proxy on a loopback port and a Unix socket (standin.py)."""
    yield from standin.serve_egress(tmp_path)


@pytest.fixture(scope="module")
def kube() -> Iterator[Any]:
    """kmock, the emulated Kubernetes API server, for a module's tests; the backend's
    per-process state (runs set up, heartbeats) goes with it."""
    from forge.sandboxes import kubernetes as kube_backend

    from .kube_controller import KMock

    k = KMock()
    yield k
    kube_backend.shutdown()
    k.close()
