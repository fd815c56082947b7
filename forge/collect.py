"""``forge collect``: teacher episodes, played through the real harness and the recording proxy.

The config's harness plays every task of the suite ``k`` times (``forge eval``'s machinery: a
Scheduler, HarnessPods, sandboxes, verifiers) with a teacher behind the Policy: the scripted
oracle (``--teacher oracle``), or any OpenAI-compatible endpoint (``--teacher URL``: the
``remote`` engine; ``forge serve`` of a larger local checkpoint is one), or the config's own
policy (``--teacher self``: the student's passing attempts, which ``forge sft`` then trains it
on, one round of reward-filtered self-training: RAFT, ReST-EM's improve step). Every episode is
verified as usual; those with reward at least ``min_reward`` are kept, each once (two episodes
of a task whose replies are all the same are one), in ``DIR/episodes.jsonl`` with every request
exactly as the harness sent it (messages and tools), which is what ``forge sft`` renders for
the student. ``DIR/collect.json`` counts what was played, kept and left out, and why;
``DIR/play/`` keeps every episode and failed attempt.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from forge.config import RunConfig


def teacher_engine(config: RunConfig, teacher: str, model: str | None) -> dict[str, Any]:
    """The engine config of ``teacher``: ``oracle``, ``self`` (the config's own engine) or an
    endpoint URL (ending in ``/v1``); the student's model names the tokenizer the records are
    written in."""
    student = config.policy.engine.model
    if teacher == "self":
        return config.policy.engine.model_dump()
    if teacher == "oracle":
        return {"name": "scripted", "model": student, "mode": "oracle"}
    if teacher.startswith(("http://", "https://")):
        return {"name": "remote", "model": student, "base_url": teacher, "served_model": model}
    raise ValueError(f"--teacher: expected 'oracle', 'self' or an http(s) URL, got {teacher!r}")


def keep(episodes: list[dict[str, Any]], min_reward: float) -> tuple[list[dict[str, Any]], dict]:
    """The episodes to keep (reward >= ``min_reward``, each distinct reply sequence of a task
    once) and counts of the rest by reason."""
    kept, seen = [], set()
    dropped = {"below_min_reward": 0, "duplicate": 0, "no_turns": 0}
    for ep in episodes:
        if ep["reward"] < min_reward:
            dropped["below_min_reward"] += 1
            continue
        if not ep["turns"]:
            dropped["no_turns"] += 1
            continue
        key = (ep["task_id"], tuple(t["text"] for t in ep["turns"]))
        if key in seen:
            dropped["duplicate"] += 1
            continue
        seen.add(key)
        kept.append(ep)
    return kept, dropped


def collect(
    config: RunConfig,
    teacher: str,
    tasks: str,
    k: int,
    out: Path,
    min_reward: float = 1.0,
    temperature: float = 1.0,
    model: str | None = None,
) -> dict[str, Any]:
    """Play, verify, keep; returns the summary written to ``out/collect.json``."""
    from forge.evaluate import evaluate, plan

    data = config.model_dump()
    data["policy"]["engine"] = teacher_engine(config, teacher, model)
    data.update(tasks=tasks, eval_temperature=temperature)
    cfg = RunConfig.model_validate(data)
    agents = plan(cfg, cfg.harnesses, [])  # a mix: every harness of it plays every task
    results = evaluate(cfg, agents, k, out / "play")
    lines = [
        line
        for agent in agents
        for line in (out / "play" / agent.name / "episodes.jsonl").read_text().splitlines()
    ]
    kept, dropped = keep([json.loads(line) for line in lines if line.strip()], min_reward)
    with open(out / "episodes.jsonl", "w") as f:
        for ep in kept:
            f.write(json.dumps(ep) + "\n")
    summary = {
        "teacher": teacher,
        "harness": cfg.harness,  # a name, or the mix
        "tasks": tasks,
        "k": k,
        "min_reward": min_reward,
        "played": len(lines),
        "failed_attempts": sum(sum(r["failures"].values()) for r in results.values()),
        "pass@1": sum(r["pass@1"] for r in results.values()) / len(results),
        "kept": len(kept),
        "dropped": dropped,
        "tasks_kept": len({ep["task_id"] for ep in kept}),
    }
    (out / "collect.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"[forge] collect: kept {len(kept)} of {len(lines)} episodes "
        f"({summary['tasks_kept']} tasks; {dropped}) -> {out / 'episodes.jsonl'}",
        flush=True,
    )
    return summary


def main(config: RunConfig, teacher: str, tasks: str, k: int, out: Path, **kw: Any) -> int:
    from forge.harnesses.install import HarnessNotInstalled
    from forge.sandboxes.bwrap import IsolationUnavailable

    try:
        out.mkdir(parents=True, exist_ok=True)
        collect(config, teacher, tasks, k, out, **kw)
    except (ValueError, HarnessNotInstalled, IsolationUnavailable) as e:
        print(f"forge collect: {e}", file=sys.stderr)
        return 2
    return 0
