"""``forge eval``: the harness comparison. Every task K times per harness, same policy.

For each harness in turn a Scheduler plays ``k`` attempts of every task (no retries: an attempt
that fails counts as a failure, with its reason) and the episodes are scored:

    pass@1   mean over tasks of c/k (c: attempts of the task that passed, reward >= 1)
    pass@k   share of tasks with at least one passing attempt
    pass^k   share of tasks whose k attempts all passed (reliability)

plus mean turns, tool calls by tool name and failures by reason. ``DIR/eval.json`` holds
``{"harnesses": {NAME: {...}}}``, ``DIR/eval.md`` the table, ``DIR/<harness>/episodes.jsonl``
every finished episode and ``DIR/<harness>/episodes/failures.jsonl`` every failed attempt.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import ray
from pydantic import ValidationError

from forge.cluster import init_ray
from forge.config import RunConfig
from forge.fidelity import wire_fidelity
from forge.harnesses import HARNESSES, require
from forge.harnesses.install import HarnessNotInstalled
from forge.sandboxes import IsolationUnavailable, check_isolation
from forge.types import Episode

PROGRESS_EVERY_S = 15.0


def score(
    tasks: list[str], episodes: list[Episode], k: int, failures: dict[str, int]
) -> dict[str, Any]:
    """The metrics of one harness from its ok episodes and its failed attempts' reasons (a
    failed attempt counts as not passed)."""
    passed: Counter[str] = Counter()
    for ep in episodes:
        if ep.status == "ok" and ep.reward >= 1.0:
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
        "k": k,
        "tasks": len(tasks),
        "episodes": len(episodes) + sum(failures.values()),
        "reward_mean": sum(ep.reward for ep in episodes) / max(1, len(episodes)),
        "turns_mean": sum(len(ep.turns) for ep in episodes) / max(1, len(episodes)),
        "tool_calls": dict(tools.most_common()),
        # token fidelity: training segments per episode, why merges broke, and what the harness
        # did on the wire (forge/fidelity.py)
        "segments_mean": sum(len(ep.segments) for ep in episodes) / max(1, len(episodes)),
        "resets": {r: n for r, n in resets.items() if n},
        "wire": wire_fidelity(episodes),
        "failures": dict(failures),  # infrastructure, by reason
        # the policy ended these (context full, turn or token limit, timeout): scored 0
        "truncated": dict(Counter(ep.truncated for ep in episodes if ep.truncated)),
        "failed_tasks": sorted(t for t in tasks if passed[t] < k),
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
    return "\n".join(lines)


def evaluate(config: RunConfig, harnesses: list[str], k: int, out: Path) -> dict[str, Any]:
    from actors.replay_buffer import ReplayBuffer
    from actors.scheduler import Scheduler
    from serve.policy import deploy_policy
    from tasks.loader import load_suite

    for name in harnesses:
        if name not in HARNESSES:
            raise ValueError(f"--harness: unknown {name!r}; known: {', '.join(sorted(HARNESSES))}")
    runs = {}
    for name in harnesses:
        data = config.model_dump()
        data["rollout"]["max_retries"] = 0
        # the config's options belong to its own harness; the others run as shipped
        data.update(
            harness=name, harness_options=data["harness_options"] if name == config.harness else {}
        )
        try:
            runs[name] = RunConfig.model_validate(data)
        except ValidationError as e:
            raise ValueError(f"--harness {name}: {e.errors()[0]['msg']}") from None
        require(name, runs[name].harness_options)  # stops before anything starts
    check_isolation(config.sandbox)  # so does a host that cannot isolate sandboxes
    tasks = [t.model_dump() for t in load_suite(config.tasks)]
    if config.task_ids:
        tasks = [t for t in tasks if t["id"] in set(config.task_ids)]
    for t in tasks:
        t["limits"].update(config.task_limits)
    init_ray()
    policy = deploy_policy(config.policy, app_name="forge-eval-policy")
    results: dict[str, dict[str, Any]] = {}
    for name in harnesses:
        t0 = time.perf_counter()
        run = runs[name]
        folder = out / name
        buffer = ray.remote(ReplayBuffer).options(num_cpus=0).remote(str(folder), 1, 0)
        sched = (
            ray.remote(Scheduler)
            .options(num_cpus=0)
            .remote(run.model_dump(), policy, buffer, tasks)
        )
        ray.get(sched.start.remote())
        pending = sched.evaluate.remote(tasks * k, config.eval_temperature)
        while not ray.wait([pending], timeout=PROGRESS_EVERY_S)[0]:
            st = ray.get(sched.stats.remote())
            print(
                f"[forge] {name}: {st['attempts_ok']}/{len(tasks) * k} episodes, "
                f"{st['attempts_failed']} failed attempts, {st['pods']} pods, "
                f"{time.perf_counter() - t0:.0f}s",
                flush=True,
            )
        episodes = ray.get(pending)
        failures = ray.get(sched.stop.remote())["failures"]
        ray.get(buffer.close.remote())
        with open(folder / "episodes.jsonl", "w") as f:
            for ep in episodes:
                f.write(json.dumps(ep.to_dict()) + "\n")
        results[name] = score([t["id"] for t in tasks], episodes, k, failures)
        results[name]["seconds"] = time.perf_counter() - t0
        print(
            f"[forge] {name}: pass@1 {results[name]['pass@1']:.3f}, pass@{k} "
            f"{results[name]['pass@k']:.3f}, pass^{k} {results[name]['pass^k']:.3f} "
            f"({len(episodes)} episodes, {results[name]['seconds']:.0f}s)",
            flush=True,
        )
    return results


def main(config: RunConfig, harnesses: list[str], k: int, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    try:
        results = evaluate(config, harnesses, k, out)
    except (ValueError, HarnessNotInstalled, IsolationUnavailable) as e:
        print(f"forge eval: {e}", file=sys.stderr)
        return 2
    report = {"tasks": config.tasks, "model": config.policy.engine.model, "harnesses": results}
    (out / "eval.json").write_text(json.dumps(report, indent=2))
    md = table(results)
    (out / "eval.md").write_text(md + "\n")
    print(md)
    return 0
