"""Every task of every shipped suite is solvable by its reference solution, and its verifier
can fail.

Suites are discovered with :func:`tasks.loader.list_suites`, so a suite added under ``tasks/data``
is covered without touching this file.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from rewards.page_state import PageState
from rewards.registry import build_verifier, verify
from tasks.loader import list_suites, load_suite
from tasks.schema import GuiAction, Task, WriteFile
from tasks.webapps.hosted import Hosted

EVERY: list[tuple[str, Task]] = [(s, t) for s in list_suites() for t in load_suite(s)]
# Tasks with services are played against their services by tests/tasks/test_claw_services.py
# (their state lives beside the sandbox); here only their oracle's size is checked.
ALL = [(s, t) for s, t in EVERY if not t.apps]
# Solutions with GUI actions are played on a real screen by their suite's own tests (e.g.
# tests/tasks/test_desktop_suite.py, with the GUI tools); here only their do-nothing case runs.
SHELL = [(s, t) for s, t in ALL if not any(isinstance(st, GuiAction) for st in t.solution)]
WITH_ANSWER = [(s, t) for s, t in SHELL if t.answer is not None]
WITH_STEPS = [
    (s, t)
    for s, t in EVERY
    if t.solution and not any(isinstance(st, GuiAction) for st in t.solution)
]
CLAW_TAGS = {"organise", "search", "transform", "summarise", "mail", "config"}


def ids(cases: list[tuple[str, Task]]) -> list[str]:
    return [f"{s}/{t.id}" for s, t in cases]


def seed(sandbox, task: Task) -> None:
    for path, content in task.files.items():
        sandbox.put_file(path, content)


def run_solution(sandbox, task: Task) -> list[str]:
    """Play the reference solution; returns the stdout of each shell step."""
    outputs = []
    for step in task.solution:
        if isinstance(step, WriteFile):
            sandbox.put_file(step.path, step.content)
            continue
        result = sandbox.exec(["sh", "-c", step], timeout_s=30)
        assert result.exit_code == 0, f"{task.id}: step {step!r} failed: {result.stderr}"
        outputs.append(result.stdout)
    return outputs


def test_suites_are_found() -> None:
    assert {"smoke", "claw-lite"} <= set(list_suites())


@pytest.mark.parametrize(("suite", "task"), SHELL, ids=ids(SHELL))
def test_reference_solution_scores_one(sandbox, suite: str, task: Task) -> None:
    seed(sandbox, task)
    run_solution(sandbox, task)
    verdict = verify(task.verifier, sandbox, task.answer)
    assert verdict.reward == 1.0, verdict.detail


@pytest.mark.parametrize(("suite", "task"), ALL, ids=ids(ALL))
def test_doing_nothing_scores_zero(sandbox, suite: str, task: Task) -> None:
    """Page tasks are judged on the state their application keeps in the HarnessPod
    (``tasks.webapps.hosted``): here the state of one freshly built, never used."""
    seed(sandbox, task)
    verifier = build_verifier(task.verifier)
    if isinstance(verifier, PageState):
        hosted = Hosted(task, armed=False)
        if hosted.errors:
            pytest.skip(f"its page application cannot be built here: {hosted.errors}")
        verdict = verifier.verify_state(hosted.state())
    else:
        verdict = verify(task.verifier, sandbox, None)
    assert verdict.reward == 0.0, verdict.detail


@pytest.mark.parametrize(("suite", "task"), WITH_ANSWER, ids=ids(WITH_ANSWER))
def test_wrong_answer_scores_zero(sandbox, suite: str, task: Task) -> None:
    seed(sandbox, task)
    run_solution(sandbox, task)
    assert verify(task.verifier, sandbox, "I am not sure.").reward == 0.0


@pytest.mark.parametrize(("suite", "task"), WITH_ANSWER, ids=ids(WITH_ANSWER))
def test_solution_output_contains_answer(sandbox, suite: str, task: Task) -> None:
    """The answer is discoverable: where the solution has shell steps, one of them prints it
    from the seeded workspace (tasks answered from the instruction alone have none)."""
    if not any(isinstance(s, str) for s in task.solution):
        pytest.skip("no shell steps: the answer comes from the instruction")
    seed(sandbox, task)
    outputs = run_solution(sandbox, task)
    assert any(task.answer in out for out in outputs), outputs


@cache
def byte_tokenizer() -> Any:
    from serve.models import build_byte_tokenizer

    return build_byte_tokenizer()


@pytest.mark.parametrize(("suite", "task"), WITH_STEPS, ids=ids(WITH_STEPS))
def test_oracle_fits_the_limits(suite: str, task: Task) -> None:
    """The scripted model can play the solution through the react harness within the task's
    limits: one model call per step plus one to finish, each call's tool-call text (in the
    tiny model's byte tokens, with end-of-turn) within ``max_tokens_per_turn``."""
    from forge.harnesses.react_agent import TOOLS
    from forge.types import Tool
    from serve.chat_template import render_assistant
    from serve.engines.scripted import finish_call, step_call

    tok = byte_tokenizer()
    tools = [Tool(t["function"]["name"], "", t["function"]["parameters"]) for t in TOOLS]
    script = task.reference_script()
    assert len(script["steps"]) + 1 <= task.limits.max_turns
    calls = [step_call(s, tools, f"call_{i}") for i, s in enumerate(script["steps"])]
    calls.append(finish_call(tools, script["answer"] or "Done.", f"call_{len(calls)}"))
    for i, call in enumerate(calls):
        assert call is not None
        n = len(tok(render_assistant("", [call]), add_special_tokens=False).input_ids) + 1
        assert n <= task.limits.max_tokens_per_turn, f"call {i}: {n} tokens"


def test_claw_lite_size_and_tags() -> None:
    claw = load_suite("claw-lite")
    assert len(claw) >= 30
    tags = {tag for t in claw for tag in t.tags}
    assert tags >= CLAW_TAGS, f"missing tags: {CLAW_TAGS - tags}"
    for t in claw:
        assert CLAW_TAGS & set(t.tags), f"{t.id}: no claw tag"
        assert 10 <= t.limits.max_turns <= 15, t.id
        assert sum(len(c.encode()) for c in t.files.values()) <= 3072, t.id
    assert sum(t.answer is not None for t in claw) >= 8
