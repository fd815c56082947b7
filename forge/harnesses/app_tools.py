"""How a task's services (``tasks.services``) reach a harness in its sandbox.

The services live in the HarnessPod at the attempt's URL (``actors.service_routes``); the
sandbox gets, from one definition:

- the command-line tools (``mail``, ``calendar``, ...) on its PATH, with
  ``$FORGE_SERVICES_URL`` and ``$FORGE_SERVICES_KEY`` (every harness with a shell);
- an MCP server per service, over stdio (``python3 -I client.py --mcp SERVICE``) or streamable
  HTTP (``.../mcp/SERVICE``): :func:`mcp_servers`, for harnesses configured with MCP servers;
- a ``SKILL.md`` per service describing its CLI: :func:`skills`, for harnesses that read skills;
- native tools in ``react`` (``react_agent`` reads the catalog at ``$FORGE_SERVICES_URL``).

A harness says which it uses in ``services_via`` (default ``cli``: the instruction then names the
commands, :func:`cli_hint`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from forge.sandboxes.bwrap import HOME
from tasks.services import BIN, CLIENT_HOST, MOUNT, catalog, skill_md

if TYPE_CHECKING:
    from forge.harnesses.base import AttemptContext
    from tasks.schema import Task

SERVICES_HOST = CLIENT_HOST.rsplit("/", 1)[0]
CLIENT = f"{MOUNT}/client.py"
SERVICE_ENV = ("FORGE_SERVICES_URL", "FORGE_SERVICES_KEY")  # what the commands need
SKILLS_DIR = f"{HOME}/.forge/skills"  # one SKILL.md a service, for harnesses that read skills


def app_mounts(task: Task) -> dict[str, str]:
    """The services' client and commands, read-only, when the task has services."""
    return {SERVICES_HOST: MOUNT} if task.apps else {}


def app_extra(task: Task) -> dict[str, str]:
    """``AttemptContext.extra`` entries: ``apps``, the services offered (comma-separated), and
    ``catalog``, their operations (JSON: :func:`tasks.services.catalog`)."""
    if not task.apps:
        return {}
    return {"apps": ",".join(task.apps), "catalog": json.dumps(catalog(task.apps))}


def offered(ctx: AttemptContext) -> list[str]:
    return [s for s in ctx.extra.get("apps", "").split(",") if s]


def services_url(ctx: AttemptContext) -> str:
    return f"{ctx.anthropic_base_url.rstrip('/')}/services"


def app_env(task: Task, ctx: AttemptContext, env: dict[str, str]) -> dict[str, str]:
    """``env`` with the services' URL, key and commands on PATH, when the task has services."""
    if not task.apps:
        return env
    path = env.get("PATH") or ctx.path_var
    return {
        **env,
        "FORGE_SERVICES_URL": services_url(ctx),
        "FORGE_SERVICES_KEY": ctx.api_key,
        "PATH": f"{ctx.path(BIN)}:{path}" if path else ctx.path(BIN),
    }


def cli_hint(task: Task) -> str:
    """What a harness that meets the services only as commands is told, after the instruction."""
    commands = [entry["command"] for entry in catalog(task.apps)]
    names = ", ".join(f"`{c}`" for c in commands)
    return (
        f"\n\nService commands available in the shell: {names} "
        f"(run `{commands[0]} --help` to see the operations; each prints JSON)."
    )


def services_via(harness: object) -> str:
    """How ``harness`` offers a task's services: ``tool`` (natively), ``mcp``, ``skill``, or
    ``cli`` (commands only; the instruction then says so: :func:`cli_hint`)."""
    return str(getattr(harness, "services_via", "cli"))


def mcp_servers(ctx: AttemptContext, python: str = "python3") -> dict[str, dict[str, Any]]:
    """Per service: how to start its MCP server over stdio (``command``, ``args``, ``env``) and
    its streamable HTTP ``url`` (with the ``headers`` that authorise it)."""
    env = {"FORGE_SERVICES_URL": services_url(ctx), "FORGE_SERVICES_KEY": ctx.api_key}
    base = ctx.anthropic_base_url.rstrip("/")
    return {
        name: {
            "command": python,
            "args": ["-I", ctx.path(CLIENT), "--mcp", name],
            "env": env,
            "url": f"{base}/mcp/{name}",
            "headers": {"Authorization": f"Bearer {ctx.api_key}"},
        }
        for name in offered(ctx)
    }


def skills(ctx: AttemptContext, skills_dir: str = SKILLS_DIR) -> dict[str, str]:
    """``SKILL.md`` files for the offered services, one folder each under ``skills_dir``
    (sandbox path -> text)."""
    entries = json.loads(ctx.extra.get("catalog") or "[]")
    return {f"{skills_dir.rstrip('/')}/{e['service']}/SKILL.md": skill_md(e) for e in entries}
