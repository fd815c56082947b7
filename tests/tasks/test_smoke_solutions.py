"""Every smoke task is solvable by its reference solution, and its verifier can fail."""

from __future__ import annotations

import pytest

from rewards import verify
from tasks import Task, WriteFile, load_suite

SMOKE = load_suite("smoke")


def seed(sandbox, task: Task) -> None:
    for path, content in task.files.items():
        sandbox.put_file(path, content)


def run_solution(sandbox, task: Task) -> None:
    for step in task.solution:
        if isinstance(step, WriteFile):
            sandbox.put_file(step.path, step.content)
            continue
        result = sandbox.exec(["sh", "-c", step], timeout_s=30)
        assert result.exit_code == 0, f"{task.id}: step {step!r} failed: {result.stderr}"


@pytest.mark.parametrize("task", SMOKE, ids=[t.id for t in SMOKE])
def test_reference_solution_scores_one(sandbox, task: Task) -> None:
    seed(sandbox, task)
    run_solution(sandbox, task)
    verdict = verify(task.verifier, sandbox, task.answer)
    assert verdict.reward == 1.0, verdict.detail


@pytest.mark.parametrize("task", SMOKE, ids=[t.id for t in SMOKE])
def test_doing_nothing_scores_zero(sandbox, task: Task) -> None:
    seed(sandbox, task)
    verdict = verify(task.verifier, sandbox, None)
    assert verdict.reward == 0.0, verdict.detail


@pytest.mark.parametrize("task", [t for t in SMOKE if t.answer is not None], ids=lambda t: t.id)
def test_wrong_answer_scores_zero(sandbox, task: Task) -> None:
    seed(sandbox, task)
    run_solution(sandbox, task)
    assert verify(task.verifier, sandbox, "I am not sure.").reward == 0.0


@pytest.mark.parametrize("task", [t for t in SMOKE if t.answer is not None], ids=lambda t: t.id)
def test_solution_output_contains_answer(sandbox, task: Task) -> None:
    """The answer is discoverable: some shell step prints it from the seeded workspace."""
    seed(sandbox, task)
    outputs = [
        sandbox.exec(["sh", "-c", s], timeout_s=30).stdout
        for s in task.solution
        if isinstance(s, str)
    ]
    assert any(task.answer in out for out in outputs)
