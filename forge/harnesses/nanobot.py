"""NanobotHarness: nanobot (PyPI ``nanobot-ai``), a lightweight claw-type assistant, unmodified.

One ``nanobot agent -c CFG -w WS --no-markdown -m INSTRUCTION`` episode. Its config has one
``custom`` provider (an OpenAI-compatible endpoint) whose ``apiBase`` and ``apiKey`` are the
attempt's proxy URL and key. It streams chat completions and offers ~23 tools (exec, read_file,
write_file, edit_file, grep, ...). Like mini-swe-agent it is installed with pip into its own
folder and run by the sandbox's ``python3`` with that folder on ``PYTHONPATH``; a few lines
around its entry point print the last assistant message of its session file (kept beside its
config) as our last stdout line. A task's services are nanobot MCP servers over streamable HTTP
(``tools.mcpServers``, its tools named ``mcp_SERVICE_OP``); its SSRF guard is told to allow the
proxy's address alone, and its exec tool gets the services' commands and keys.

nanobot seeds its workspace with its own files (AGENTS.md, SOUL.md, USER.md, HEARTBEAT.md,
memory/, prompts/, skills/, a ``.git`` memory store). Its workspace must be the task's, since its
tools work there; so the runner removes, after the episode, those of its scaffold entries that
were not in the workspace before, and the verifier grades only what the agent did.

Reproducibility: HOME, the workspace path and TZ are fixed by the sandbox, and the config pins
nanobot's timezone; its recorded prompts carry no date and no ids.
"""

from __future__ import annotations

import ipaddress
import json
from urllib.parse import urlparse

from forge.harnesses.app_tools import SERVICE_ENV, mcp_servers
from forge.harnesses.base import AttemptContext, last_json, string_field
from forge.harnesses.install import PACKAGES
from forge.harnesses.task_tools import servers
from forge.sandboxes.base import ExecResult
from forge.sandboxes.bwrap import HOME
from tasks.services import BIN

MOUNT = "/opt/forge/harnesses/nanobot"
CONFIG = f"{HOME}/.nanobot/config.json"  # its sessions go beside it, in sessions/
SCAFFOLD = (
    "AGENTS.md",
    "SOUL.md",
    "USER.md",
    "HEARTBEAT.md",
    "TOOLS.md",
    "memory",
    "prompts",
    "skills",
    "cron",
    ".git",
    ".gitignore",
    ".nanobot",
)
RUNNER = """
import glob, json, os, shutil, sys
from nanobot.cli.entry import main
config, workspace, scaffold = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
before = set(os.listdir(workspace))
sys.argv = ["nanobot", "agent", "-c", config, "-w", workspace, *sys.argv[4:]]
try:
    main()
except SystemExit:
    pass
finally:
    answer = None
    sessions = glob.glob(os.path.join(os.path.dirname(config), "sessions", "*", "*.jsonl"))
    for path in sessions:
        for line in open(path):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("role") == "assistant" and isinstance(record.get("content"), str):
                answer = record["content"].strip() or answer
    for name in set(scaffold) - before:
        path = os.path.join(workspace, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.remove(path)
    print(json.dumps({"final_answer": answer}))
"""


def _proxy_network(ctx: AttemptContext) -> list[str]:
    """The proxy's address as a one-address network, when it is an IP literal."""
    host = urlparse(ctx.base_url).hostname or ""
    try:
        return [str(ipaddress.ip_network(host))]
    except ValueError:
        return []


def _task_server(server: dict) -> dict[str, object]:
    """A task's MCP server (:mod:`tasks.mcp`) in nanobot's ``mcpServers`` form."""
    if server["transport"] == "stdio":
        return {"type": "stdio", "command": server["command"], "args": server["args"]}
    kind = "sse" if server["transport"] == "sse" else "streamableHttp"
    return {"type": kind, "url": server["url"]}


class NanobotHarness:
    name = "nanobot"
    protocol = "chat"
    services_via = "mcp"
    mcp_transports = ("stdio", "sse", "streamable-http")

    def __init__(self, max_tokens: int = 1024, context_window: int = 131072) -> None:
        if max_tokens < 1 or context_window < max_tokens:
            raise ValueError("need 1 <= max_tokens <= context_window")
        self.package = PACKAGES["nanobot"]
        self.max_tokens = max_tokens
        self.context_window = context_window

    def ro_mounts(self) -> dict[str, str]:
        return {str(self.package.require()): MOUNT}

    def files(self, ctx: AttemptContext) -> dict[str, str]:
        config = {
            "providers": {"custom": {"apiKey": ctx.api_key, "apiBase": ctx.base_url}},
            "agents": {
                "defaults": {
                    "model": ctx.model,
                    "provider": "custom",
                    "workspace": ctx.workspace,
                    "maxTokens": self.max_tokens,
                    "contextWindowTokens": self.context_window,
                    "maxToolIterations": ctx.max_turns,
                    "timezone": "UTC",
                }
            },
        }
        offered = {
            name: {"type": "streamableHttp", "url": s["url"], "headers": s["headers"]}
            for name, s in mcp_servers(ctx).items()
        }
        tools: dict[str, object] = {}
        if offered:  # a task's services, over MCP's streamable HTTP at the attempt's URL
            tools = {
                # nanobot refuses private addresses (SSRF), the proxy's included: allow it alone
                "ssrfWhitelist": _proxy_network(ctx),
                # its exec tool builds its own environment: the services' commands and keys
                "exec": {"pathPrepend": ctx.path(BIN), "allowedEnvKeys": list(SERVICE_ENV)},
            }
        own = {s["name"]: _task_server(s) for s in servers(ctx)}  # the task's own MCP servers
        if offered or own:
            config["tools"] = {"mcpServers": {**offered, **own}, **tools}
        return {CONFIG: json.dumps(config, indent=1)}

    def env(self, ctx: AttemptContext) -> dict[str, str]:
        return {"PYTHONPATH": ctx.path(MOUNT), "NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1"}

    def command(self, ctx: AttemptContext) -> list[str]:
        return [
            "python3",
            "-c",
            RUNNER,
            ctx.path(CONFIG),
            ctx.workspace,
            ",".join(SCAFFOLD),
            "--no-markdown",
            "-m",
            ctx.instruction,
        ]

    def final_answer(self, result: ExecResult) -> str | None:
        return string_field(last_json(result.stdout, lambda r: "final_answer" in r), "final_answer")
