"""Service steps of a reference solution for the scripted engine (``tasks.schema.ServiceCall``).

A step ``{service, op, args}`` goes through the service's own tool where the harness offers
one (react's ``mail_send``, an MCP tool such as ``mcp__mail__send`` or ``mail.send``), else
through the service's command-line tool in the shell (``mail send --to ...``).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from forge.types import Tool, ToolCall


def is_service_step(step: Any) -> bool:
    return isinstance(step, dict) and "service" in step and "op" in step


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def find_service_tool(tools: list[Tool], service: str, op: str) -> Tool | None:
    """The offered tool for ``service``'s operation ``op``: its name ends with the service's
    name then the operation's, whatever joins them (``_``, ``__``, ``.``, ``-``)."""
    want = _squash(service + op)
    for tool in tools:
        takes_json = tool.kind == "function" or (
            tool.kind.startswith("namespace:") and not tool.kind.endswith(":custom")
        )  # Codex groups an MCP server's tools in a namespace (``mcp__mail`` -> ``send``)
        if takes_json and _squash(tool.name).endswith(want):
            return tool
    return None


def cli_command(step: dict[str, Any]) -> str:
    """The step as a command line of the service's command-line tool."""
    words = [*shlex.split(step.get("command") or step["service"]), step["op"]]
    for key, value in (step.get("args") or {}).items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = ",".join(value)
        elif isinstance(value, dict | list):
            value = json.dumps(value, ensure_ascii=False)
        words += [f"--{key}", str(value)]
    return shlex.join(words)


def service_tool_call(step: dict[str, Any], tools: list[Tool], call_id: str) -> ToolCall | None:
    tool = find_service_tool(tools, step["service"], step["op"])
    if tool is None:
        return None
    return ToolCall(call_id, tool.name, json.dumps(step.get("args") or {}, ensure_ascii=False))
