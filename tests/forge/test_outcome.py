"""An attempt's time: ``rollout.attempt_timeout_s`` must outlast the tasks' limits plus their
verification (refused naming the field otherwise), and what it leaves over is how long the
Policy may keep a harness waiting (issue 30 item 4). The reasons themselves:
``test_episode_outcome.py`` (table) and ``test_episode_policy.py`` (whole episodes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge.config import ConfigError, load_config
from forge.outcome import (
    ATTEMPT_SLACK_S,
    INFRA_FAILURES,
    POLICY_TRUNCATIONS,
    attempt_seconds_needed,
    check_attempt_timeout,
    harness_cap_s,
)
from tasks.loader import load_suite

ROOT = Path(__file__).resolve().parents[2]


def test_task_limits_longer_than_the_attempt_are_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, ["task_limits={timeout_s: 900}"])  # the default attempt: 600 s
    text = str(info.value)
    assert "rollout.attempt_timeout_s: 600s is shorter than task_limits.timeout_s" in text
    assert "at least 930s" in text
    ok = load_config(None, ["task_limits={timeout_s: 900}", "rollout.attempt_timeout_s=930"])
    assert ok.rollout.attempt_timeout_s == 930


def test_each_tasks_limits_and_verifiers_are_checked_when_they_load() -> None:
    """Harbor's `even-numbers` keeps its verifier's default 600 s beside 120 s of agent time."""
    tasks = load_suite(f"harbor:{ROOT / 'examples' / 'harbor'}")
    even = next(t for t in tasks if t.id == "even-numbers")
    assert attempt_seconds_needed(even) == 120 + 600 + ATTEMPT_SLACK_S
    with pytest.raises(ConfigError, match=r"rollout\.attempt_timeout_s: 600s .* 'even-numbers'"):
        check_attempt_timeout(600, tasks)
    check_attempt_timeout(750, [t.model_dump() for t in tasks])  # as the driver holds them


def test_the_shipped_configs_fit_their_tasks() -> None:
    for name in ("quickstart", "gui-quickstart", "harness-toy", "smollm2-claw", "oracle"):
        config = load_config(ROOT / "examples" / f"{name}.yaml")
        tasks = [t.model_dump() for t in load_suite(config.tasks)]
        for t in tasks:
            t["limits"].update(config.task_limits)
        check_attempt_timeout(config.rollout.attempt_timeout_s, tasks)


def test_forge_run_and_eval_refuse_before_anything_starts(tmp_path, capsys) -> None:
    from forge.driver import main as run_main
    from forge.evaluate import main as eval_main

    config = load_config(
        None,
        [f"runs_dir={tmp_path}", "tasks=toy", "rollout.attempt_timeout_s=60",
         "policy.engine.name=scripted", "sandbox.isolation=none"],
    )  # fmt: skip
    assert run_main(config) == 2
    assert "forge run: rollout.attempt_timeout_s: 60s is shorter" in capsys.readouterr().err
    assert eval_main(config, ["react"], 1, tmp_path / "eval") == 2
    assert "forge eval: rollout.attempt_timeout_s: 60s" in capsys.readouterr().err


def test_what_the_attempt_leaves_over_is_the_policys_waiting_time() -> None:
    task = next(t for t in load_suite("toy"))  # 60 s, an answer verifier: needs 90 s
    assert harness_cap_s(task, 90) == 60  # none left: waits count against the harness
    assert harness_cap_s(task, 150) == 120
    assert harness_cap_s(task, None) == 120  # no attempt bound given: the time limit again


def test_every_reason_is_one_kind() -> None:
    assert not set(INFRA_FAILURES) & set(POLICY_TRUNCATIONS)
