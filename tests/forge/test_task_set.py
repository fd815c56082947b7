"""What a run plays (forge.task_set): the folders of a third-party set that load, the rest said
and kept in skipped_tasks.jsonl; an empty set is an error naming every reason. Images that fail
to build are left out the same way: sandboxes/test_docker_harbor.py, with a real daemon."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forge.config import ConfigError, load_config
from forge.task_set import SKIPPED_FILE, load_tasks, playable
from tasks.errors import TaskError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "harbor"


def test_the_tasks_that_load_play_and_the_rest_are_recorded(tmp_path: Path) -> None:
    good = tmp_path / "set" / "good"
    shutil.copytree(EXAMPLES / "csv-total", good)
    bad = tmp_path / "set" / "bad"
    shutil.copytree(EXAMPLES / "csv-total", bad)
    (bad / "instruction.md").unlink()
    config = load_config(None, ["task_limits={max_turns: 3}"])
    said: list[str] = []
    skipped: list[tuple[str, str, str]] = []
    train = load_tasks(f"harbor:{tmp_path / 'set'}", [], skipped)
    assert [t["id"] for t in train] == ["good"]
    evals = load_tasks("toy", ["toy_count"], skipped)  # (no image of its own)
    [kept] = playable([evals], config, skipped, tmp_path / "run", said.append)
    assert [t["id"] for t in kept] == ["toy_count"] and kept[0]["limits"]["max_turns"] == 3
    [line] = (tmp_path / "run" / SKIPPED_FILE).read_text().splitlines()
    assert json.loads(line) == {"task": str(bad), "field": "instruction.md", "reason": "missing"}
    assert f"left out {bad}: instruction.md: missing" in said[0]
    assert "1 task(s) cannot play" in said[-1]


def test_a_set_left_empty_or_too_slow_for_the_attempt_stops_naming_why(tmp_path: Path) -> None:
    config = load_config(None, [])
    task = load_tasks("toy", ["toy_count"], [])
    with pytest.raises(TaskError, match="toy_count: image: cannot be had"):
        playable([task], config, [("toy_count", "image", "cannot be had")], tmp_path, print)
    config = load_config(None, [])
    config.rollout.attempt_timeout_s = 10
    with pytest.raises(ConfigError, match=r"rollout\.attempt_timeout_s"):
        playable([load_tasks("toy", [], [])], config, [], tmp_path, lambda _: None)


def test_the_oracle_leaves_out_tasks_without_a_reference_solution(tmp_path: Path) -> None:
    config = load_config(None, ["policy.engine.name=scripted"])
    tasks = load_tasks("toy", [], [])
    bare = {**tasks[0], "id": "no-solution", "solution": [], "answer": None}
    skipped: list[tuple[str, str, str]] = []
    both = [[*tasks, bare], [dict(bare), dict(tasks[0])]]  # training and evaluation sets
    kept, kept_eval = playable(both, config, skipped, tmp_path, lambda _: None)
    assert [t["id"] for t in kept] == [t["id"] for t in tasks]
    assert [t["id"] for t in kept_eval] == [tasks[0]["id"]]
    assert skipped == [
        ("no-solution", "solution", "no reference solution: the oracle cannot play it")
    ]
    noop = load_config(None, ["policy.engine.name=scripted", "policy.engine.mode=noop"])
    [kept] = playable([[*tasks, bare]], noop, [], tmp_path, lambda _: None)
    assert len(kept) == len(tasks) + 1  # the no-op plays every task
