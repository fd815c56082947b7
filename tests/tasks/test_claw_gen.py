"""The generated claw suite: its size and split, and every instance's reference solution scores 1
while doing nothing (or a wrong answer) scores 0."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from forge.sandboxes.base import SandboxSpec
from rewards.registry import verify
from tasks import claw_gen
from tasks.errors import TaskError
from tasks.loader import load_suite
from tests.rewards.sandbox_double import DirSandbox
from tests.tasks.test_suite_solutions import run_solution, seed

ALL = os.environ.get("CLAW_GEN_ALL") == "1"  # every training instance too (all 592: ~25 s)


def test_size_split_and_determinism() -> None:
    train, test = load_suite("claw-gen/train"), load_suite("claw-gen/test")
    assert len(claw_gen.FAMILIES) >= 20
    assert len(train) + len(test) >= 300
    assert {t.id for t in train}.isdisjoint({t.id for t in test})
    # held out by instance: every family in both splits, no test instance's content in train
    assert {t.tags[1] for t in train} == {t.tags[1] for t in test} == set(claw_gen.FAMILIES)
    seen = {(t.instruction, tuple(sorted(t.files.items()))) for t in train}
    assert not [t.id for t in test if (t.instruction, tuple(sorted(t.files.items()))) in seen]
    assert [t.model_dump() for t in load_suite("claw-gen/test")] == [t.model_dump() for t in test]
    assert len(seen) == len(train)  # randomised: no two instances alike


def test_a_family_subset_and_bad_names() -> None:
    tasks = load_suite("claw-gen/test/read_code,csv_sum")
    assert [t.tags[1] for t in tasks] == ["read_code"] * 4 + ["csv_sum"] * 4
    with pytest.raises(TaskError, match="unknown split 'dev'"):
        load_suite("claw-gen/dev")
    with pytest.raises(TaskError, match="unknown family 'nope'"):
        load_suite("claw-gen/train/nope")


@pytest.mark.parametrize("family", list(claw_gen.FAMILIES))
def test_instances_are_solved_by_their_solution_only(tmp_path: Path, family: str) -> None:
    """Every held-out instance and the first 4 training ones of each family (all of them with
    ``CLAW_GEN_ALL=1``)."""
    train = load_suite(f"claw-gen/train/{family}")
    for task in (train if ALL else train[:4]) + load_suite(f"claw-gen/test/{family}"):
        idle = DirSandbox(tmp_path / task.id / "idle")
        idle.create(SandboxSpec())
        seed(idle, task)
        assert verify(task.verifier, idle, None).reward == 0.0, task.id
        box = DirSandbox(tmp_path / task.id / "solved")
        box.create(SandboxSpec())
        seed(box, task)
        outputs = run_solution(box, task)
        verdict = verify(task.verifier, box, task.answer)
        assert verdict.reward == 1.0, (task.id, verdict.detail)
        if task.answer is not None:
            assert any(task.answer in out for out in outputs), (task.id, outputs)
            assert verify(task.verifier, box, "I am not sure.").reward == 0.0, task.id
