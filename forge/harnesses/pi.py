"""PiHarness: the pi coding agent (``@mariozechner/pi-coding-agent``), unmodified, in JSON mode.

pi reads its providers from ``$PI_CODING_AGENT_DIR/models.json``; we write one provider whose
``baseUrl`` is the attempt's proxy URL and whose key is the attempt's key, and run one headless
episode: ``pi --provider forge --model M --no-session --mode json -p INSTRUCTION``. Its stdout is
JSON lines; the last ``agent_end`` event holds the whole conversation, whose last assistant text
is the final answer. It speaks chat completions; its tools are read, bash, edit and write. A
task's services are skills (``--skill DIR`` each: a ``SKILL.md`` on their command-line tools),
the only ones loaded (``--no-skills`` still turns discovery off). ``system_prompt`` and ``tools``
are pi's own ``--system-prompt`` and ``--tools`` (its allowlist), for a small model that cannot
afford pi's several-KB coding prompt and four tools.

Reproducibility: HOME, the workspace path (its cwd) and TZ are fixed by the sandbox, and context
files, skills and extensions are off, so the system prompt only varies with the date it embeds
(pi reads the clock; it cannot be pinned without faking time). pi re-serialises tool-call
arguments compactly in the history it sends back, which can break token-prefix merging.
"""

from __future__ import annotations

import json

from forge.harnesses.app_tools import SKILLS_DIR, offered, skills
from forge.harnesses.base import AttemptContext, last_json
from forge.harnesses.install import NODE_BIN, PACKAGES
from forge.harnesses.task_tools import skills_dir
from forge.sandboxes.base import ExecResult
from forge.sandboxes.bwrap import HOME

MOUNT = "/opt/forge/harnesses/pi"  # where the sandbox sees the install folder
AGENT_DIR = f"{HOME}/.pi/agent"


class PiHarness:
    name = "pi"
    protocol = "chat"
    services_via = "skill"
    takes_skills = True  # a task's skills folder: --skill DIR (pi finds each SKILL.md under it)

    def __init__(
        self,
        max_tokens: int | None = None,
        system_prompt: str | None = None,
        tools: list[str] | None = None,
    ) -> None:
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ValueError(f"harness_options.system_prompt: {system_prompt!r} is not a string")
        if tools is not None and (
            not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools)
        ):
            raise ValueError(f"harness_options.tools: {tools!r} is not a list of tool names")
        self.package = PACKAGES["pi"]
        self.max_tokens = max_tokens
        self.system_prompt = system_prompt  # pi's own --system-prompt (None: its coding prompt)
        self.tools = tools  # pi's own --tools allowlist (None: read, bash, edit, write)

    def ro_mounts(self) -> dict[str, str]:
        return {str(self.package.require()): MOUNT}

    def files(self, ctx: AttemptContext) -> dict[str, str]:
        model: dict[str, object] = {"id": ctx.model, "contextWindow": 32768}
        if self.max_tokens:
            model["maxTokens"] = self.max_tokens
        provider = {
            "baseUrl": ctx.base_url,
            "api": "openai-completions",
            "apiKey": ctx.api_key,
            "models": [model],
        }
        files = {f"{AGENT_DIR}/models.json": json.dumps({"providers": {"forge": provider}})}
        return {**files, **skills(ctx)}  # a task's services, as skills (their CLIs)

    def env(self, ctx: AttemptContext) -> dict[str, str]:
        return {
            "PI_CODING_AGENT_DIR": ctx.path(AGENT_DIR),
            "PI_OFFLINE": "1",
            "PI_TELEMETRY": "0",
            "NO_COLOR": "1",
        }

    def command(self, ctx: AttemptContext) -> list[str]:
        return [
            ctx.path(f"{MOUNT}/{NODE_BIN}"),
            ctx.path(f"{MOUNT}/{self.package.entry}"),
            "--provider",
            "forge",
            "--model",
            ctx.model,
            "--no-session",
            "--mode",
            "json",
            "--no-context-files",
            "--no-skills",
            "--no-extensions",
            *(["--system-prompt", self.system_prompt] if self.system_prompt is not None else []),
            *(["--tools", ",".join(self.tools)] if self.tools is not None else []),
            *[a for name in offered(ctx) for a in ("--skill", ctx.path(f"{SKILLS_DIR}/{name}"))],
            *(["--skill", ctx.path(task_skills)] if (task_skills := skills_dir(ctx)) else []),
            "-p",
            ctx.instruction,
        ]

    def final_answer(self, result: ExecResult) -> str | None:
        """The text of the last assistant message in pi's ``agent_end`` event."""
        end = last_json(result.stdout, lambda e: e.get("type") == "agent_end")
        messages = [m for m in (end or {}).get("messages") or [] if isinstance(m, dict)]
        replies = [m for m in messages if m.get("role") == "assistant"]
        if not replies:
            return None
        content = replies[-1].get("content") or []
        return "".join(
            c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text"
        )
