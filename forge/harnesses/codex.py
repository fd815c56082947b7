"""CodexHarness: OpenAI's Codex CLI (``@openai/codex``), unmodified, one ``codex exec`` episode.

Codex speaks only the Responses API, streamed. We write ``$CODEX_HOME/config.toml`` with one
model provider whose ``base_url`` is the attempt's proxy URL (``wire_api = "responses"``, the key
read from ``FORGE_API_KEY``), approvals off and Codex's own sandbox off (the sandbox is ours), and
run ``codex exec --json --ephemeral``. Its stdout is JSON events; the last ``agent_message``
item is the final answer. A task's services are Codex MCP servers (``[mcp_servers.NAME]``,
stdio: ``forge.harnesses.app_tools``), and so are a task's own (stdio or streamable HTTP); a
task's skills folder is copied into ``$CODEX_HOME/skills``, where Codex looks. Codex offers
non-function tools (``custom`` free-text tools, ``namespace`` groups, ``web_search``); the proxy
maps them to function tools and back.

Reproducibility: HOME, CODEX_HOME, the workspace path and TZ are fixed by the sandbox; Codex's
environment context also carries the current date, which cannot be pinned without faking time,
and a per-session id in its request headers (not in the prompt).
"""

from __future__ import annotations

import json

from forge.harnesses.app_tools import mcp_servers
from forge.harnesses.base import AttemptContext, last_json, string_field
from forge.harnesses.install import PACKAGES
from forge.harnesses.task_tools import servers, skills_dir
from forge.sandboxes.base import ExecResult
from forge.sandboxes.bwrap import HOME

MOUNT = "/opt/forge/harnesses/codex"
CODEX_HOME = f"{HOME}/.codex"
KEY_ENV = "FORGE_API_KEY"
INSTRUCTIONS = f"{CODEX_HOME}/instructions.md"
LEAN = [  # Codex's own switches for what a headless episode does not use
    "[features]",
    "multi_agent = false",
    "goals = false",
    "",
    "[agents]",
    "enabled = false",
    "",
    "[skills]",
    "include_instructions = false",
    "",
]


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def _mcp_tables(ctx: AttemptContext) -> str:
    """A task's services as Codex MCP servers over stdio (``[mcp_servers.NAME]``)."""
    lines = []
    for name, server in mcp_servers(ctx).items():
        env = ", ".join(f"{k} = {_toml_string(v)}" for k, v in server["env"].items())
        lines += [
            f"[mcp_servers.{name}]",
            f"command = {_toml_string(server['command'])}",
            f"args = [{', '.join(map(_toml_string, server['args']))}]",
            f"env = {{ {env} }}",
            "",
        ]
    for server in servers(ctx):  # the task's own
        lines.append(f"[mcp_servers.{server['name']}]")
        if server["transport"] == "stdio":
            lines.append(f"command = {_toml_string(server['command'])}")
            lines.append(f"args = [{', '.join(map(_toml_string, server['args']))}]")
        else:
            lines.append(f"url = {_toml_string(server['url'])}")
        lines.append("")
    return "\n".join(lines)


# $1: Codex's skills folder, $2: the task's; then Codex's command line
COPY_SKILLS = 'mkdir -p "$1" && cp -R "$2"/. "$1"/ && shift 2 && exec "$@"'


class CodexHarness:
    name = "codex"
    protocol = "responses"
    services_via = "mcp"
    takes_skills = True
    mcp_transports = ("stdio", "streamable-http")

    def __init__(self, instructions: str | None = None, lean: bool = False) -> None:
        """For models whose context cannot hold Codex's prompt (~39k characters):
        ``instructions`` replaces its built-in base instructions through its own
        ``model_instructions_file`` setting; ``lean`` turns off, through its own config, the
        tools and blocks a headless episode does not need (multi-agent, goals, web search, the
        skills list)."""
        self.package = PACKAGES["codex"]
        self.instructions = instructions
        self.lean = lean

    def ro_mounts(self) -> dict[str, str]:
        return {str(self.package.require()): MOUNT}

    def files(self, ctx: AttemptContext) -> dict[str, str]:
        config = "\n".join(
            [
                f"model = {_toml_string(ctx.model)}",
                'model_provider = "forge"',
                'approval_policy = "never"',
                'sandbox_mode = "danger-full-access"',
                "check_for_update_on_startup = false",
                *(
                    [f"model_instructions_file = {_toml_string(ctx.path(INSTRUCTIONS))}"]
                    if self.instructions is not None
                    else []
                ),
                *(['web_search = "disabled"'] if self.lean else []),
                "",
                "[analytics]",
                "enabled = false",
                "",
                *(LEAN if self.lean else []),
                "[model_providers.forge]",
                'name = "forge"',
                f"base_url = {_toml_string(ctx.base_url)}",
                'wire_api = "responses"',
                f'env_key = "{KEY_ENV}"',
                "",
            ]
        )
        files = {f"{CODEX_HOME}/config.toml": config + _mcp_tables(ctx)}
        if self.instructions is not None:
            files[INSTRUCTIONS] = self.instructions
        return files

    def env(self, ctx: AttemptContext) -> dict[str, str]:
        return {"CODEX_HOME": ctx.path(CODEX_HOME), KEY_ENV: ctx.api_key, "NO_COLOR": "1"}

    def command(self, ctx: AttemptContext) -> list[str]:
        task_skills = skills_dir(ctx)
        copy = ["/bin/sh", "-c", COPY_SKILLS, "sh", ctx.path(f"{CODEX_HOME}/skills")]
        return [
            *([*copy, ctx.path(task_skills)] if task_skills else []),
            ctx.path(f"{MOUNT}/{self.package.entry}"),
            "exec",
            "--dangerously-bypass-approvals-and-sandbox",
            "--skip-git-repo-check",
            "--json",
            "--ephemeral",
            "-C",
            ctx.workspace,
            ctx.instruction,
        ]

    def final_answer(self, result: ExecResult) -> str | None:
        """The text of the last ``agent_message`` item Codex completed."""

        def agent_message(event: dict) -> bool:
            item = event.get("item")
            return (
                event.get("type") == "item.completed"
                and isinstance(item, dict)
                and item.get("type") == "agent_message"
            )

        event = last_json(result.stdout, agent_message)
        return string_field(event["item"], "text") if event else None
