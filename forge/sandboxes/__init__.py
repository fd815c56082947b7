"""Sandbox backends by name: ``make_sandbox("local", root=..., isolation=...)``, and the check a
run makes at its start that its sandboxes can be isolated (DESIGN.md decision 8)."""

from __future__ import annotations

import logging
from typing import Any

from forge.config import SandboxConfig
from forge.sandboxes.base import ExecResult, Sandbox, SandboxSpec
from forge.sandboxes.bwrap import IsolationUnavailable, require_bwrap
from forge.sandboxes.local import UNISOLATED_WARNING, LocalSandbox

log = logging.getLogger(__name__)
SANDBOXES: dict[str, type] = {"local": LocalSandbox}


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
    sandbox) as ``config`` describes it."""
    if config.backend == "local":
        return LocalSandbox(root=config.root, isolation=config.isolation)
    return make_sandbox(config.backend)


def check_isolation(config: SandboxConfig) -> None:
    """Stop a run at its start when its sandboxes cannot be isolated as ``config`` asks:
    raises :class:`IsolationUnavailable` saying why and how to fix it (install bubblewrap, or
    set ``sandbox.isolation=none``). With ``isolation: none`` it logs a warning that harnesses
    will share the host's network and files."""
    if config.isolation == "none":
        log.warning(UNISOLATED_WARNING)
        return
    if config.backend == "local":
        require_bwrap()


__all__ = [
    "SANDBOXES",
    "ExecResult",
    "IsolationUnavailable",
    "LocalSandbox",
    "Sandbox",
    "SandboxSpec",
    "check_isolation",
    "make_sandbox",
    "sandbox_for",
]
