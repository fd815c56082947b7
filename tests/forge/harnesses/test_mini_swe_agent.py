"""The mini-swe-agent harness: its command, its answer, and the real agent in a HarnessPod."""

from __future__ import annotations

import pytest

from forge.harnesses.base import AttemptContext
from forge.harnesses.install import PACKAGES
from forge.harnesses.mini_swe_agent import MOUNT, TRAJECTORY
from forge.harnesses.registry import get_harness
from forge.sandboxes.base import ExecResult
from tests.forge.harnesses.helpers import attempt_ctx, oracle_and_noop

needs_mini = pytest.mark.skipif(
    not PACKAGES["mini-swe-agent"].installed(),
    reason="mini-swe-agent is not installed: forge harness install mini-swe-agent",
)


def _ctx(**kw) -> AttemptContext:
    return attempt_ctx(instruction="How many lines?", max_turns=7, **kw)


def test_command_points_litellm_at_the_attempt() -> None:
    mini = get_harness("mini-swe-agent")
    cmd = mini.command(_ctx())
    assert cmd[:2] == ["python3", "-c"] and cmd[3] == TRAJECTORY
    assert "model.model_kwargs.api_base=http://127.0.0.1:8931/episodes/e/attempts/0/v1" in cmd
    assert "agent.step_limit=7" in cmd and not [a for a in cmd if "key-1" in a]
    assert cmd[cmd.index("-m") + 1] == "openai/tiny" and cmd[-2:] == ["-t", "How many lines?"]
    env = mini.env(_ctx())
    assert env["PYTHONPATH"] == MOUNT and env["MSWEA_CONFIGURED"] == "true"
    assert env["OPENAI_API_KEY"] == "key-1"  # the key reaches litellm outside any argv
    mapped = _ctx(paths={MOUNT: "/host/mini", "/home/agent": "/host/home"})
    assert mini.env(mapped)["PYTHONPATH"] == "/host/mini"
    assert mini.command(mapped)[3] == "/host/home/mini-trajectory.json"


def test_final_answer_is_the_submission_line() -> None:
    mini = get_harness("mini-swe-agent")
    out = 'agent chatter\n{"final_answer": "3", "exit_status": "Submitted"}\n'
    assert mini.final_answer(ExecResult(0, out, "", 1.0)) == "3"
    out = '{"final_answer": null, "exit_status": "RepeatedFormatError"}\n'
    assert mini.final_answer(ExecResult(0, out, "", 1.0)) is None


@needs_mini
@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.full  # ~25-40 s: -m full; in CI the other CLI harnesses' real episodes
# (nanobot, pi, codex) and mini-swe-agent's adapter (above)
def test_real_mini_oracle_gets_1_and_noop_gets_0(ray_cluster) -> None:
    eps = oracle_and_noop(ray_cluster, "mini-swe-agent", "count_errors")
    good, bad = eps["oracle"], eps["noop"]
    # the oracle submits through mini's own convention; its answer is the submission
    assert good.reward == 1.0 and good.final_answer == "3"
    assert bad.reward == 0.0
