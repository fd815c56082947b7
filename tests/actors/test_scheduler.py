"""Scheduler and ReplayBuffer as real Ray actors, with real HarnessPods, sandboxes and harness."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from actors.replay_buffer import ReplayBuffer, unbox
from actors.scheduler import Scheduler
from forge.config import PolicyConfig, RunConfig
from serve.policy import deploy_policy

pytestmark = pytest.mark.ray


def _task(i: int, sleep: float = 0.0) -> dict:
    steps = [f"sleep {sleep}"] if sleep else []
    return {
        "id": f"echo_{i}",
        "instruction": f"Write {i} to out.txt",
        "verifier": {"type": "file_equals", "path": "out.txt", "content": str(i)},
        "solution": [*steps, f"echo {i} > out.txt"],
        "limits": {"max_turns": 6, "timeout_s": 60},
    }


@pytest.fixture(scope="module")
def policy(ray_cluster):
    return deploy_policy(PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25), "sched-policy")


def _start(ray, policy, run_dir: Path, name: str, tasks, **rollout):
    config = RunConfig.model_validate(
        {"name": name, "rollout": {"pod_num_cpus": 0.1, "pod_idle_s": 1.0, **rollout}}
    )
    buffer = ray.remote(ReplayBuffer).options(num_cpus=0).remote(str(run_dir), 64, 1)
    sched = (
        ray.remote(Scheduler).options(num_cpus=0).remote(config.model_dump(), policy, buffer, tasks)
    )
    ray.get(sched.start.remote())
    return sched, buffer


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _stat_reaches(ray, sched, key: str, value: int, timeout: float = 60.0) -> int:
    """The scheduler's ``stats()[key]`` once it equals ``value``, or its last value at timeout."""
    deadline = time.monotonic() + timeout
    while (seen := ray.get(sched.stats.remote())[key]) != value and time.monotonic() < deadline:
        time.sleep(0.2)
    return seen


def test_groups_flow_into_buffer_and_pool_shrinks(ray_cluster, policy, tmp_path):
    ray = ray_cluster
    sched, buffer = _start(
        ray,
        policy,
        tmp_path,
        "flow",
        [_task(i) for i in range(3)],
        group_size=3,
        min_pods=1,
        max_pods=3,
    )
    sched.request.remote(4)
    settled = ray.get(sched.wait_settled.remote(4, 120))
    assert settled == {"groups_buffered": 4, "groups_dropped": 0}
    boxes = ray.get(buffer.sample.remote(4, 0, 30.0))
    groups = unbox(boxes)
    assert len(groups) == 4
    for group in groups:
        assert len(group) == 3 and len({ep.task_id for ep in group}) == 1
        assert all(ep.reward == 1.0 and ep.status == "ok" for ep in group)
    stats = ray.get(sched.stats.remote())
    assert stats["attempts_dispatched"] == stats["attempts_ok"] == 12
    # nothing more requested: the rollouts wait, and the wait is counted as it goes
    time.sleep(1.0)
    assert ray.get(sched.stats.remote())["rollout_idle_s"] >= stats["rollout_idle_s"] + 1.0
    # Demand for 12 attempts grows the pool to max_pods in the background; on a loaded machine
    # the first pod may have run every attempt before the others joined, so wait for them.
    assert _stat_reaches(ray, sched, "pods_started", 3) == 3
    assert ray.get(sched.stats.remote())["pods_failed_start"] == 0
    assert _stat_reaches(ray, sched, "pods", 1) == 1  # idle pods beyond min_pods retire
    ray.get(sched.stop.remote())
    assert len(_lines(tmp_path / "episodes" / "episodes.jsonl")) == 12


def test_failing_slot_is_retried_then_group_dropped(ray_cluster, policy, tmp_path):
    ray = ray_cluster
    bad = _task(0)
    bad["solution"] = ["sleep 30"]
    bad["limits"]["timeout_s"] = 3  # the model's command outlives the harness: a policy failure
    sched, buffer = _start(
        ray, policy, tmp_path, "drop", [bad], group_size=2, max_retries=1, policy_failures="drop"
    )
    sched.request.remote(1)
    settled = ray.get(sched.wait_settled.remote(1, 120))
    assert settled == {"groups_buffered": 0, "groups_dropped": 1}
    stats = ray.get(sched.stats.remote())
    # Both slots fail, one is retried once; once the group is doomed no new attempt starts.
    assert stats["failures"].get("timeout", 0) == stats["attempts_failed"]
    assert stats["attempts_dispatched"] == stats["attempts_failed"] + stats["attempts_ok"]
    assert ray.get(buffer.size.remote()) == 0
    ray.get(sched.stop.remote())
    failures = _lines(tmp_path / "episodes" / "failures.jsonl")
    assert len(failures) == stats["attempts_failed"]
    assert all(f["reason"] == "timeout" for f in failures)
    dropped = _lines(tmp_path / "episodes" / "dropped.jsonl")
    assert len({d["group_id"] for d in dropped}) == 1


def _kill_one_harness() -> bool:
    out = subprocess.run(["pgrep", "-f", "react_agent.py"], capture_output=True, text=True)
    for pid in out.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
            return True
        except ProcessLookupError:
            continue
    return False


@pytest.mark.slow
@pytest.mark.full  # ~15 s (~20 s on a loaded machine): -m full. The same two kills run in CI
# through a whole run, every attempt checked on disk exactly once by the chaos ledger:
# tests/chaos/test_in_process.py::test_harness_pod_killed_mid_episode (pod_died, retried, its
# pod replaced) and ::test_sandbox_process_killed (harness_killed_by_policy, scored 0, kept);
# the counts' identities in tests/actors/test_scheduler_faults.py::test_ray_errors_settle_and_retry
def test_fault_injection_pod_and_sandbox_killed(ray_cluster, policy, tmp_path):
    """Kill a HarnessPod actor and a sandbox process mid-episode: the run goes on, the pod's
    attempts are retried, nothing is lost or duplicated on disk and the counts add up. The
    harness is killed inside the model's `sleep`, after its answer: from outside the same as
    the model's command killing it, so that attempt is the policy's (scored 0, kept)."""
    ray = ray_cluster
    tasks = [_task(i, sleep=1.5) for i in range(4)]
    sched, _ = _start(
        ray,
        policy,
        tmp_path,
        "faults",
        tasks,
        group_size=2,
        min_pods=2,
        max_pods=2,
        max_retries=3,
    )
    sched.request.remote(4)
    deadline = time.time() + 60
    while ray.get(sched.stats.remote())["attempts_dispatched"] < 2 and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(0.8)  # mid-episode: the harness is inside its `sleep`
    victim = ray.get(sched.pod_actors.remote())[0]
    ray.kill(victim, no_restart=True)
    time.sleep(0.3)
    while not _kill_one_harness() and time.time() < deadline:
        time.sleep(0.1)
    settled = ray.get(sched.wait_settled.remote(4, 240))
    stats = ray.get(sched.stats.remote())
    ray.get(sched.stop.remote())
    assert settled == {"groups_buffered": 4, "groups_dropped": 0}, stats
    assert stats["failures"].get("pod_died", 0) >= 1, stats
    # killed after the model's answer: the policy's; before it (rare here): infrastructure
    killed_harness = stats["truncations"].get("harness_killed_by_policy", 0)
    assert killed_harness + stats["failures"].get("harness_killed", 0) >= 1, stats
    assert stats["pods_replaced"] >= 1
    assert stats["attempts_dispatched"] == stats["attempts_ok"] + stats["attempts_failed"]
    assert stats["attempts_retried"] == stats["attempts_failed"]
    episodes = _lines(tmp_path / "episodes" / "episodes.jsonl")
    keys = [(e["group_id"], e["episode_id"]) for e in episodes]
    assert len(keys) == len(set(keys)) == 8  # every slot exactly once, none lost
    killed = [e for e in episodes if e["truncated"] == "harness_killed_by_policy"]
    assert len(killed) == killed_harness and all(e["reward"] == 0.0 for e in killed)
    assert all(e["reward"] == 1.0 for e in episodes if e not in killed)
    failures = _lines(tmp_path / "episodes" / "failures.jsonl")
    assert len(failures) == stats["attempts_failed"]


def test_stop_keeps_finished_episodes_of_groups_cut_short(ray_cluster, policy, tmp_path):
    """Ctrl-C mid-group: the slot that finished is on disk (dropped, ``interrupted``); the one
    still running is cancelled. One pod, so the group's two slots run one after the other."""
    ray = ray_cluster
    task = _task(0, sleep=3)
    sched, _ = _start(ray, policy, tmp_path, "stop", [task], group_size=2, min_pods=1, max_pods=1)
    sched.request.remote(1)
    deadline = time.time() + 60
    while ray.get(sched.stats.remote())["attempts_ok"] < 1 and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # slot 1 is inside its `sleep`
    final = ray.get(sched.stop.remote())
    assert final["attempts_ok"] == 1 and final["groups_interrupted"] == 1, final
    dropped = _lines(tmp_path / "episodes" / "dropped.jsonl")
    assert [d["reason"] for d in dropped] == ["interrupted"]
    assert [e["reward"] for e in dropped[0]["episodes"]] == [1.0]
    assert _lines(tmp_path / "episodes" / "episodes.jsonl") == []
