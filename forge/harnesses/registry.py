"""Harness adapters by name: ``get_harness("react", temperature=1.0)``."""

from __future__ import annotations

from typing import Any

from forge.harnesses.agent_s import AgentSHarness
from forge.harnesses.base import AttemptContext, Harness
from forge.harnesses.browser import BrowserHarness
from forge.harnesses.browser_use import BrowserUseHarness
from forge.harnesses.codex import CodexHarness
from forge.harnesses.command import CommandHarness
from forge.harnesses.cua import CuaHarness
from forge.harnesses.desktop import DesktopHarness
from forge.harnesses.mini_swe_agent import MiniSweAgentHarness
from forge.harnesses.nanobot import NanobotHarness
from forge.harnesses.openclaw import OpenClawHarness
from forge.harnesses.pi import PiHarness
from forge.harnesses.react import ReactHarness
from forge.harnesses.zeroclaw import ZeroClawHarness

HARNESSES: dict[str, type] = {
    "react": ReactHarness,
    "pi": PiHarness,
    "codex": CodexHarness,
    "mini-swe-agent": MiniSweAgentHarness,
    "openclaw": OpenClawHarness,
    "nanobot": NanobotHarness,
    "zeroclaw": ZeroClawHarness,
    "command": CommandHarness,
    "browser": BrowserHarness,
    "browser-use": BrowserUseHarness,
    "desktop": DesktopHarness,
    "agent-s": AgentSHarness,
    "cua": CuaHarness,
}


def get_harness(name: str, /, **options: Any) -> Harness:
    """A harness adapter; ``options`` go to its constructor."""
    try:
        cls = HARNESSES[name]
    except KeyError:
        known = ", ".join(sorted(HARNESSES))
        raise ValueError(f"unknown harness {name!r}; known: {known}") from None
    return cls(**options)


def require(name: str, options: dict[str, Any]) -> None:
    """Stop before anything starts, naming the fix, when harness ``name`` cannot run here
    (not installed, or a binary not given): raises ``HarnessNotInstalled``."""
    get_harness(name, **options).ro_mounts()


__all__ = [
    "HARNESSES",
    "AgentSHarness",
    "AttemptContext",
    "BrowserHarness",
    "BrowserUseHarness",
    "CodexHarness",
    "CommandHarness",
    "CuaHarness",
    "DesktopHarness",
    "Harness",
    "MiniSweAgentHarness",
    "NanobotHarness",
    "OpenClawHarness",
    "PiHarness",
    "ReactHarness",
    "ZeroClawHarness",
    "get_harness",
    "require",
]
