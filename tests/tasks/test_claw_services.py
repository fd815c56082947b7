"""The claw-services suite as data: every task's reference solution, played straight against
its services, earns 1.0 from its verifiers, and doing nothing earns 0.0 (the end-to-end runs
through real harnesses are in tests/forge/test_episode_apps.py and scripts)."""

from __future__ import annotations

import json

import pytest

from rewards.app_state import AppState
from rewards.common import AllOf
from rewards.registry import build_verifier
from serve.engines.scripted import NOOP_ANSWER
from tasks.loader import load_suite
from tasks.schema import ServiceCall, Task
from tasks.services import World

SUITE = load_suite("claw-services")


def _score(task: Task, world: World, answer: str | None) -> float:
    top = build_verifier(task.verifier)
    verifiers = top.verifiers if isinstance(top, AllOf) else [top]
    apps = world.snapshot()
    rewards = [
        v.verify_state(apps) if isinstance(v, AppState) else v.verify(None, answer)  # type: ignore[arg-type]
        for v in verifiers
    ]
    return min(r.reward for r in rewards)


def test_the_suite_is_large_and_mixed() -> None:
    assert len(SUITE) >= 30
    services = {name for t in SUITE for name in t.apps}
    assert services == {"mail", "calendar", "contacts", "notes", "kv"}
    assert sum(len(t.apps) > 1 for t in SUITE) >= 6  # multi-service tasks
    assert sum("distractor" in t.tags for t in SUITE) >= 4


@pytest.mark.parametrize("task", SUITE, ids=lambda t: t.id)
def test_reference_solution_passes_and_doing_nothing_fails(task: Task) -> None:
    world = World(task.apps)
    for step in task.solution:
        assert isinstance(step, ServiceCall), step
        world.call(step.service, step.op, step.args)
    assert _score(task, world, task.answer) == 1.0
    assert _score(task, World(task.apps), NOOP_ANSWER) == 0.0


def _reads_the_answer(task: Task) -> bool:
    top = build_verifier(task.verifier)
    return any(
        not isinstance(v, AppState) for v in (top.verifiers if isinstance(top, AllOf) else [top])
    )


@pytest.mark.parametrize("task", [t for t in SUITE if _reads_the_answer(t)], ids=lambda t: t.id)
def test_an_answer_listing_everything_fails(task: Task) -> None:
    """An answer that lists all the services hold (every contact's number, every event's time,
    every attachment) holds the right value somewhere: it must not pass."""
    world = World(task.apps)
    for step in task.solution:
        world.call(step.service, step.op, step.args)
    everything = json.dumps(world.state, indent=1)
    assert _score(task, world, everything) == 0.0
    assert _score(task, world, str(task.answer)) == 1.0
