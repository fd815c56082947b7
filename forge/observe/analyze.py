"""``forge analyze RUN_DIR``: what RL changed in how the agent works, per policy version.

Read from the recorded episodes (the proxy's requests and completions), for every policy version
that produced episodes:

    shell_share      share of tool calls that go to a generic shell instead of a dedicated tool
    self_verify      share of episodes that change a file and then check it (read it back, list
                     it, run something on it) before they end
    tool_coverage    distinct tools used over tools offered, mean over episodes
    error_recovery   share of episodes with a failed tool call where a later call of the same
                     tool succeeds

The tool results come from the next request's history (chat ``tool`` messages, Responses
``function_call_output`` items, Anthropic ``tool_result`` blocks). Errors are recognised by
their text (exit codes, "error", "No such file", tracebacks): a heuristic, stated as such.

GUI episodes (screenshots, or the GUI tools offered:
:func:`forge.observe.analyze_gui.is_gui_episode`) are rated apart, under ``gui`` (action types,
clicks that changed nothing, recovery, steps, done share: :mod:`forge.observe.analyze_gui`);
``versions`` holds the rates above over the other episodes.
Episodes of tasks with services are also rated under ``services`` (exact counts of dedicated
service-tool calls against shell calls, operation coverage, reads after writes:
:mod:`forge.observe.analyze_services`).
``RUN_DIR`` is a run directory (``episodes/episodes.jsonl``) or one agent's folder of a
``forge eval`` output (``episodes.jsonl``).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from forge.observe.analyze_gui import gui_rates, gui_table, is_gui_episode
from forge.observe.analyze_services import service_rates, services_table
from forge.observe.tool_calls import (
    FINISH_TOOLS,
    READ_TOOLS,
    SHELL_TOOLS,
    WRITE_TOOLS,
    _offered,
    _results,
)
from forge.provenance import KEYS

SHELL_WRITE = re.compile(r"(>|\btee\b|\bsed\s+-i|\bmv\b|\bcp\b|\brm\b|\bmkdir\b|\btouch\b)")
SHELL_CHECK = re.compile(r"\b(cat|head|tail|ls|grep|wc|diff|test|stat|python3?|jq|find)\b|\[ ")
ERROR = re.compile(
    r"(exit code: [1-9]|\berror\b|no such file|not found|traceback|permission denied|"
    r"\"is_?error\": ?true)",
    re.IGNORECASE,
)


def _command(call: dict[str, Any]) -> str:
    try:
        args = json.loads(call.get("arguments") or "{}")
    except ValueError:
        return str(call.get("arguments"))
    if isinstance(args, dict):
        return " ".join(str(v) for v in args.values())
    return str(args)


def episode_behaviour(episode: dict[str, Any]) -> dict[str, Any]:
    """One episode's calls, in order: (tool, is_shell, writes, checks, failed)."""
    turns = episode.get("turns") or []
    results: dict[str, str] = {}
    for turn in turns:
        results.update(_results(turn.get("request") or {}))
    calls = []
    for turn in turns:
        for call in turn.get("tool_calls") or []:
            name = call.get("name", "")
            if name in FINISH_TOOLS:
                continue
            shell = name in SHELL_TOOLS
            text = _command(call)
            result = results.get(call.get("id", ""))
            calls.append(
                {
                    "tool": name,
                    "shell": shell,
                    "writes": name in WRITE_TOOLS or (shell and bool(SHELL_WRITE.search(text))),
                    "checks": name in READ_TOOLS or (shell and bool(SHELL_CHECK.search(text))),
                    "failed": None if result is None else bool(ERROR.search(result)),
                }
            )
    offered = _offered((turns[0].get("request") or {}) if turns else {}) - FINISH_TOOLS
    return {"calls": calls, "offered": offered}


def _rates(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    n_calls = n_shell = wrote = verified = erred = recovered = 0
    coverage: list[float] = []
    for ep in episodes:
        b = episode_behaviour(ep)
        calls = b["calls"]
        n_calls += len(calls)
        n_shell += sum(c["shell"] for c in calls)
        first_write = next((i for i, c in enumerate(calls) if c["writes"]), None)
        if first_write is not None:
            wrote += 1
            verified += any(c["checks"] for c in calls[first_write + 1 :])
        fails = [i for i, c in enumerate(calls) if c["failed"]]
        if fails:
            erred += 1
            i = fails[0]
            recovered += any(
                c["tool"] == calls[i]["tool"] and c["failed"] is False for c in calls[i + 1 :]
            )
        if b["offered"]:
            used = {c["tool"] for c in calls} & b["offered"]
            coverage.append(len(used) / len(b["offered"]))
    return {
        "episodes": len(episodes),
        "tool_calls": n_calls,
        "shell_share": n_shell / n_calls if n_calls else None,
        "self_verify": verified / wrote if wrote else None,
        "tool_coverage": sum(coverage) / len(coverage) if coverage else None,
        "error_recovery": recovered / erred if erred else None,
        "reward_mean": sum(ep.get("reward", 0.0) for ep in episodes) / max(1, len(episodes)),
    }


def episodes_file(run_dir: Path) -> Path:
    """Where ``run_dir`` keeps its episode records: the ``episodes.jsonl`` of one agent's
    folder in a ``forge eval`` output (its ``episodes/`` holds the buffer's files, without the
    episodes), else a run's ``episodes/episodes.jsonl``."""
    for path in (run_dir / "episodes.jsonl", run_dir / "episodes" / "episodes.jsonl"):
        if path.exists():
            return path
    agents = sorted(p.parent.name for p in run_dir.glob("*/episodes.jsonl"))
    hint = f" (a forge eval output: give one agent's folder: {', '.join(agents)})" if agents else ""
    raise FileNotFoundError(
        f"{run_dir / 'episodes' / 'episodes.jsonl'}: no recorded episodes "
        f"(is {run_dir} a run directory?){hint}"
    )


def group_key(ep: dict[str, Any], by: str) -> Any:
    """What ``ep`` is grouped by: ``version`` (the newest policy version that sampled a turn),
    or any key of its provenance (:mod:`forge.provenance`; ``harness`` falls back to the
    episode's own field for episodes recorded before provenance)."""
    if by == "version":
        return max((t.get("policy_version", 0) for t in ep.get("turns") or []), default=0)
    value = (ep.get("provenance") or {}).get(by)
    if value is None and by == "harness":
        value = ep.get("harness")
    if isinstance(value, list):
        return "-".join(str(v) for v in value)
    return "?" if value is None else str(value)


def analyze(run_dir: Path, by: str = "version") -> dict[str, Any]:
    """Behaviour per policy version (or per ``by``, a provenance key) over ``RUN_DIR``'s
    recorded episodes: the text rates under ``versions``, the GUI rates under ``gui``."""
    if by != "version" and by not in KEYS:
        raise ValueError(f"--by: {by!r} is not version or one of {', '.join(KEYS)}")
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    gui: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for line in episodes_file(run_dir).read_text().splitlines():
        if not line.strip():
            continue
        ep = json.loads(line)
        (gui if is_gui_episode(ep) else groups)[group_key(ep, by)].append(ep)
    services = {str(v): service_rates(eps) for v, eps in sorted(groups.items())}
    return {
        "by": by,
        "versions": {str(v): _rates(eps) for v, eps in sorted(groups.items())},
        "gui": {str(v): gui_rates(eps) for v, eps in sorted(gui.items())},
        "services": {v: r for v, r in services.items() if r is not None},
    }


def table(report: dict[str, Any]) -> str:
    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    lines = [
        f"| {report.get('by', 'version')} | episodes | reward | shell share | self-verify | "
        "tool coverage | recovery |",
        "|---|---|---|---|---|---|---|",
    ]
    for v, r in report["versions"].items():
        lines.append(
            f"| {v} | {r['episodes']} | {r['reward_mean']:.2f} | {fmt(r['shell_share'])} | "
            f"{fmt(r['self_verify'])} | {fmt(r['tool_coverage'])} | {fmt(r['error_recovery'])} |"
        )
    if report.get("services"):
        lines += ["", services_table(report["services"], first="version")]
    if not report.get("gui"):
        return "\n".join(lines)
    gui = gui_table(report)
    return gui if not report["versions"] else "\n".join(lines) + "\n\n" + gui
