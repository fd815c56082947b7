"""How an agent used a task's services (``tasks.services``), from the calls the HarnessPod
recorded (``Episode.service_calls``: every operation, with how it came) and the model's own
tool calls:

    service_calls    operations run on the services (refused ones included)
    dedicated        of those, through a dedicated service tool (native or MCP)
    via_cli          of those, through a command-line tool in a generic shell
    shell_calls      the model's calls of a generic shell tool (for anything)
    shell_to_service of those, calls whose command reached a service (through its CLI)
    dedicated_share  dedicated / (dedicated + shell_calls): how much of the work went through
                     the services' own tools rather than the shell
    op_coverage      distinct operations used over the operations the services offer, mean
                     over episodes
    self_verify      share of episodes with a write to a service (accepted) that read that
                     service's state afterwards (an accepted read of the same service)

Unlike :mod:`forge.observe.analyze`'s text heuristics, the service figures are exact: the pod
saw every call.
"""

from __future__ import annotations

from typing import Any

from forge.observe.tool_calls import SHELL_TOOLS
from tasks.services import APPS

DEDICATED = ("tool", "mcp")


def _episode(ep: dict[str, Any]) -> dict[str, Any]:
    calls = ep.get("service_calls") or []
    cli_turns = {c.get("turn") for c in calls if c.get("via") == "cli"}
    shell = shell_to_service = 0
    for i, turn in enumerate(ep.get("turns") or []):
        n = sum(c.get("name") in SHELL_TOOLS for c in turn.get("tool_calls") or [])
        shell += n
        if n and i + 1 in cli_turns:  # a service call made after turn i came from its calls
            shell_to_service += n
    offered = sum(len(APPS[s].ops) for s in ep.get("services") or [] if s in APPS)
    used = {(c["service"], c["op"]) for c in calls if "writes" in c}  # known operations
    wrote = verified = False
    for i, c in enumerate(calls):
        if c.get("writes") and not c.get("error"):
            wrote = True
            verified = verified or any(
                later["service"] == c["service"]
                and later.get("writes") is False
                and not later.get("error")
                for later in calls[i + 1 :]
            )
    return {
        "calls": len(calls),
        "dedicated": sum(c.get("via") in DEDICATED for c in calls),
        "cli": sum(c.get("via") == "cli" for c in calls),
        "shell": shell,
        "shell_to_service": shell_to_service,
        "coverage": len(used) / offered if offered else None,
        "wrote": wrote,
        "verified": verified,
    }


def service_rates(episodes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The figures above over the episodes of tasks with services; None when there are none."""
    rows = [_episode(ep) for ep in episodes if ep.get("services")]
    if not rows:
        return None
    dedicated = sum(r["dedicated"] for r in rows)
    shell = sum(r["shell"] for r in rows)
    coverage = [r["coverage"] for r in rows if r["coverage"] is not None]
    wrote = sum(r["wrote"] for r in rows)
    return {
        "episodes": len(rows),
        "service_calls": sum(r["calls"] for r in rows),
        "dedicated": dedicated,
        "via_cli": sum(r["cli"] for r in rows),
        "shell_calls": shell,
        "shell_to_service": sum(r["shell_to_service"] for r in rows),
        "dedicated_share": dedicated / (dedicated + shell) if dedicated + shell else None,
        "op_coverage": sum(coverage) / len(coverage) if coverage else None,
        "self_verify": sum(r["verified"] for r in rows) / wrote if wrote else None,
    }


def services_table(rows: dict[str, dict[str, Any] | None], first: str = "harness") -> str:
    """A markdown table of :func:`service_rates` per row name (rows without services left out)."""

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    lines = [
        f"| {first} | episodes | service calls | dedicated | via CLI | shell calls "
        "| shell -> service | dedicated share | op coverage | self-verify |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        if r is None:
            continue
        lines.append(
            f"| {name} | {r['episodes']} | {r['service_calls']} | {r['dedicated']} "
            f"| {r['via_cli']} | {r['shell_calls']} | {r['shell_to_service']} "
            f"| {fmt(r['dedicated_share'])} | {fmt(r['op_coverage'])} | {fmt(r['self_verify'])} |"
        )
    return "\n".join(lines)
