"""Sandbox backends by name: ``make_sandbox("local", root=..., isolation=...)``."""

from __future__ import annotations

from typing import Any

from forge.sandboxes.base import ExecResult, Sandbox, SandboxSpec
from forge.sandboxes.local import LocalSandbox

SANDBOXES: dict[str, type] = {"local": LocalSandbox}


def make_sandbox(backend: str, **options: Any) -> Sandbox:
    """A new, not yet created sandbox of ``backend``; ``options`` go to its constructor."""
    try:
        cls = SANDBOXES[backend]
    except KeyError:
        known = ", ".join(sorted(SANDBOXES))
        raise ValueError(f"unknown sandbox backend {backend!r}; known: {known}") from None
    return cls(**options)


__all__ = ["SANDBOXES", "ExecResult", "LocalSandbox", "Sandbox", "SandboxSpec", "make_sandbox"]
