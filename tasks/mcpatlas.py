"""MCP-Atlas tasks in, its credential-free subset: ``tasks: mcpatlas:PATH``, a checkout of the
benchmark (its ``services/agent-environment``: the servers' template and ``data/``) holding the
tasks as a CSV you exported from its dataset (columns ``TASK``, ``PROMPT``, ``ENABLED_TOOLS``,
``GTFA_CLAIMS``; the first ``*.csv`` at the checkout's top with them), or that CSV file itself.
Neither is in this repository: fetch them yourself (docs/guides/claw_benchmarks.md).

A row becomes a :class:`tasks.schema.Task`: the prompt is its instruction; each server its
enabled tools belong to (a tool is ``SERVER_TOOL``) is a service of the task's own
(:mod:`tasks.services.mcp_app`: the pod runs it per attempt in a sandbox of its own, on a copy
of ``data/`` at ``/data``), offering only the task's enabled tools; its verifier is ``claims``
(:mod:`rewards.claims`: the judge's claim coverage of the final answer), passed at 0.75.

Only servers that need neither credentials nor the internet run (:data:`OFFLINE`); a task
needing another is left out, naming it. ``npx``/``uvx`` servers are installed once
(:mod:`tasks.services.mcp_install`) and each server's tools are listed once per load.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path
from typing import Any

from tasks.errors import TaskError, build_task, load_each
from tasks.schema import Task
from tasks.services.mcp_app import discover
from tasks.services.mcp_install import InstallError, runnable

PREFIX = "mcpatlas:"
ENVIRONMENT = Path("services/agent-environment")
TEMPLATE = ENVIRONMENT / "src/agent_environment/mcp_server_template.json"
COLUMNS = {"TASK", "PROMPT", "ENABLED_TOOLS"}
PASS_THRESHOLD = 0.75  # its pass rate counts a coverage of 0.75
LIMITS = {"timeout_s": 1800.0, "max_turns": 100}  # its harness: 1800 s, 100 tool calls
# Its servers that need neither a credential nor the internet (the rest are left out here)
OFFLINE = ("calculator", "cli-mcp-server", "desktop-commander", "filesystem", "git", "memory",
           "mcp-server-code-runner", "mcp-code-executor")  # fmt: skip
csv.field_size_limit(sys.maxsize)


def is_mcpatlas(name: str) -> bool:
    return name.startswith(PREFIX)


def _checkout(path: Path) -> Path:
    for folder in (path, *path.parents):
        if (folder / TEMPLATE).is_file():
            return folder
    raise TaskError([(str(path), "", f"not in an MCP-Atlas checkout (no {TEMPLATE} above it)")])


def _tasks_csv(path: Path) -> Path:
    if path.is_file():
        return path
    for found in sorted(path.glob("*.csv")):
        with open(found, newline="") as f:
            if set(next(csv.reader(f), [])) >= COLUMNS:
                return found
    raise TaskError([(str(path), "", "no tasks CSV (with TASK, PROMPT, ENABLED_TOOLS columns) "
                      "at its top: export the dataset there")])  # fmt: skip


def _json_list(value: str, field: str) -> list[Any]:
    value = (value or "").strip()
    if not value:
        return []
    try:
        out = json.loads(value)
    except ValueError:
        raise ValueError(f"{field}: not a JSON list") from None
    if not isinstance(out, list):
        raise ValueError(f"{field}: not a JSON list")
    return out


def _tool_names(value: str) -> list[str]:
    items = _json_list(value, "ENABLED_TOOLS")
    return [str(i.get("name") if isinstance(i, dict) else i) for i in items]


def _claims(value: str) -> list[str]:
    value = (value or "").strip()
    items = _json_list(value, "GTFA_CLAIMS") if value.startswith("[") else value.splitlines()
    return [c for c in (re.sub(r"^\s*[-*\d.)]+\s*", "", str(i)).strip() for i in items) if c]


class Servers:
    """The template's servers, each made runnable and its tools listed once per load."""

    def __init__(self, root: Path) -> None:
        self.root = root
        raw = json.loads((root / TEMPLATE).read_text())
        self.template: dict[str, Any] = raw.get("mcpServers", raw)
        self._specs: dict[str, dict[str, Any] | str] = {}

    def owner(self, tool: str) -> str | None:
        """The server a ``SERVER_TOOL`` name belongs to (the longest server name that fits)."""
        fits = [s for s in self.template if tool.startswith(f"{s}_")]
        return max(fits, key=len) if fits else None

    def spec(self, server: str) -> dict[str, Any]:
        """The server's :class:`McpService` fields with every tool it has; ValueError why not."""
        if server not in self._specs:
            try:
                self._specs[server] = self._make(server)
            except (ValueError, InstallError, RuntimeError) as e:
                self._specs[server] = str(e)
        got = self._specs[server]
        if isinstance(got, str):
            raise ValueError(f"ENABLED_TOOLS: {got}")
        return got

    def _make(self, server: str) -> dict[str, Any]:
        if server not in OFFLINE:
            raise ValueError(f"server {server} needs credentials or the internet (not run here)")
        entry = self.template[server]
        args = [str(a) for a in entry.get("args") or []]
        here = [str(self.root / a) if (self.root / a).is_file() else a for a in args]
        argv, mounts = runnable(str(entry["command"]), here)
        mounts += sorted({str(Path(a).parent) for a in here if a.startswith(str(self.root))})
        env = {str(k): str(v) for k, v in (entry.get("env") or {}).items()}
        spec = {"command": argv, "env": env, "mounts": mounts,
                "data": str(self.root / ENVIRONMENT / "data")}  # fmt: skip
        tools = discover(spec)
        return {**spec, "tools": [t.model_dump() for t in tools]}


def load_row(row: dict[str, str], servers: Servers, source: str) -> Task:
    """One CSV row as a Task; TaskError naming the row and field at fault."""
    where = f"{source}#{row.get('TASK', '?')}"
    try:
        names = _tool_names(row.get("ENABLED_TOOLS", ""))
        claims = _claims(row.get("GTFA_CLAIMS", ""))
        if not claims:
            raise ValueError("GTFA_CLAIMS: none (the judge has nothing to check)")
        wanted: dict[str, list[str]] = {}
        for name in names:
            server = servers.owner(name)
            if server is None:
                raise ValueError(f"ENABLED_TOOLS: {name} belongs to no server of the template")
            wanted.setdefault(server, []).append(name.removeprefix(f"{server}_"))
        apps = {}
        for server, tools in wanted.items():
            spec = servers.spec(server)
            have = {t["name"]: t for t in spec["tools"]}
            missing = [t for t in tools if t not in have]
            if missing:
                raise ValueError(f"ENABLED_TOOLS: {server} has no tool {missing[0]}")
            apps[server] = {"mcp": {**spec, "tools": [have[t] for t in tools]}}
    except ValueError as e:
        field, _, why = str(e).partition(": ")
        raise TaskError([(where, field if why else "", why or str(e))]) from None
    data = {
        "id": re.sub(r"[^a-z0-9._-]+", "-", str(row["TASK"]).lower()).strip("-._") or "task",
        "instruction": row["PROMPT"],
        "apps": apps,
        "limits": dict(LIMITS),
        "pass_threshold": PASS_THRESHOLD,
        "verifier": {"type": "claims", "claims": claims},
        "tags": ["mcpatlas", *wanted],
    }
    return build_task(data, where)


def load(name: str, skipped: list[tuple[str, str, str]] | None = None) -> list[Task]:
    """The tasks of ``mcpatlas:PATH``: every row's problems raised together, or, given
    ``skipped``, added to it while the rest load (none loading still raises)."""
    path = Path(name.removeprefix(PREFIX)).expanduser().resolve()
    servers = Servers(_checkout(path))
    table = _tasks_csv(path)
    with open(table, newline="") as f:
        rows = list(csv.DictReader(f))
    return load_each(rows, lambda row: load_row(row, servers, str(table)), skipped)
