"""The tasks a run or an evaluation plays: loaded, narrowed to ``task_ids``, given the run's
``task_limits``, checked against the attempt's time, their images built; what cannot play is
left out and said, never silently and never by stopping the rest (issue 32).

A task is left out when its folder of a third-party set (``harbor:PATH``) cannot load (the
file and field at fault), its image cannot be had (the build's last lines), one of the run's
harnesses cannot offer its MCP servers, its judge cannot be asked (no model, endpoint or key
here), or the policy is the scripted oracle and the task has no
reference solution. Each is printed
and kept in ``skipped_tasks.jsonl`` beside the run's episodes; a suite of which nothing is left
stops with every reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forge.harnesses.registry import HARNESSES
from forge.harnesses.task_tools import mcp_refusal
from forge.images.task import prepare as prepare_task_images
from forge.outcome import check_attempt_timeout
from rewards.judge import unready
from rewards.registry import judges
from tasks.errors import TaskError
from tasks.harbor import set_verify_mode
from tasks.loader import load_suite

SKIPPED_FILE = "skipped_tasks.jsonl"
Problem = tuple[str, str, str]  # (task file or id, field, why)


def load_tasks(suite: str, task_ids: list[str], skipped: list[Problem]) -> list[dict[str, Any]]:
    """``suite``'s tasks as data, only ``task_ids`` when given; folders of a third-party set
    that cannot load go to ``skipped``."""
    tasks = [t.model_dump() for t in load_suite(suite, skipped)]
    if task_ids:
        tasks = [t for t in tasks if t["id"] in set(task_ids)]
    return tasks


def playable(
    groups: list[list[dict[str, Any]]],
    config: Any,
    skipped: list[Problem],
    folder: Path,
    say: Callable[[str], None],
    harnesses: tuple[str, ...] | list[str] = (),
) -> list[list[dict[str, Any]]]:
    """Each group of tasks (a run's training and evaluation sets) with ``config.task_limits``
    laid over their limits and ``config.harbor_verify`` over their Harbor tests' mode, the
    attempt's time checked against them (a ConfigError names the field), their images built; a
    task whose image cannot be had joins ``skipped``. What was skipped is written to
    ``folder/skipped_tasks.jsonl`` and said; a group left empty raises TaskError with every
    reason. ``harnesses``: those the tasks are played through."""
    every = [t for group in groups for t in group]
    for t in every:
        t["limits"].update(config.task_limits)
        if config.harbor_verify != "task":
            set_verify_mode(t, config.harbor_verify)
    check_attempt_timeout(config.rollout.attempt_timeout_s, every)
    unique = list({t["id"]: t for t in every}.values())  # a task in both sets: once
    engine = config.policy.engine
    if engine.name == "scripted" and engine.mode == "oracle":  # nothing to play for some
        skipped.extend(
            (t["id"], "solution", "no reference solution: the oracle cannot play it")
            for t in unique
            if not t.get("solution") and not t.get("answer")
        )
    skipped.extend(
        (t["id"], "environment.mcp_servers", why)
        for t in unique
        if (why := _mcp_refusal(t, harnesses))
    )
    served = config.judge is not None  # the run's own judge answers those naming none
    skipped.extend(
        (t["id"], "verifier", why)
        for t in unique
        if (why := unready(judges(t["verifier"]), served))
    )
    out = {why[0] for why in skipped}  # no image is built for a task already left out
    skipped.extend(
        prepare_task_images([t for t in unique if t["id"] not in out], config.sandbox, say)
    )
    gone = {why[0] for why in skipped}
    kept = [[t for t in group if t["id"] not in gone] for group in groups]
    if skipped:
        record_skipped(skipped, folder, say)
    if any(group and not left for group, left in zip(groups, kept, strict=True)):
        raise TaskError(skipped)
    return kept


def _mcp_refusal(task: dict[str, Any], harnesses: tuple[str, ...] | list[str]) -> str | None:
    for name in harnesses:
        why = mcp_refusal(name, HARNESSES[name], task) if name in HARNESSES else None
        if why:
            return why
    return None


def record_skipped(skipped: list[Problem], folder: Path, say: Callable[[str], None]) -> None:
    """Append each skipped task to ``folder/skipped_tasks.jsonl`` and say how many."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SKIPPED_FILE
    with path.open("a", encoding="utf-8") as f:
        for where, field, why in skipped:
            f.write(json.dumps({"task": where, "field": field, "reason": why}) + "\n")
            say(f"left out {where}: {field}: {why.splitlines()[0] if why else ''}")
    say(f"{len(skipped)} task(s) cannot play and are left out (in full: {path})")
