"""Injected faults: every dispatched attempt settles exactly once, whatever Ray raises.

Pods here are real Ray actors whose constructor, ``start`` or ``run_episode`` fails on purpose
(what a broken image, an unschedulable pod, a lost object, a dead node or an OOM kill looks like
to the Scheduler), plus pods that play harmless one-turn episodes (no model, no sandbox).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest
import ray.exceptions as rx
from ray import cloudpickle

from actors.attempts import infra_reason
from actors.replay_buffer import ReplayBuffer
from actors.scheduler import Scheduler
from forge.config import RunConfig
from forge.types import Episode, Turn

pytestmark = pytest.mark.ray
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # pods defined here run in workers
TASKS = [{"id": f"t{i}"} for i in range(3)]


def _episode(episode_id: str, attempt: int, tokens: int = 1, truncated: str | None = None):
    turn = Turn(
        episode_id,
        attempt,
        0,
        "chat",
        {},
        [1],
        [2] * tokens,
        [0.0] * tokens,
        "",
        [],
        "stop",
        0,
        0.0,
        time.time(),
    )
    return Episode(
        episode_id,
        "t",
        attempt,
        "sim",
        0.0 if truncated else 1.0,
        "ok",
        truncated=truncated,
        turns=[turn],
    )


class Pod:
    """A pod whose behaviour the test names: ``mode`` picks the fault."""

    def __init__(self, policy, pod_id: str = "p", **_: object) -> None:
        self.mode = policy  # the Scheduler passes its policy handle first: here, the fault
        self.pod_id = pod_id
        if self.mode == "ctor_raises":
            raise RuntimeError("image is broken")

    async def start(self) -> str:
        if self.mode == "start_raises":
            raise RuntimeError("cannot bind")
        if self.mode == "slow_growth" and self.pod_id != "pod-0":
            await asyncio.sleep(300)  # a pod Ray takes long to place: only the first is quick
        return "sim://"

    async def stop(self) -> None:
        return None

    async def run(self, spec: dict) -> Episode:
        return await self.run_episode(**spec)

    async def run_episode(self, task, harness, attempt=0, episode_id="", **_: object) -> Episode:
        first = attempt == 0
        if self.mode == "object_lost" and first:
            raise rx.ObjectLostError("00" * 28, "owner", "call site")
        if self.mode == "oom" and first:
            raise rx.OutOfMemoryError("the node ran out of memory")
        if self.mode == "node_died" and first:
            raise rx.NodeDiedError("node 1 died")
        if self.mode == "hangs" and first:
            await asyncio.sleep(120)  # past attempt_timeout_s: the scheduler gives up on it
        if self.mode == "zero_tokens":
            return _episode(episode_id, attempt, tokens=0)
        if self.mode == "truncated":
            return _episode(episode_id, attempt, truncated="context_full")
        return _episode(episode_id, attempt)


def _scheduler(ray, tmp_path, mode: str, **rollout):
    rollout = {"group_size": 2, "max_pods": 2, "pod_num_cpus": 0.01, **rollout}
    config = RunConfig.model_validate({"name": f"faults-{mode}", "rollout": rollout})
    buffer = ray.remote(ReplayBuffer).options(num_cpus=0).remote(str(tmp_path), 64, 1)
    sched = (
        ray.remote(Scheduler)
        .options(num_cpus=0)
        .remote(config.model_dump(), mode, buffer, TASKS, pod_cls=Pod)
    )
    ray.get(sched.start.remote(), timeout=60)
    return sched, buffer


@pytest.mark.parametrize(
    ("mode", "reason"), [("object_lost", "object_lost"), ("oom", "oom"), ("node_died", "node_died")]
)
def test_ray_errors_settle_and_retry(ray_cluster, tmp_path, mode: str, reason: str) -> None:
    sched, _ = _scheduler(ray_cluster, tmp_path, mode)
    sched.request.remote(2)
    settled = ray_cluster.get(sched.wait_settled.remote(2, 60), timeout=90)
    stats = ray_cluster.get(sched.stats.remote())
    ray_cluster.get(sched.stop.remote())
    assert settled == {"groups_buffered": 2, "groups_dropped": 0}, stats
    assert stats["failures"] == {reason: 4}, stats  # each slot's first attempt, retried once
    failures = [json.loads(x) for x in (tmp_path / "episodes" / "failures.jsonl").open()]
    error = {"object_lost": "ObjectLostError", "oom": "OutOfMemoryError", "node_died": "NodeDied"}
    assert [error[mode] in f["failure_detail"] for f in failures] == [True] * 4, failures
    assert stats["attempts_dispatched"] == stats["attempts_ok"] + stats["attempts_failed"] == 8


@pytest.mark.parametrize("mode", ["ctor_raises", "start_raises"])
def test_pod_that_cannot_start_is_reported_not_fatal(ray_cluster, tmp_path, mode: str) -> None:
    """The dispatch loop survives pods that never start; the stall report says why."""
    sched, _ = _scheduler(ray_cluster, tmp_path, mode, min_pods=1)
    sched.request.remote(1)
    deadline = time.monotonic() + 60  # the second try follows the first's back-off
    while (stats := ray_cluster.get(sched.stats.remote()))["pods_failed_start"] < 2:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    report = ray_cluster.get(sched.stall_report.remote())
    ray_cluster.get(sched.stop.remote())
    assert stats["pods"] == 0 and stats["pods_failed_start"] >= 2, stats
    assert stats["queue"] == 2 and stats["loop_errors"] == 0, stats
    expected = "image is broken" if mode == "ctor_raises" else "cannot bind"
    assert "pod start(s) failed" in report and expected in report, report


def test_pod_that_never_schedules_times_out(ray_cluster, tmp_path) -> None:
    """A pod asking for more CPUs than the cluster has never starts: its start times out."""
    sched, _ = _scheduler(
        ray_cluster, tmp_path, "fine", min_pods=0, pod_num_cpus=1000, pod_start_timeout_s=1
    )
    sched.request.remote(1)
    time.sleep(3)
    stats = ray_cluster.get(sched.stats.remote())
    report = ray_cluster.get(sched.stall_report.remote())
    ray_cluster.get(sched.stop.remote())
    assert stats["pods_failed_start"] >= 1 and stats["attempts_dispatched"] == 0, stats
    assert "not started within 1s" in report


def test_a_pod_slow_to_start_holds_up_no_attempt(ray_cluster, tmp_path) -> None:
    """While the pool grows, attempts run on the pods already there: a group settles on the
    one pod long before the second could start (the dispatch once waited on the start)."""
    sched, _ = _scheduler(ray_cluster, tmp_path, "slow_growth", min_pods=1, pod_start_timeout_s=60)
    sched.request.remote(1)
    settled = ray_cluster.get(sched.wait_settled.remote(1, 20), timeout=30)
    stats = ray_cluster.get(sched.stats.remote())
    ray_cluster.get(sched.stop.remote())
    assert settled == {"groups_buffered": 1, "groups_dropped": 0}, stats
    assert stats["pods"] == 1 and stats["pods_failed_start"] == 0, stats


def test_hung_attempt_times_out_replaces_its_pod_and_is_retried(ray_cluster, tmp_path) -> None:
    sched, _ = _scheduler(ray_cluster, tmp_path, "hangs", attempt_timeout_s=1)
    sched.request.remote(1)
    settled = ray_cluster.get(sched.wait_settled.remote(1, 60), timeout=90)
    stats = ray_cluster.get(sched.stats.remote())
    ray_cluster.get(sched.stop.remote())
    assert settled == {"groups_buffered": 1, "groups_dropped": 0}, stats
    assert stats["failures"] == {"attempt_timeout": 2}, stats  # each slot's first attempt
    assert stats["pods_replaced"] == 2 and stats["attempts_ok"] == 2, stats
    failures = [json.loads(x) for x in (tmp_path / "episodes" / "failures.jsonl").open()]
    assert sorted((f["episode_id"][-1], f["attempt"], f["reason"]) for f in failures) == [
        ("0", 0, "attempt_timeout"),
        ("1", 0, "attempt_timeout"),
    ]


def test_zero_token_episodes_close_their_group(ray_cluster, tmp_path) -> None:
    """An episode in which the harness never called the model still settles (metrics refuse
    zero increments: that must not stop the settle)."""
    sched, _ = _scheduler(ray_cluster, tmp_path, "zero_tokens")
    sched.request.remote(1)
    settled = ray_cluster.get(sched.wait_settled.remote(1, 30), timeout=60)
    ray_cluster.get(sched.stop.remote())
    assert settled == {"groups_buffered": 1, "groups_dropped": 0}


@pytest.mark.parametrize("policy_failures", ["score_zero", "drop"])
def test_policy_failures_scored_or_dropped(ray_cluster, tmp_path, policy_failures: str) -> None:
    sched, _ = _scheduler(
        ray_cluster, tmp_path, "truncated", policy_failures=policy_failures, max_retries=1
    )
    sched.request.remote(1)
    settled = ray_cluster.get(sched.wait_settled.remote(1, 30), timeout=60)
    stats = ray_cluster.get(sched.stats.remote())
    ray_cluster.get(sched.stop.remote())
    if policy_failures == "score_zero":  # finished episodes, reward 0, trained on
        assert settled == {"groups_buffered": 1, "groups_dropped": 0}
        assert stats["truncations"] == {"context_full": 2} and stats["attempts_failed"] == 0
    else:  # retried like an infrastructure failure, then the group is dropped
        assert settled == {"groups_buffered": 0, "groups_dropped": 1}
        assert stats["failures"]["context_full"] >= 2 and stats["attempts_truncated"] == 0


def test_infra_reason_names_every_ray_error() -> None:
    assert infra_reason(TimeoutError()) == "attempt_timeout"
    assert infra_reason(rx.ActorDiedError()) == "pod_died"
    assert infra_reason(rx.NodeDiedError("x")) == "node_died"
    assert infra_reason(rx.OutOfMemoryError("x")) == "oom"
    assert infra_reason(rx.OwnerDiedError("00" * 28, "o", "c")) == "object_lost"
    assert infra_reason(rx.WorkerCrashedError()) == "ray_error"
    assert infra_reason(KeyError("x")) == "scheduler_error"
