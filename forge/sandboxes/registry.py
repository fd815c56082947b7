"""Sandbox backends by name: ``make_sandbox("local", root=..., isolation=...)``,
``sandbox_for(config, harness)``, the check a run makes at its start that its sandboxes can be
isolated (DESIGN.md decision 8), ``reap_sandboxes``, the reconcile pass by label, and
``prewarm``, which fills a warm pool (``sandbox.warm_pool``) before an attempt needs it."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from forge.config import ProxyConfig, SandboxConfig
from forge.sandboxes import warm_pool
from forge.sandboxes.base import ExecResult, Sandbox, SandboxSpec
from forge.sandboxes.bwrap import IsolationUnavailable, require_bwrap
from forge.sandboxes.docker import DockerSandbox
from forge.sandboxes.docker_api import DockerUnavailable
from forge.sandboxes.local import UNISOLATED_WARNING, LocalSandbox
from forge.sandboxes.orphans import reap_orphans
from forge.sandboxes.warm_pool import WarmPool

log = logging.getLogger(__name__)
SANDBOXES: dict[str, type] = {"local": LocalSandbox, "docker": DockerSandbox}


def make_sandbox(backend: str, **options: Any) -> Sandbox:
    """A new, not yet created sandbox of ``backend``; ``options`` go to its constructor."""
    try:
        cls = SANDBOXES[backend]
    except KeyError:
        known = ", ".join(sorted(SANDBOXES))
        raise ValueError(f"unknown sandbox backend {backend!r}; known: {known}") from None
    return cls(**options)


def sandbox_for(config: SandboxConfig, harness: str | None) -> Sandbox:
    """A new, not yet created sandbox for one attempt of ``harness`` (None: a verifier's
    sandbox) as ``config`` describes it. On docker and kubernetes with ``sandbox.warm_pool``,
    its ``create`` takes over a sandbox made ahead when one of its kind is ready."""
    if config.backend == "local":
        return LocalSandbox(root=config.root, isolation=config.isolation, disk_mb=config.disk_mb)
    if config.backend == "docker":
        return DockerSandbox(config, harness)
    if config.backend == "kubernetes":
        from forge.sandboxes.kubernetes import KubernetesSandbox

        return KubernetesSandbox(config, harness)
    return make_sandbox(config.backend)


def prewarm(config: SandboxConfig, harness: str | None, spec: SandboxSpec) -> WarmPool | None:
    """Start filling this process's warm pool for attempts of ``harness`` like ``spec`` (a
    HarnessPod at its start, with its proxy's sockets and its labels); None when
    ``sandbox.warm_pool`` is off, the backend has none (local) or ``spec`` is not served warm."""
    if config.backend not in ("docker", "kubernetes"):
        return None
    return warm_pool.prewarm(sandbox_for(config, harness), spec)


def check_isolation(config: SandboxConfig, proxy: ProxyConfig | None = None) -> None:
    """Stop a run at its start when its sandboxes cannot be isolated as ``config`` asks:
    raises :class:`IsolationUnavailable` saying why and how to fix it (install bubblewrap, or
    set ``sandbox.isolation=none``). With ``isolation: none`` it logs a warning that harnesses
    will share the host's network and files. The docker backend needs its daemon to answer and
    the base image to be there (:class:`DockerUnavailable` says which command builds it). The
    kubernetes backend needs its API to answer and, given ``proxy``, a proxy the pods can
    reach (not loopback only, unless the API server is local too, as kmock in tests)."""
    if config.backend == "kubernetes":
        from forge.sandboxes.kubernetes import check_run

        check_run(config, proxy.host if proxy is not None else None)
        return
    if config.backend == "docker":
        from forge.sandboxes.docker import image_and_binds
        from forge.sandboxes.docker_api import client_for

        image_and_binds(client_for(config.docker_host), config, None, {})
        return
    if config.isolation == "none":
        log.warning(UNISOLATED_WARNING)
        return
    if config.backend == "local":
        require_bwrap()


def reap_sandboxes(
    config: SandboxConfig, run: str, orphans_only: bool = False, dead_pods: Collection[str] = ()
) -> int:
    """Delete the leaked sandboxes of ``run`` (at run start and end: all of them are orphans;
    with ``orphans_only``, those whose creating process on this host is dead, for a HarnessPod
    that died, and on kubernetes those of the HarnessPods named in ``dead_pods``) and any past
    their deadline; returns how many. Local sandbox folders are always reaped; docker
    containers or kubernetes pods when the backend is one of those."""
    reaped = reap_orphans(config.root, run=run)
    if config.backend == "docker":
        from forge.sandboxes.docker_api import client_for, reap_containers

        reaped += reap_containers(client_for(config.docker_host), run, orphans_only=orphans_only)
    elif config.backend == "kubernetes":
        from forge.sandboxes.kubernetes import reap

        reaped += reap(config, run, orphans_only=orphans_only, dead_pods=dead_pods)
    return reaped


__all__ = [
    "SANDBOXES",
    "DockerSandbox",
    "DockerUnavailable",
    "ExecResult",
    "IsolationUnavailable",
    "LocalSandbox",
    "Sandbox",
    "SandboxSpec",
    "check_isolation",
    "make_sandbox",
    "prewarm",
    "reap_sandboxes",
    "sandbox_for",
]
