"""What the container backends (docker, kubernetes) share: exec and files through the sandbox's
agent (``forge/sandboxes/agent.py``), never through the container platform's API."""

from __future__ import annotations

import time
from typing import Any

from forge.sandboxes.agent_boot import DEFAULT_PATH
from forge.sandboxes.agent_client import AgentClient
from forge.sandboxes.base import ExecResult
from forge.sandboxes.local import SandboxExpired


class AgentSandbox:
    """A base for sandboxes whose agent answers once created. Subclasses set ``name``,
    ``deadline`` (epoch seconds) and ``_state`` (with ``agent`` and ``destroyed``)."""

    name: str
    deadline: float
    _state: Any

    def _agent(self) -> AgentClient:
        if self._state.destroyed:
            raise RuntimeError("sandbox destroyed")
        if self._state.agent is None:
            raise RuntimeError("sandbox not created")
        return self._state.agent

    def default_path(self) -> str:
        return DEFAULT_PATH

    def path_map(self) -> dict[str, str]:
        return {}

    def exec(
        self,
        cmd: list[str],
        timeout_s: float,
        env: dict[str, str] | None = None,
        *,
        user: str | None = None,
    ) -> ExecResult:
        """Run ``cmd`` as the sandbox's unprivileged user, or as ``user`` (``root``, a name,
        ``UID[:GID]``: a verifier's own user, e.g. Harbor's ``verifier.user``)."""
        agent = self._agent()
        remaining = self.deadline - time.time()
        if remaining <= 0:
            raise SandboxExpired(
                f"sandbox {self.name} passed its deadline {-remaining:.1f}s ago; not running "
                f"{cmd!r}"
            )
        if not cmd:
            raise ValueError("empty command")
        return agent.exec(cmd, min(timeout_s, remaining), env, user=user)

    def put_file(self, path: str, content: bytes | str, mode: int = 0o644) -> None:
        self._agent().put_file(path, content, mode)

    def get_file(self, path: str) -> bytes | None:
        return self._agent().get_file(path)

    def get_archive(self, path: str, max_bytes: int = 64 << 20) -> bytes:
        return self._agent().get_archive(path, max_bytes)

    def put_archive(self, path: str, data: bytes) -> None:
        self._agent().put_archive(path, data)
