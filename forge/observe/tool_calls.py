"""Tool calls as the recorded requests show them, whatever the protocol: the tool names of each
kind (shell, finish, write, read), the tools a request offered and the tool results in its
history by call id. Shared by the analyses (:mod:`forge.observe.analyze` and its GUI and
services parts) and the ATIF export."""

from __future__ import annotations

import json
from typing import Any

from forge.transcript import tool_results

SHELL_TOOLS = {"shell", "bash", "exec", "exec_command", "run", "terminal", "execute", "run_shell"}
FINISH_TOOLS = {"finish", "submit", "final_answer", "done"}
WRITE_TOOLS = {"write", "write_file", "edit", "edit_file", "apply_patch", "create_file"}
READ_TOOLS = {"read", "read_file", "view", "ls", "list_dir", "grep", "glob", "find"}


def _offered(request: dict[str, Any]) -> set[str]:
    """The tools a request offered, by the names the model calls them (a Codex namespace's
    tools as ``NS__TOOL``, as the proxy records their calls)."""
    names = set()
    for tool in request.get("tools") or []:
        if tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
            names.update(f"{tool.get('name')}__{t.get('name')}" for t in tool["tools"])
            continue
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if isinstance(fn, dict) and fn.get("name"):
            names.add(fn["name"])
    return names


def _results(request: dict[str, Any]) -> dict[str, str]:
    """:func:`tool_results` as JSON text (an Anthropic block keeps its ``is_error``)."""
    return {k: json.dumps(v) for k, v in tool_results(request).items()}
