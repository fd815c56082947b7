"""Reading a Harbor test run's reward as Harbor does (rewards.harbor_tests.parse_reward)."""

from __future__ import annotations

import pytest

from forge.sandboxes.base import ExecResult
from rewards.common import SpecError
from rewards.harbor_tests import abnormal_end, parse_reward
from rewards.registry import build_verifier


@pytest.mark.parametrize(
    ("json_text", "txt", "reward"),
    [
        ('{"reward": 0.5, "other": 1}', "1", 0.5),  # reward.json first, its reward key
        ('{"a": 1, "b": 0}', None, 0.5),  # no reward key: the mean
        ("0.25", None, 0.25),  # a bare number
        (None, " 1\n", 1.0),
        (None, "0", 0.0),
    ],
)
def test_rewards_are_read_as_harbor_reads_them(json_text, txt, reward):
    got, what = parse_reward(json_text, txt)
    assert got == reward
    assert what.startswith("reward.json" if json_text else "reward.txt")


@pytest.mark.parametrize(
    ("json_text", "txt", "why"),
    [
        (None, None, "neither reward.json nor reward.txt"),
        ("{oops", "1", "not JSON"),  # a broken reward.json is not rescued by reward.txt
        ('{"reward": true}', None, "no finite numbers"),
        ('{"reward": "1"}', None, "no finite numbers"),
        ("{}", None, "no finite numbers"),
        ("NaN", None, "no finite numbers"),
        (None, "pass", "not a number"),
        (None, "inf", "not finite"),
    ],
)
def test_no_reward_or_a_bad_one_is_none_with_the_reason(json_text, txt, why):
    reward, what = parse_reward(json_text, txt)
    assert reward is None
    assert why in what


def test_the_spec_needs_a_tests_folder_with_test_sh(tmp_path):
    with pytest.raises(SpecError, match=r"no test\.sh"):
        build_verifier({"type": "harbor_tests", "tests": str(tmp_path)})
    (tmp_path / "test.sh").write_text("#!/bin/sh\n")
    v = build_verifier({"type": "harbor_tests", "tests": str(tmp_path), "timeout_s": 5})
    assert (v.runs_commands, v.timeout_s) == (True, 5)


@pytest.mark.parametrize(
    ("result", "why"),
    [
        (
            ExecResult(-9, "", ""),
            "test.sh was killed by signal 9",
        ),  # the agent's program killed test.sh
        (ExecResult(-15, "", ""), "test.sh was killed by signal 15"),
        (ExecResult(-1, "", "", timed_out=True), "test.sh timed out after 60s"),
        (ExecResult(0, "", ""), None),
        (ExecResult(1, "", ""), None),  # Harbor ignores the status: the reward file decides
    ],
)
def test_a_run_that_did_not_end_normally_is_named(result, why):
    assert abnormal_end(result, 60.0) == why


def test_reward_json_nested_past_the_parser_is_no_reward():
    reward, what = parse_reward("[" * 100_000, None)
    assert reward is None and "nested too deeply" in what


def test_the_verifier_runs_as_the_tasks_users(tmp_path):
    (tmp_path / "test.sh").write_text("#!/bin/sh\n")
    spec = {"type": "harbor_tests", "tests": str(tmp_path), "user": "1001", "agent_user": "ann"}
    v = build_verifier(spec)
    assert (v.user, v.agent_user, v.runs_agent_code) == ("1001", "ann", True)
