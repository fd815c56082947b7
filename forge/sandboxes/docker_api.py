"""The Docker daemon's side of the docker backend: which daemon (a client per address), whether
an image is there, and the reconcile pass over labelled sandbox containers. Nothing here reads
the run's configuration: image builds (:mod:`forge.images`) and ``forge image`` use it too."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

from forge.images import builder
from forge.sandboxes import dockerd
from forge.sandboxes.bwrap import IsolationUnavailable
from forge.sandboxes.orphans import pid_start, rmtree

LABEL = "openforge"  # label keys: openforge.run, .pod, .episode, .attempt, .deadline, ...
_clients: dict[str, Any] = {}
_present: set[tuple[str, str]] = set()  # (daemon, image) seen present
_lock = threading.Lock()


class DockerUnavailable(IsolationUnavailable):
    """The Docker daemon cannot be reached, or an image the sandbox needs is missing."""


def resolve_host(docker_host: str | None = None) -> str | None:
    """``docker_host``, else DOCKER_HOST, else the running private daemon's socket, else None
    (the Docker client's default)."""
    if docker_host:
        return docker_host
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    private = dockerd.running()
    return private.host if private is not None else None


def client_for(docker_host: str | None = None) -> Any:
    """A Docker client for the daemon (shared per address); DockerUnavailable when it does
    not answer."""
    import docker

    host = resolve_host(docker_host)
    key = host or "default"
    with _lock:
        client = _clients.get(key)
    if client is not None:
        return client
    try:
        client = docker.DockerClient(base_url=host, timeout=120) if host else docker.from_env()
        client.ping()
    except Exception as e:
        raise DockerUnavailable(
            f"no Docker daemon answers at {host or 'the default socket'} ({type(e).__name__}: "
            f"{e}); start one (`forge image daemon start`, or the system's dockerd) or set "
            "sandbox.docker_host"
        ) from e
    client.forge_host = key  # what messages name the daemon by
    with _lock:
        return _clients.setdefault(key, client)


def require_image(client: Any, tag: str, build: str | None) -> None:
    """DockerUnavailable naming ``tag`` and how to make it (``forge image build BUILD``, or for
    a user's own image, to load it) when the daemon lacks it."""
    where = getattr(client, "forge_host", "default")
    key = (where, tag)
    if key in _present:
        return
    if not builder.has_image(client, tag):
        how = f"build it with `forge image build {build}`" if build else "build or load it there"
        raise DockerUnavailable(f"image {tag} is not in the Docker daemon at {where}: {how}")
    _present.add(key)


def _remove(client: Any, container_id: str) -> None:
    import docker.errors

    try:
        client.api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as e:
        if "already in progress" not in str(e):
            raise


def reap_containers(client: Any, run: str | None = None, orphans_only: bool = False) -> int:
    """Remove sandbox containers (and their host folders on this host): those of ``run``
    (every one, or with ``orphans_only`` those whose creating process on this host is dead),
    and any whose deadline label has passed. Returns how many were removed."""
    here, now, removed = socket.gethostname(), time.time(), 0
    for c in client.api.containers(all=True, filters={"label": f"{LABEL}.run"}):
        labels = c.get("Labels") or {}
        try:
            expired = now > float(labels.get(f"{LABEL}.deadline", "inf"))
        except ValueError:
            expired = False
        mine = run is not None and labels.get(f"{LABEL}.run") == run
        if mine and orphans_only:
            mine = labels.get(f"{LABEL}.host") == here and not _creator_alive(labels)
        if not (mine or expired):
            continue
        _remove(client, c["Id"])
        d = labels.get(f"{LABEL}.dir", "")
        if labels.get(f"{LABEL}.host") == here and re.search(r"/openforge-docker/[^/]+$", d):
            rmtree(Path(d))
        removed += 1
    return removed


def _creator_alive(labels: dict[str, str]) -> bool:
    try:
        pid_text, start = labels.get(f"{LABEL}.creator", "").split()
        pid = int(pid_text)
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    with contextlib.suppress(Exception):
        return start == "None" or pid_start(pid) == start
    return True
