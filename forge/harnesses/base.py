"""The Harness interface: how an agent harness is installed, configured and run for one attempt."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from forge.sandboxes.base import ExecResult


@dataclass
class AttemptContext:
    """Everything a harness needs to point itself at its attempt's proxy.

    ``base_url`` ends in ``/v1`` (OpenAI style); ``anthropic_base_url`` is the same without it.
    ``workspace`` is the workspace as commands see it (``Sandbox.workspace``). ``paths`` is the
    sandbox's ``path_map()``: harnesses build every sandbox path they hand to a command with
    :meth:`path`, so a read-only mount at ``/opt/forge/...`` still works where the backend could
    only run the command on the host.
    """

    base_url: str
    anthropic_base_url: str
    api_key: str
    model: str
    instruction: str
    workspace: str
    max_turns: int = 20
    timeout_s: float = 600.0  # the task's time limit for the whole episode
    path_var: str = ""  # the sandbox's default PATH (``Sandbox.default_path()``)
    extra: dict[str, str] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)

    def path(self, sandbox_path: str) -> str:
        """``sandbox_path`` as commands in this attempt's sandbox see it."""
        hits = [
            p
            for p in self.paths
            if sandbox_path == p or sandbox_path.startswith(p.rstrip("/") + "/")
        ]
        if not hits:
            return sandbox_path
        best = max(hits, key=len)
        return self.paths[best] + sandbox_path[len(best) :]


class Harness(Protocol):
    name: str
    protocol: str  # "chat" | "responses" | "anthropic": the wire protocol it speaks

    def ro_mounts(self) -> dict[str, str]:
        """Host paths (install caches, the harness program) to mount read-only: host -> sandbox."""
        ...

    def files(self, ctx: AttemptContext) -> dict[str, str]:
        """Files to write into the sandbox before the episode (sandbox path -> content)."""
        ...

    def env(self, ctx: AttemptContext) -> dict[str, str]: ...

    def command(self, ctx: AttemptContext) -> list[str]:
        """The command line of one headless episode."""
        ...

    def final_answer(self, result: ExecResult) -> str | None:
        """The harness's final answer, read from its output.

        A harness whose agent writes its answer to a file also defines ``answer_file(ctx) ->
        str | None`` (the sandbox path, or None for stdout); the episode then reads that file
        before the sandbox goes and calls ``final_answer(result, data)`` with its bytes (None
        when it is missing or unreadable)."""
        ...


def agent_env(ctx: AttemptContext, **options: object) -> dict[str, str]:
    """The environment of a built-in agent program (``react_agent`` and the GUI agents): the
    attempt's endpoint, key, model and turn limit, the task's ``start_url`` and ``screen`` when
    it has them, and ``FORGE_<NAME>`` for each option that is not None (a list comma-joined:
    ``[]`` is an empty value, not an absent one)."""
    env = {
        "OPENAI_BASE_URL": ctx.base_url,
        "OPENAI_API_KEY": ctx.api_key,
        "FORGE_MODEL": ctx.model,
        "FORGE_MAX_TURNS": str(ctx.max_turns),
        "PYTHONUNBUFFERED": "1",
    }
    for key in ("start_url", "screen"):
        if ctx.extra.get(key):
            env[f"FORGE_{key.upper()}"] = ctx.extra[key]
    for name, value in options.items():
        if value is not None:
            text = ",".join(value) if isinstance(value, list | tuple) else str(value)
            env[f"FORGE_{name.upper()}"] = text
    return env


def last_json(stdout: str, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """The last JSON object line of ``stdout`` that ``match`` accepts (harnesses that report
    in JSON lines); None when there is none."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and match(record):
            return record
    return None


def string_field(record: dict[str, Any] | None, key: str) -> str | None:
    value = (record or {}).get(key)
    return value if isinstance(value, str) else None


class AgentProgram:
    """What the project's own agent programs (``react``, ``browser``, ``desktop``) share: the
    sandbox runs ``python PROGRAM INSTRUCTION``, writes no files first, and the program reports
    in JSON lines, the last of them a summary with ``final_answer`` and ``stop``."""

    program: str  # where the sandbox sees the program
    python: str = "python3"

    def files(self, ctx: AttemptContext) -> dict[str, str]:
        return {}

    def command(self, ctx: AttemptContext) -> list[str]:
        return [self.python, ctx.path(self.program), ctx.instruction]

    def final_answer(self, result: ExecResult) -> str | None:
        """``final_answer`` of the last JSON line on stdout (None when there is none)."""
        return string_field(last_json(result.stdout, lambda r: "final_answer" in r), "final_answer")

    @staticmethod
    def summary(result: ExecResult) -> dict[str, object] | None:
        """The program's last JSON line: ``final_answer``, ``turns``, ``stop``, and for the GUI
        programs ``actions`` and ``unchanged`` (the actions that left the screen as it was)."""
        return last_json(result.stdout, lambda r: "stop" in r)
