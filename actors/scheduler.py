"""Scheduler: turns tasks into GRPO groups of attempts and runs them on an elastic pod pool.

A plain class; ``ray.remote(Scheduler)`` where it is created (an async actor).

Invariants:

1. Every dispatched attempt ends exactly once: rewarded (its episode joins its group), retried
   (a failed attempt is logged with its reason and a fresh attempt of the same slot is queued,
   up to ``max_retries``), or dropped (its group is dropped, logged with the reason).
2. A group reaches the ReplayBuffer only whole: all ``group_size`` slots rewarded. A group with a
   slot that failed past its retries is dropped whole and counted (DESIGN.md decision 5); its
   in-flight attempts still end first, so nothing is written after the group's verdict.
3. Every attempt runs in a fresh sandbox; a retried attempt gets a new attempt number, hence a
   new URL and key, so it can never mix with the one before (decision 1).
4. A pod that dies or times out is replaced; the pool stays within [min_pods, max_pods]; extra
   pods idle for ``pod_idle_s`` are retired.
5. Collection never outruns the trainer: groups start only while the buffer has room, and only
   as many as the driver requested (``request``), which bounds how stale a sample can get.
6. ``stop`` cancels what is in flight (the pods destroy those sandboxes) and writes the finished
   episodes of groups cut short to the buffer's dropped log (reason ``interrupted``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import ray

from actors.harness_pod import HarnessPod
from forge import metrics
from forge.config import RunConfig
from forge.types import Episode

log = logging.getLogger(__name__)


@dataclass
class Group:
    group_id: str
    task: dict[str, Any]
    size: int
    episodes: dict[int, Episode] = field(default_factory=dict)
    retries: dict[int, int] = field(default_factory=dict)
    running: int = 0
    dropped: str | None = None
    result: asyncio.Future[list[Episode]] | None = None  # evaluation groups only


@dataclass
class Pod:
    name: str
    actor: Any
    busy: bool = False
    idle_since: float = field(default_factory=time.monotonic)


class Scheduler:
    def __init__(
        self,
        config: RunConfig | dict[str, Any],
        policy: Any,
        buffer: Any,
        tasks: list[dict],
        pod_cls: type = HarnessPod,
    ) -> None:
        self.config = RunConfig.model_validate(config)
        self.rollout = self.config.rollout
        self.policy = policy
        self.buffer = buffer
        self.pod_cls = pod_cls  # HarnessPod; benchmarks pass a simulated pod
        if not tasks:
            raise ValueError("tasks: the suite is empty")
        order = list(tasks)
        random.Random(self.rollout.seed).shuffle(order)
        self._tasks = itertools.cycle(order)
        self._budget = 0
        self._pending: list[tuple[Group, int, int]] = []  # (group, slot, attempt number)
        self._groups: dict[str, Group] = {}
        self._pods: list[Pod] = []
        self._pod_ids = itertools.count()
        self._inflight: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._stopping = False
        self.version = 0
        self.counts: dict[str, int] = {
            "groups_started": 0,
            "groups_buffered": 0,
            "groups_dropped": 0,
            "groups_interrupted": 0,
            "attempts_dispatched": 0,
            "attempts_ok": 0,
            "attempts_failed": 0,
            "attempts_retried": 0,
            "pods_started": 0,
            "pods_replaced": 0,
            "pods_retired": 0,
        }
        self.failures: dict[str, int] = {}
        self.tokens = 0

    # -- control (called by the driver) -------------------------------------------------------

    async def start(self) -> None:
        for _ in range(self.rollout.min_pods):
            await self._new_pod()
        self._loop = asyncio.create_task(self._dispatch_loop())

    def request(self, groups: int) -> None:
        """Allow ``groups`` more training groups to start."""
        self._budget += groups
        self._wake.set()

    async def wait_settled(self, groups: int, timeout_s: float | None = None) -> dict[str, int]:
        """Wait until ``groups`` training groups in all have been buffered or dropped."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.counts["groups_buffered"] + self.counts["groups_dropped"] < groups:
            if deadline is not None and time.monotonic() > deadline:
                break
            self._settled.clear()
            try:
                await asyncio.wait_for(self._settled.wait(), 1.0)
            except TimeoutError:
                pass
        return {k: self.counts[k] for k in ("groups_buffered", "groups_dropped")}

    def set_version(self, version: int) -> None:
        self.version = version
        metrics.gauge("version", version, run=self.config.name)

    def pod_actors(self) -> list[Any]:
        """The live pods' actor handles (for operators and fault-injection tests)."""
        return [pod.actor for pod in self._pods]

    def stats(self) -> dict[str, Any]:
        return {
            **self.counts,
            "failures": dict(self.failures),
            "pods": len(self._pods),
            "queue": len(self._pending),
            "budget": self._budget,
            "groups_open": sum(1 for g in self._groups.values() if g.result is None),
            "sampled_tokens": self.tokens,
        }

    async def evaluate(self, tasks: list[dict], temperature: float) -> list[Episode]:
        """One attempt of each task (retried on failure like any other); nothing is buffered."""
        futures = []
        for task in tasks:
            group = self._open_group(task, size=1)
            group.result = asyncio.get_running_loop().create_future()
            futures.append(group.result)
        self._wake.set()
        results = await asyncio.gather(*futures)
        return [ep for group in results for ep in group]

    async def stop(self) -> dict[str, Any]:
        """Cancel in-flight attempts, destroy their sandboxes (the pods do), retire every pod."""
        self._stopping = True
        if self._loop:
            self._loop.cancel()
        for task in list(self._inflight):
            task.cancel()
        await asyncio.gather(*self._inflight, return_exceptions=True)
        for pod in self._pods:
            await self._retire(pod, kill_only=True)
        self._pods.clear()
        # Groups cut short: their finished episodes go to disk as dropped ("interrupted").
        for group in list(self._groups.values()):
            del self._groups[group.group_id]
            if group.result is not None:
                group.result.cancel()
            elif group.episodes:
                episodes = [group.episodes[s] for s in sorted(group.episodes)]
                self.counts["groups_interrupted"] += 1
                await self.buffer.drop.remote(episodes, group.group_id, "interrupted")
        return self.stats()

    # -- the dispatch loop --------------------------------------------------------------------

    def _open_group(self, task: dict, size: int) -> Group:
        group = Group(f"g{uuid.uuid4().hex[:12]}", task, size)
        self._groups[group.group_id] = group
        self._pending.extend((group, slot, 0) for slot in range(size))
        return group

    async def _dispatch_loop(self) -> None:
        while not self._stopping:
            self._wake.clear()
            while self._budget > 0 and not await self.buffer.full.remote():
                self._budget -= 1
                self.counts["groups_started"] += 1
                self._open_group(next(self._tasks), self.rollout.group_size)
            while self._pending:
                pod = await self._idle_pod()
                if pod is None:
                    break
                group, slot, attempt = self._pending.pop(0)
                pod.busy = True
                task = asyncio.create_task(self._run(pod, group, slot, attempt))
                self._inflight.add(task)
                task.add_done_callback(self._inflight.discard)
            await self._retire_idle()
            metrics.gauge("queue", len(self._pending), run=self.config.name)
            metrics.gauge("pods", len(self._pods), run=self.config.name)
            try:
                await asyncio.wait_for(self._wake.wait(), 0.5)
            except TimeoutError:
                pass

    async def _idle_pod(self) -> Pod | None:
        for pod in self._pods:
            if not pod.busy:
                return pod
        if len(self._pods) < self.rollout.max_pods:
            return await self._new_pod()
        return None

    async def _new_pod(self) -> Pod:
        name = f"pod-{next(self._pod_ids)}"
        actor = (
            ray.remote(self.pod_cls)
            .options(num_cpus=self.rollout.pod_num_cpus, max_concurrency=1000)
            .remote(
                self.policy,
                pod_id=name,
                run=self.config.name,
                model=self.config.policy.engine.model,
                proxy=self.config.proxy.model_dump(),
                sandbox=self.config.sandbox.model_dump(),
            )
        )
        await actor.start.remote()
        pod = Pod(name, actor)
        self._pods.append(pod)
        self.counts["pods_started"] += 1
        return pod

    async def _retire(self, pod: Pod, kill_only: bool = False) -> None:
        if not kill_only:
            self._pods.remove(pod)
        try:
            await asyncio.wait_for(pod.actor.stop.remote(), 10)
        except Exception:  # a dead or stuck pod is killed all the same
            pass
        ray.kill(pod.actor, no_restart=True)

    async def _retire_idle(self) -> None:
        now = time.monotonic()
        for pod in list(self._pods):
            extra = len(self._pods) > self.rollout.min_pods
            if extra and not pod.busy and now - pod.idle_since > self.rollout.pod_idle_s:
                await self._retire(pod)
                self.counts["pods_retired"] += 1

    # -- one attempt --------------------------------------------------------------------------

    async def _run(self, pod: Pod, group: Group, slot: int, attempt: int) -> None:
        self.counts["attempts_dispatched"] += 1
        group.running += 1
        episode: Episode | None = None
        reason: str | None = None
        episode_id = f"{group.group_id}-{slot}"
        try:
            temperature = self.config.eval_temperature if group.result else self.config.temperature
            call = pod.actor.run_episode.remote(
                group.task,
                self.config.harness,
                harness_options=self.config.harness_options,
                attempt=attempt,
                episode_id=episode_id,
                temperature=temperature,
            )
            episode = await asyncio.wait_for(call, self.rollout.attempt_timeout_s)
            reason = episode.failure
        except TimeoutError:
            reason = "attempt_timeout"
        except ray.exceptions.RayActorError:
            reason = "pod_died"
        except ray.exceptions.RayTaskError as e:
            reason = "pod_error"
            log.warning("attempt %s/%s raised: %s", episode_id, attempt, e)
        finally:
            group.running -= 1
        if reason in ("attempt_timeout", "pod_died", "pod_error"):
            # The pod cannot be trusted any more: replace it.
            await self._retire(pod)
            self.counts["pods_replaced"] += 1
        else:
            pod.busy = False
            pod.idle_since = time.monotonic()
        self._settle(group, slot, attempt, episode, reason)
        self._wake.set()

    def _settle(
        self, group: Group, slot: int, attempt: int, episode: Episode | None, reason: str | None
    ) -> None:
        tags = {"run": self.config.name}
        if reason is None and episode is not None:
            self.counts["attempts_ok"] += 1
            metrics.inc("episodes", status="ok", **tags)
            group.episodes[slot] = episode
            tokens = sum(len(t.completion_ids) for t in episode.turns)
            self.tokens += tokens
            metrics.inc("tokens", tokens, **tags)
            for turn in episode.turns:
                metrics.observe("turn_latency", turn.latency_s * 1000, **tags)
        else:
            reason = reason or "unknown"
            self.counts["attempts_failed"] += 1
            self.failures[reason] = self.failures.get(reason, 0) + 1
            metrics.inc("episodes", status="failed", **tags)
            metrics.inc("failures", reason=reason, **tags)
            record = episode or Episode(
                episode_id=f"{group.group_id}-{slot}",
                task_id=group.task.get("id", "?"),
                attempt=attempt,
                harness=self.config.harness,
                reward=0.0,
                status="failed",
                failure=reason,
            )
            self.buffer.log_failure.remote(record, group.group_id, reason)
            used = group.retries.get(slot, 0)
            if used < self.rollout.max_retries and group.dropped is None and not self._stopping:
                group.retries[slot] = used + 1
                self.counts["attempts_retried"] += 1
                self._pending.append((group, slot, attempt + 1))
            elif group.dropped is None:
                group.dropped = f"{reason} after {used} retries"
                self._pending = [p for p in self._pending if p[0] is not group]
        self._maybe_close(group)

    def _maybe_close(self, group: Group) -> None:
        if group.running or any(p[0] is group for p in self._pending):
            return
        if group.dropped is None and len(group.episodes) < group.size:
            return
        del self._groups[group.group_id]
        episodes = [group.episodes[s] for s in sorted(group.episodes)]
        if group.result is not None:  # evaluation
            group.result.set_result(episodes)
            return
        self._settled.set()
        if group.dropped is not None:
            self.counts["groups_dropped"] += 1
            metrics.inc("groups", outcome="dropped", run=self.config.name)
            self.buffer.drop.remote(episodes, group.group_id, group.dropped)
        else:
            self.counts["groups_buffered"] += 1
            metrics.inc("groups", outcome="buffered", run=self.config.name)
            self.buffer.put.remote(episodes, group.group_id)
