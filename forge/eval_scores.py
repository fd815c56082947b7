"""The scores of ``forge eval`` (:mod:`forge.evaluate`): every task K times per harness, each
attempt passed at its task's ``pass_threshold`` (1 unless its benchmark sets another: ClawEval
0.75)::

    pass@1   mean over tasks of c/k (c: attempts of the task that passed)
    pass@k   share of tasks with at least one passing attempt
    pass^k   share of tasks whose k attempts all passed (reliability)
    (c/k)^k  mean over tasks of (c/k)^k: ClawEval's pass^k estimator, shown beside ours

plus mean turns, tool calls by tool name and failures by reason; the table and the line
printed when an agent is done.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from forge.observe.analyze_services import service_rates
from forge.observe.fidelity import wire_fidelity
from forge.observe.harbor_metrics import harbor_metrics, harbor_table
from forge.types import Episode


def score(
    tasks: list[str],
    episodes: list[Episode],
    k: int,
    failures: dict[str, int],
    thresholds: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The metrics of one harness from its ok episodes and its failed attempts' reasons (a
    failed attempt counts as not passed); ``thresholds``: a task's pass_threshold, if not 1."""
    passed: Counter[str] = Counter()
    for ep in episodes:
        if ep.status == "ok" and ep.reward >= (thresholds or {}).get(ep.task_id, 1.0):
            passed[ep.task_id] += 1
    n = max(1, len(tasks))
    tools: Counter[str] = Counter()
    resets: Counter[str] = Counter()
    for ep in episodes:
        resets.update(ep.reset_reasons)
        for turn in ep.turns:
            tools.update(call.get("name", "?") for call in turn.tool_calls)
    return {
        "pass@1": sum(min(passed[t], k) / k for t in tasks) / n,
        "pass@k": sum(1 for t in tasks if passed[t] > 0) / n,
        "pass^k": sum(1 for t in tasks if passed[t] >= k) / n,
        "pass^k_est": sum((min(passed[t], k) / k) ** k for t in tasks) / n,
        "k": k,
        "tasks": len(tasks),
        "episodes": len(episodes) + sum(failures.values()),
        "reward_mean": sum(ep.reward for ep in episodes) / max(1, len(episodes)),
        "turns_mean": sum(len(ep.turns) for ep in episodes) / max(1, len(episodes)),
        "tool_calls": dict(tools.most_common()),
        # token fidelity: training segments per episode, why merges broke, and what the harness
        # did on the wire (forge/observe/fidelity.py)
        "segments_mean": sum(len(ep.segments) for ep in episodes) / max(1, len(episodes)),
        "resets": {r: n for r, n in resets.items() if n},
        "wire": wire_fidelity(episodes),
        "failures": dict(failures),  # infrastructure, by reason
        # the policy ended these (context full, turn or token limit, timeout): scored 0
        "truncated": dict(Counter(ep.truncated for ep in episodes if ep.truncated)),
        "failed_tasks": sorted(t for t in tasks if passed[t] < k),
        "passes": {t: passed[t] for t in tasks},  # per task: attempts that passed
        # tasks with services: dedicated tools vs shell, coverage, reads after writes
        "services": service_rates([ep.to_dict() for ep in episodes]),
        "harbor": harbor_metrics(episodes, sum(failures.values())),
    }


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| harness | pass@1 | pass@k | pass^k | k | episodes | mean turns | segments/ep "
        "| args verbatim | history kept | truncated | failures |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        fails = ", ".join(f"{k} {v}" for k, v in r["failures"].items()) or "-"
        cut = ", ".join(f"{k} {v}" for k, v in r.get("truncated", {}).items()) or "-"
        wire = r.get("wire", {})
        lines.append(
            f"| {name} | {r['pass@1']:.3f} | {r['pass@k']:.3f} | {r['pass^k']:.3f} | {r['k']} "
            f"| {r['episodes']} | {r['turns_mean']:.1f} | {r.get('segments_mean', 0):.2f} "
            f"| {_share(wire.get('args_verbatim'))} | {_share(wire.get('history_kept'))} "
            f"| {cut} | {fails} |"
        )
    return "\n".join(lines) + harbor_table(results)


def summary(name: str, r: dict[str, Any]) -> str:
    """The line printed when an agent is done (for k=1 the three rates are one number); every
    attempt counts, the failed ones by reason."""
    k = r["k"]
    rates = f"pass@1 {r['pass@1']:.3f}"
    if k > 1:
        rates += f", pass@{k} {r['pass@k']:.3f}, pass^{k} {r['pass^k']:.3f}"
        rates += f", (c/k)^{k} {r.get('pass^k_est', 0.0):.3f}"
    failed = sum(r["failures"].values())
    if not failed:
        return f"[forge] {name}: {rates} ({r['episodes']} episodes, {r['seconds']:.0f}s)"
    reasons = ", ".join(f"{why} {n}" for why, n in r["failures"].items())
    attempts = f"{r['episodes']} attempt{'s' if r['episodes'] != 1 else ''}"
    return (
        f"[forge] {name}: {rates} ({attempts}: {r['episodes'] - failed} scored, "
        f"{failed} failed ({reasons}), {r['seconds']:.0f}s)"
    )
