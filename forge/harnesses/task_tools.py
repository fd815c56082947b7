"""What a task's own environment offers its agent beyond the shell (a Harbor task's
``skills_dir`` and ``mcp_servers``), given to each harness in its own way.

- **Skills** (a folder in the image whose subfolders hold a ``SKILL.md`` each): a harness that
  reads skills (``takes_skills = True``: pi, OpenClaw, Codex, the ``command`` harness) is pointed
  at the folder, or has it copied where it looks; any other is told where the skills are, after
  the instruction (:func:`skills_hint`), as Harbor leaves it to each agent.
- **MCP servers** (:class:`tasks.mcp.McpServer`): a harness names the transports it takes
  (``mcp_transports``: Codex, nanobot, ``command``); a task whose servers a run's harness cannot
  take is left out at the start, naming the server (:func:`mcp_refusal`), never played without
  its tools.

The episode hands both to the harness in ``AttemptContext.extra`` (:func:`task_extra`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forge.harnesses.base import AttemptContext
    from tasks.schema import Task

SKILLS_KEY = "task_skills_dir"
MCP_KEY = "task_mcp_servers"


def task_extra(task: Task) -> dict[str, str]:
    """``AttemptContext.extra`` entries for the task's skills folder and MCP servers (JSON)."""
    env = task.environment
    extra: dict[str, str] = {}
    if env is not None and env.skills_dir:
        extra[SKILLS_KEY] = env.skills_dir
    if env is not None and env.mcp_servers:
        extra[MCP_KEY] = json.dumps([s.model_dump() for s in env.mcp_servers])
    return extra


def skills_dir(ctx: AttemptContext) -> str | None:
    """The task's skills folder in the sandbox, None when it has none."""
    return ctx.extra.get(SKILLS_KEY) or None


def servers(ctx: AttemptContext) -> list[dict[str, Any]]:
    """The task's MCP servers: ``name``, ``transport``, ``url`` or ``command`` and ``args``."""
    return list(json.loads(ctx.extra.get(MCP_KEY) or "[]"))


def takes_skills(harness: object) -> bool:
    return bool(getattr(harness, "takes_skills", False))


def skills_hint(task: Task) -> str:
    """What a harness that reads no skills is told of the task's skills, after the instruction."""
    folder = task.environment.skills_dir if task.environment else None
    if not folder:
        return ""
    return (
        f"\n\nSkills for this task are in `{folder}`: each folder there has a SKILL.md that "
        "says what the skill does and how to use it."
    )


def mcp_refusal(harness_name: str, harness_cls: type, task: dict[str, Any]) -> str | None:
    """Why harness ``harness_name`` cannot play ``task`` (its MCP servers), None if it can."""
    env = task.get("environment") or {}
    takes = tuple(getattr(harness_cls, "mcp_transports", ()))
    for server in env.get("mcp_servers") or []:
        if server["transport"] not in takes:
            offered = f"it takes {', '.join(takes)}" if takes else "it takes no MCP servers"
            return (
                f"harness {harness_name} cannot offer MCP server {server['name']!r} "
                f"({server['transport']}): {offered} (codex, nanobot and command take them)"
            )
    return None
