"""Services a claw task offers as tools: mail, calendar, contacts, notes and a key-value app.

A task names them with their seeds (``apps: {mail: default, calendar: {...}}``). For each
attempt the HarnessPod keeps a :class:`World` (their state and every call made); the sandbox
reaches it only through the attempt's URL and key (``actors.service_routes``), as a native tool,
an MCP tool or the command-line tool (:mod:`tasks.services.client`); the verifier reads the state
after the episode (``rewards.app_state``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tasks.services import calendar, contacts, kv, mail, notes
from tasks.services.base import App, Op, ServiceError

APPS: dict[str, App] = {
    a.name: a for a in (mail.APP, calendar.APP, contacts.APP, notes.APP, kv.APP)
}
HERE = Path(__file__).resolve().parent
CLIENT_HOST = str(HERE / "client.py")
MOUNT = "/opt/forge/services"  # where the sandbox sees this folder (client.py, bin/)
BIN = f"{MOUNT}/bin"  # one command per service, on the sandbox's PATH
MAX_RESULT_CHARS = 20_000

__all__ = ["APPS", "App", "Op", "ServiceError", "World", "check_apps", "skill_md"]


def check_apps(apps: dict[str, Any]) -> dict[str, Any]:
    """A task's ``apps`` with every seed valid (``default`` or a mapping); ValueError naming the
    service otherwise."""
    for name, seed in apps.items():
        if name not in APPS:
            raise ValueError(f"{name}: unknown service (known: {', '.join(APPS)})")
        if seed != "default" and not isinstance(seed, dict):
            raise ValueError(f"{name}: the seed is 'default' or a mapping")
        try:
            APPS[name].initial(
                copy.deepcopy(APPS[name].default_seed() if seed == "default" else seed)
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{name}: {str(e).removeprefix(name + ': ')}") from None
    return apps


class World:
    """The services of one attempt: their state and the calls made, in order."""

    def __init__(self, apps: dict[str, Any]) -> None:
        self.state: dict[str, dict[str, Any]] = {}
        for name, seed in apps.items():
            seed = APPS[name].default_seed() if seed == "default" else copy.deepcopy(seed)
            self.state[name] = APPS[name].initial(seed)
        self.calls: list[dict[str, Any]] = []

    def catalog(self) -> list[dict[str, Any]]:
        """The operations offered: one entry a service, its operations with their schemas."""
        return [
            {
                "service": name,
                "description": APPS[name].description,
                "ops": [
                    {
                        "name": op.name,
                        "description": op.description,
                        "writes": op.writes,
                        "parameters": op.schema(),
                    }
                    for op in APPS[name].ops.values()
                ],
            }
            for name in self.state
        ]

    def call(self, service: str, op: str, args: Any, via: str = "api", turn: int = 0) -> Any:
        """Run one operation; ServiceError (the caller's mistake) names what was wrong. Every
        call is recorded, refused ones too, with ``via`` (tool, mcp, cli) and the model turn
        it followed."""
        record: dict[str, Any] = {"service": service, "op": op, "via": via, "turn": turn}
        self.calls.append(record)
        if service not in self.state:
            offered = ", ".join(self.state) or "none"
            record["error"] = "unknown service"
            raise ServiceError(f"service: {service!r} is not offered here (offered: {offered})")
        definition = APPS[service].ops.get(op)
        if definition is None:
            record["error"] = "unknown op"
            known = ", ".join(APPS[service].ops)
            raise ServiceError(f"op: {service} has no operation {op!r} (it has: {known})")
        record["writes"] = definition.writes
        try:
            result = definition.run(self.state[service], **definition.check(args))
        except ServiceError as e:
            record["error"] = str(e)[:200]
            raise
        if len(json.dumps(result)) > MAX_RESULT_CHARS:
            raise ServiceError(f"{op}: the result is over {MAX_RESULT_CHARS} characters")
        return result

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self.state)


def skill_md(service: str) -> str:
    """The ``SKILL.md`` of one service: its command-line tool, for harnesses that read skills."""
    definition = APPS[service]
    lines = [
        "---",
        f"name: {service}",
        f"description: {definition.description} Use the `{service}` command in the shell.",
        "---",
        "",
        f"# {service}",
        "",
        f"{definition.description} Run `{service} OPERATION [--param value ...]` in the "
        "shell; it prints JSON. List values are comma-separated "
        "(`--to a@x.example,b@y.example`). `" + service + " --help` lists the operations.",
        "",
    ]
    for op in definition.ops.values():
        args = " ".join(
            f"--{k} {k.upper()}" if p.required else f"[--{k} {k.upper()}]"
            for k, p in op.params.items()
        )
        command = f"{service} {op.name} {args}".strip()
        lines.append(f"- `{command}`: {op.description}")
        for k, p in op.params.items():
            lines.append(f"  - `--{k}` ({p.type}): {p.description}")
    return "\n".join(lines) + "\n"
