"""Harbor's own metrics beside OpenForge's (``forge eval`` on Harbor tasks): what Harbor reports
for a job, the mean reward over every trial (an errored trial counts 0) and the mean of each
named reward the tests wrote (``reward.json``), from what :mod:`rewards.harbor_tests` kept."""

from __future__ import annotations

import json
from typing import Any

from forge.types import Episode


def harbor_metrics(episodes: list[Episode], failed: int) -> dict[str, Any] | None:
    """Harbor's own metrics, for Harbor tasks: the mean reward over every attempt (a failed
    one counts 0, as Harbor counts an errored trial) and the mean of each named reward its
    tests wrote (``reward.json``); None when no episode is a Harbor task's."""
    named = [json.loads(ep.verifier_outputs["rewards"]) for ep in episodes
             if "rewards" in ep.verifier_outputs]  # fmt: skip
    harbor = [ep for ep in episodes if "test-stdout.txt" in ep.verifier_outputs or
              "rewards" in ep.verifier_outputs]  # fmt: skip
    if not harbor:
        return None
    keys = sorted({k for n in named for k in n})
    return {
        "mean": sum(ep.reward for ep in harbor) / (len(harbor) + failed),
        "trials": len(harbor) + failed,
        "rewards": {k: sum(n.get(k, 0.0) for n in named) / len(named) for k in keys},
    }


def harbor_table(results: dict[str, dict[str, Any]]) -> str:
    """Harbor's metrics per harness as Markdown after the main table ("" when none)."""
    harbor = {name: r["harbor"] for name, r in results.items() if r.get("harbor")}
    if not harbor:
        return ""
    lines = ["", "", "Harbor's metrics (mean reward over every trial; each named reward's mean):",
             "", "| harness | mean | trials | named rewards |", "|---|---|---|---|"]  # fmt: skip
    for name, h in harbor.items():
        named = ", ".join(f"{k} {v:.3f}" for k, v in h["rewards"].items()) or "-"
        lines.append(f"| {name} | {h['mean']:.3f} | {h['trials']} | {named} |")
    return "\n".join(lines)
