"""A harness mix through the real Scheduler, HarnessPods, sandboxes and harnesses (the scripted
policy): every group is one task in one harness, counts split by harness add up, and the
adaptive draw moves toward the harness the policy fails in."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.replay_buffer import ReplayBuffer, unbox
from actors.scheduler import Scheduler
from forge.config import PolicyConfig, RunConfig
from serve.policy import deploy_policy
from tests.actors.test_scheduler import _task
from tests.forge.react_cli import react_cli

pytestmark = pytest.mark.ray
# The react program run as a third-party CLI agent, but from /tmp: its commands write outside
# the workspace, so the oracle's answer never lands (a policy failure in this harness only).
ASTRAY = react_cli("astray", cwd="/tmp")


@pytest.fixture(scope="module")
def policy(ray_cluster):
    return deploy_policy(PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25), "mix-policy")


def test_adaptive_mix_keeps_groups_in_one_harness_and_leans_to_the_failing_one(
    ray_cluster, policy, tmp_path: Path
) -> None:
    ray = ray_cluster
    config = RunConfig.model_validate(
        {
            "name": "mix",
            "harness": {"react": 1, "command": 1},
            "harness_mix": "adaptive",
            "harness_floor": 0.1,
            "harness_options": {"command": ASTRAY},
            "rollout": {"pod_num_cpus": 0.1, "pod_idle_s": 1.0, "group_size": 2, "max_pods": 4},
        }
    )
    buffer = ray.remote(ReplayBuffer).options(num_cpus=0).remote(str(tmp_path), 64, 1)
    tasks = [_task(i) for i in range(4)]
    sched = (
        ray.remote(Scheduler).options(num_cpus=0).remote(config.model_dump(), policy, buffer, tasks)
    )
    ray.get(sched.start.remote())
    sched.request.remote(10)
    assert ray.get(sched.wait_settled.remote(10, 240)) == {
        "groups_buffered": 10,
        "groups_dropped": 0,
    }
    groups = unbox(ray.get(buffer.sample.remote(10, 0, 30.0)))
    rewards: dict[str, list[float]] = {"react": [], "command": []}
    for group in groups:  # one task in one harness: advantages compare like with like
        harnesses = {ep.provenance["harness"] for ep in group}
        assert len(harnesses) == 1 and len({ep.task_id for ep in group}) == 1
        rewards[harnesses.pop()] += [ep.reward for ep in group]
    assert set(rewards["react"]) <= {1.0} and set(rewards["command"]) <= {0.0}, rewards
    assert rewards["react"] and rewards["command"], rewards  # both drawn (10 draws at 1:1)
    stats = ray.get(sched.stats.remote())
    split = stats["by_harness"]
    assert sum(s["attempts_ok"] for s in split.values()) == stats["attempts_ok"] == 20
    assert split["command"]["attempts_ok"] == len(rewards["command"])
    shares = stats["harness_shares"]
    assert shares["command"] > 0.8 and shares["react"] >= 0.1 - 1e-9, shares
    state = ray.get(sched.draw_state.remote())
    assert state["draws"] == 10 and sum(len(s) for s in state["seen"].values()) == 20
    ray.get(sched.stop.remote())
    provenance = groups[0][0].provenance  # what produced an episode, on it
    assert provenance["sandbox"] == "local" and provenance["verifier"] == "file_equals"
    assert len(provenance["task_version"]) == 12 and provenance["policy_versions"] == [0, 0]
