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
import threading
from pathlib import Path
from typing import Any

from tasks.services import calendar, contacts, kv, mail, notes
from tasks.services.base import App, Op, ServiceError
from tasks.services.http import HttpApp, catalog_entry, own_app, own_spec, writes
from tasks.services.mcp_app import McpApp

APPS: dict[str, App] = {
    a.name: a for a in (mail.APP, calendar.APP, contacts.APP, notes.APP, kv.APP)
}
HERE = Path(__file__).resolve().parent
CLIENT_HOST = str(HERE / "client.py")
MOUNT = "/opt/forge/services"  # where the sandbox sees this folder (client.py, bin/)
BIN = f"{MOUNT}/bin"  # one command per service, on the sandbox's PATH
MAX_RESULT_CHARS = 20_000

__all__ = ["APPS", "App", "Op", "ServiceError", "World", "catalog", "check_apps", "skill_md"]


def check_apps(apps: dict[str, Any]) -> dict[str, Any]:
    """A task's ``apps`` with every seed valid (``default``, a mapping, or the task's own service:
    ``{http: {...}}``, :mod:`tasks.services.http`, or ``{mcp: {...}}``,
    :mod:`tasks.services.mcp_app`); ValueError naming the service otherwise."""
    for name, seed in apps.items():
        try:
            if own_spec(seed) is not None:
                continue
        except ValueError as e:
            raise ValueError(f"{name}.{next(iter(seed))}: {e}") from None
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
    """The services of one attempt: their state and the calls made, in order. A task's own
    services (HTTP programs, MCP servers) run from here until :meth:`close`."""

    def __init__(self, apps: dict[str, Any]) -> None:
        self.state: dict[str, dict[str, Any]] = {}
        self.own: dict[str, HttpApp | McpApp] = {}  # the task's own services, running
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._kept: dict[str, Any] = {}  # own services' records, once pickled away from them
        self.apps = apps
        try:
            for name, seed in apps.items():
                spec = own_spec(seed)
                if spec is not None:
                    self.own[name] = own_app(name, spec)
                    continue
                seed = APPS[name].default_seed() if seed == "default" else copy.deepcopy(seed)
                self.state[name] = APPS[name].initial(seed)
        except BaseException:
            self.close()
            raise

    def catalog(self) -> list[dict[str, Any]]:
        """The operations offered: one entry a service, its operations with their schemas."""
        return catalog(self.apps)

    def call(self, service: str, op: str, args: Any, via: str = "api", turn: int = 0) -> Any:
        """Run one operation; ServiceError (the caller's mistake) names what was wrong. Every
        call is recorded, refused ones too, with ``via`` (tool, mcp, cli) and the model turn
        it followed."""
        record: dict[str, Any] = {"service": service, "op": op, "via": via, "turn": turn}
        self.calls.append(record)
        if service in self.own:
            return self._call_own(record, self.own[service], op, args)
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
            with self._lock:
                result = definition.run(self.state[service], **definition.check(args))
        except ServiceError as e:
            record["error"] = str(e)[:200]
            raise
        if len(json.dumps(result)) > MAX_RESULT_CHARS:
            raise ServiceError(f"{op}: the result is over {MAX_RESULT_CHARS} characters")
        return result

    def _call_own(self, record: dict[str, Any], app: HttpApp | McpApp, op: str, args: Any) -> Any:
        record["writes"] = op in app.ops and writes(op)
        try:
            return app.call(op, args)
        except ServiceError as e:
            record["error"] = str(e)[:200]
            raise

    def wait_ready(self) -> None:
        """Wait for the task's own services to answer; RuntimeError (an infrastructure
        failure: the attempt fails and is retried) naming one that did not."""
        for app in self.own.values():
            app.wait_ready()

    def close(self) -> None:
        """Stop the task's own services, keeping what each did (idempotent)."""
        for app in self.own.values():
            app.close()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            state = copy.deepcopy(self.state)
        return {**state, **self._kept, **{name: app.snapshot() for name, app in self.own.items()}}

    def __getstate__(self) -> dict[str, Any]:
        """A copy to send elsewhere (a closed attempt's record): the task's own services' records go
        with it, their processes and the lock stay here."""
        out = dict(self.__dict__, _lock=None, own={})
        out["_kept"] = {**self._kept, **{n: a.snapshot() for n, a in self.own.items()}}
        return out

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def catalog(apps: dict[str, Any]) -> list[dict[str, Any]]:
    """The catalog of a task's ``apps``: one entry a service (its ``command`` in the sandbox's
    shell, its operations with their JSON Schemas), the same before and during an attempt."""
    out = []
    for name, seed in apps.items():
        spec = own_spec(seed)
        if spec is not None:
            out.append({**catalog_entry(name, spec), "command": f"forge-service {name}"})
            continue
        ops = [{"name": op.name, "description": op.description, "writes": op.writes,
                "parameters": op.schema()} for op in APPS[name].ops.values()]  # fmt: skip
        out.append({"service": name, "description": APPS[name].description, "command": name,
                    "ops": ops})  # fmt: skip
    return out


def skill_md(entry: dict[str, Any]) -> str:
    """The ``SKILL.md`` of one service (its :func:`catalog` entry): its command-line tool, for
    harnesses that read skills."""
    service, command, about = entry["service"], entry["command"], entry["description"]
    lines = [
        "---",
        f"name: {service}",
        f"description: {about} Use the `{command}` command in the shell.",
        "---",
        "",
        f"# {service}",
        "",
        f"{about} Run `{command} OPERATION [--param value ...]` in the shell; it prints JSON. "
        "List values are comma-separated (`--to a@x.example,b@y.example`), objects JSON. "
        f"`{command} --help` lists the operations.",
        "",
    ]
    for op in entry["ops"]:
        props = op["parameters"].get("properties") or {}
        required = set(op["parameters"].get("required") or [])
        args = " ".join(
            f"--{k} {k.upper()}" if k in required else f"[--{k} {k.upper()}]" for k in props
        )
        usage = f"{command} {op['name']} {args}".strip()
        lines.append(f"- `{usage}`: {op['description']}")
        for k, p in props.items():
            lines.append(f"  - `--{k}` ({p.get('type', 'string')}): {p.get('description', '')}")
    return "\n".join(lines) + "\n"
