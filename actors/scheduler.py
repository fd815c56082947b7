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
4. A pod that dies, errs or times out is replaced; the pool (:mod:`actors.pod_pool`) stays
   within [min_pods, max_pods]; a pod that cannot start in time is killed and counted.
   Whatever Ray raises (a dead actor, a lost object, a dead node, out of memory) settles the
   slot as an infrastructure failure; the dispatch loop survives its own errors and reports
   them; metrics and logging never stop a settle.
7. What the policy caused ends a real episode (``Episode.truncated``: reward 0, trained on)
   unless ``rollout.policy_failures`` is ``drop``; what the infrastructure caused is retried.
5. Collection never outruns the trainer: groups start only while the buffer has room, and only
   as many as the driver requested (``request``), which bounds how stale a sample can get.
6. ``stop`` cancels what is in flight (the pods destroy those sandboxes) and writes the finished
   episodes of groups cut short to the buffer's dropped log (reason ``interrupted``).
8. Tasks are drawn in a seeded order from a cursor; a resumed run passes the cursor it saved,
   so it does not replay the same tasks.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from typing import Any

from actors.attempts import POD_SUSPECT, Attempt, Group, add, infra_reason
from actors.harness_pod import HarnessPod
from actors.pod_pool import Pod, PodPool
from forge import metrics
from forge.config import RunConfig
from forge.types import Episode

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(
        self,
        config: RunConfig | dict[str, Any],
        policy: Any,
        buffer: Any,
        tasks: list[dict],
        pod_cls: type = HarnessPod,
        cursor: int = 0,
    ) -> None:
        self.config = RunConfig.model_validate(config)
        self.rollout = self.config.rollout
        self.policy = policy
        self.buffer = buffer
        self.pool = PodPool(self.config, policy, pod_cls)  # pod_cls: benchmarks simulate pods
        if not tasks:
            raise ValueError("tasks: the suite is empty")
        self._order = list(tasks)
        random.Random(self.rollout.seed).shuffle(self._order)
        self.cursor = cursor  # tasks drawn so far (saved in checkpoints)
        self._budget = 0
        self._pending: list[Attempt] = []
        self._groups: dict[str, Group] = {}
        self._running: dict[asyncio.Task[None], Attempt] = {}
        self._settled_keys: set[tuple[str, int, int]] = set()
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._stopping = False
        self.version = 0
        self.last_progress = time.monotonic()
        self.last_loop_error: str | None = None
        self.counts: dict[str, int] = {
            "groups_started": 0,
            "groups_buffered": 0,
            "groups_dropped": 0,
            "groups_interrupted": 0,
            "attempts_dispatched": 0,
            "attempts_ok": 0,
            "attempts_failed": 0,
            "attempts_retried": 0,
            "attempts_truncated": 0,
            "segments": 0,
            "loop_errors": 0,
            "settle_errors": 0,
        }
        self.failures: dict[str, int] = {}
        self.truncations: dict[str, int] = {}
        self.resets: dict[str, int] = {}
        self.tokens = 0

    # -- control (called by the driver) -------------------------------------------------------

    async def start(self) -> None:
        await self.pool.fill()
        self._ensure_loop()

    def request(self, groups: int) -> None:
        """Allow ``groups`` more training groups to start."""
        self._budget += groups
        self.last_progress = time.monotonic()
        self._ensure_loop()
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
        return [pod.actor for pod in self.pool.pods]

    def stats(self) -> dict[str, Any]:
        return {
            **self.counts,
            **self.pool.counts,
            "pods_failed_start": self.pool.failed_starts,
            "failures": dict(self.failures),
            "truncations": dict(self.truncations),
            "resets": dict(self.resets),
            "pods": len(self.pool.pods),
            "queue": len(self._pending),
            "in_flight": len(self._running),
            "budget": self._budget,
            "groups_open": sum(1 for g in self._groups.values() if g.result is None),
            "sampled_tokens": self.tokens,
            "cursor": self.cursor,
            "idle_s": time.monotonic() - self.last_progress,
        }

    def stall_report(self) -> str:
        """What collection is waiting for, for a driver that saw no progress for too long."""
        now = time.monotonic()
        lines = [
            f"no attempt settled for {now - self.last_progress:.0f}s; "
            f"{len(self._pending)} attempt(s) queued, {len(self._running)} in flight, "
            f"{len(self.pool.pods)} pod(s) ({sum(p.busy for p in self.pool.pods)} busy), "
            f"budget {self._budget} group(s)"
        ]
        for a in sorted(self._running.values(), key=lambda a: a.started)[:10]:
            lines.append(
                f"  in flight: {a.episode_id} attempt {a.number} of task "
                f"{a.group.task.get('id')} on {a.pod} for {now - a.started:.0f}s"
            )
        for g in list(self._groups.values())[:10]:
            lines.append(
                f"  open group {g.group_id} (task {g.task.get('id')}): "
                f"{len(g.episodes)}/{g.size} done, {g.running} running"
            )
        if self.pool.failed_starts:
            lines.append(
                f"  {self.pool.failed_starts} pod start(s) failed; last: "
                f"{self.pool.last_start_error}"
            )
        if self.last_loop_error:
            lines.append(
                f"  dispatch loop errors: {self.counts['loop_errors']}; last: "
                f"{self.last_loop_error}"
            )
        return "\n".join(lines)

    async def evaluate(self, tasks: list[dict], temperature: float) -> list[Episode]:
        """One attempt of each task (retried on failure like any other); nothing is buffered."""
        futures = []
        for task in tasks:
            group = self._open_group(task, size=1)
            group.result = asyncio.get_running_loop().create_future()
            futures.append(group.result)
        self._ensure_loop()
        self._wake.set()
        results = await asyncio.gather(*futures)
        return [ep for group in results for ep in group]

    async def stop(self) -> dict[str, Any]:
        """Cancel in-flight attempts, destroy their sandboxes (the pods do), retire every pod."""
        self._stopping = True
        if self._loop:
            self._loop.cancel()
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        await self.pool.close()
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

    def _next_task(self) -> dict[str, Any]:
        task = self._order[self.cursor % len(self._order)]
        self.cursor += 1
        return task

    def _open_group(self, task: dict, size: int) -> Group:
        group = Group(f"g{uuid.uuid4().hex[:12]}", task, size)
        self._groups[group.group_id] = group
        self._pending.extend(Attempt(group, slot, 0) for slot in range(size))
        return group

    def _ensure_loop(self) -> None:
        """(Re)start the dispatch loop unless it is running or the scheduler is stopping."""
        if self._stopping or (self._loop is not None and not self._loop.done()):
            return
        if self._loop is not None and not self._loop.cancelled() and self._loop.exception():
            self._loop_error(self._loop.exception())
        self._loop = asyncio.get_running_loop().create_task(self._dispatch_loop())

    def _loop_error(self, error: BaseException | None) -> None:
        self.counts["loop_errors"] += 1
        self.last_loop_error = f"{type(error).__name__}: {error}"[:2000]
        log.error("dispatch loop error (%d so far): %s", self.counts["loop_errors"], error)

    async def _dispatch_loop(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                await self._dispatch_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a dead buffer, a failed pod start, a bug: report, go on
                self._loop_error(e)
            try:
                await asyncio.wait_for(self._wake.wait(), 0.5)
            except TimeoutError:
                pass

    async def _dispatch_once(self) -> None:
        while self._budget > 0 and not await self.buffer.full.remote():
            self._budget -= 1
            self.counts["groups_started"] += 1
            self._open_group(self._next_task(), self.rollout.group_size)
        while self._pending and not self._stopping:
            pod = await self.pool.idle_pod()
            if pod is None:
                break
            attempt = self._pending.pop(0)
            attempt.pod, attempt.started = pod.name, time.monotonic()
            task = asyncio.create_task(self._run(pod, attempt))
            self._running[task] = attempt
            task.add_done_callback(self._attempt_done)
        await self.pool.retire_idle()
        metrics.gauge("queue", len(self._pending), run=self.config.name)
        metrics.gauge("pods", len(self.pool.pods), run=self.config.name)

    def _attempt_done(self, task: asyncio.Task[None]) -> None:
        attempt = self._running.pop(task, None)
        if task.cancelled() or attempt is None:
            return
        error = task.exception()
        if error is not None:  # _run failed outside its guards: settle the slot all the same
            self.counts["settle_errors"] += 1
            log.error("attempt %s/%s: %r", attempt.episode_id, attempt.number, error)
            self._settle(attempt, None, "scheduler_error")

    # -- one attempt --------------------------------------------------------------------------

    async def _run(self, pod: Pod, attempt: Attempt) -> None:
        group = attempt.group
        self.counts["attempts_dispatched"] += 1
        if group.result is None:  # journaled first: a crash can never lose it unrecorded
            self.buffer.dispatched.remote(group.group_id, attempt.episode_id, attempt.number)
        group.running += 1
        episode: Episode | None = None
        reason: str | None = None
        try:
            temperature = self.config.eval_temperature if group.result else self.config.temperature
            call = pod.actor.run_episode.remote(
                group.task,
                self.config.harness,
                harness_options=self.config.harness_options,
                attempt=attempt.number,
                episode_id=attempt.episode_id,
                temperature=temperature,
            )
            episode = await asyncio.wait_for(call, self.rollout.attempt_timeout_s)
            reason = episode.failure
            if reason is None and episode.truncated and self.rollout.policy_failures == "drop":
                reason = episode.truncated
        except asyncio.CancelledError:
            group.running -= 1
            raise
        except BaseException as e:  # whatever Ray raised: an infrastructure failure
            reason = infra_reason(e)
            log.warning("attempt %s/%s: %s: %r", attempt.episode_id, attempt.number, reason, e)
        group.running -= 1
        try:
            if reason in POD_SUSPECT:
                await self.pool.replace(pod)
            else:
                self.pool.release(pod)
        except Exception as e:
            log.warning("returning %s to the pool: %r", pod.name, e)
        self._settle(attempt, episode, reason)

    def _settle(self, attempt: Attempt, episode: Episode | None, reason: str | None) -> None:
        group, slot = attempt.group, attempt.slot
        key = (group.group_id, slot, attempt.number)
        if key in self._settled_keys:  # never twice, whatever path reached here
            return
        self._settled_keys.add(key)
        self.last_progress = time.monotonic()
        try:
            self._record(group, episode, reason)
        except Exception as e:  # bookkeeping never stops a settle
            self.counts["settle_errors"] += 1
            log.warning("settle of %s: %r", attempt.episode_id, e)
        if reason is None and episode is not None:
            group.episodes[slot] = episode
        else:
            reason = reason or "unknown"
            record = episode or Episode(
                episode_id=attempt.episode_id,
                task_id=group.task.get("id", "?"),
                attempt=attempt.number,
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
                self._pending.append(Attempt(group, slot, attempt.number + 1))
            elif group.dropped is None:
                group.dropped = f"{reason} after {used} retries"
                self._pending = [p for p in self._pending if p.group is not group]
        self._maybe_close(group)
        self._wake.set()

    def _record(self, group: Group, episode: Episode | None, reason: str | None) -> None:
        """Counts and metrics of a settled attempt."""
        tags = {"run": self.config.name}
        if reason is None and episode is not None:
            self.counts["attempts_ok"] += 1
            metrics.inc("episodes", status="ok", **tags)
            if episode.truncated:
                self.counts["attempts_truncated"] += 1
                add(self.truncations, episode.truncated)
                metrics.inc("truncations", reason=episode.truncated, **tags)
            self.counts["segments"] += len(episode.segments)
            for why, n in episode.reset_reasons.items():
                add(self.resets, why, n)
            tokens = sum(len(t.completion_ids) for t in episode.turns)
            self.tokens += tokens
            metrics.inc("tokens", tokens, **tags)
            for turn in episode.turns:
                metrics.observe("turn_latency", turn.latency_s * 1000, **tags)
        else:
            self.counts["attempts_failed"] += 1
            add(self.failures, reason or "unknown")
            metrics.inc("episodes", status="failed", **tags)
            metrics.inc("failures", reason=reason or "unknown", **tags)

    def _maybe_close(self, group: Group) -> None:
        if group.running or any(p.group is group for p in self._pending):
            return
        if group.dropped is None and len(group.episodes) < group.size:
            return
        if self._groups.pop(group.group_id, None) is None:
            return
        episodes = [group.episodes[s] for s in sorted(group.episodes)]
        if group.result is not None:  # evaluation
            if not group.result.done():
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
