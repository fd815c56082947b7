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

Throughput (``scripts/bench/scheduler_throughput.py``): an attempt costs one actor call, the
pod's ``run`` with its arguments in one mapping (Ray's submission is most of the Scheduler's
time, and one argument costs about half of six). The pod calls' futures settle their attempts
by callback (no task or timer per attempt; a sweep times out calls past ``attempt_timeout_s``),
and the pod a settled attempt frees takes the next queued attempt in that callback, so a small
pool never waits for a dispatch pass. Each pass lends idle pods to what is queued and opens
groups. The buffer's records (:class:`actors.attempts.Outbox`: an attempt's journal record
before anything it produced) go in one call at most every ``SEND_S`` or per ``SEND_RECORDS``,
not once per pass; metric increments are summed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import deque
from typing import Any

from actors import scheduler_report as report
from actors.attempts import POD_SUSPECT, Attempt, Group, Ledger, Outbox, failed_record, outcome
from actors.harness_draw import HarnessDraw
from actors.harness_pod import HarnessPod
from actors.pod_pool import Pod, PodPool
from forge.config import RunConfig
from forge.config.harness_mix import weights
from forge.observe import metrics
from forge.types import Episode

log = logging.getLogger(__name__)
SWEEP_S = 0.25  # how often in-flight attempts are checked against attempt_timeout_s
RETIRE_S = 0.25  # how often idle pods beyond min_pods are looked for
SEND_S = 0.02  # the buffer's records go at least this often (one call for all waiting) ...
SEND_RECORDS = 256  # ... or as soon as this many wait


class Scheduler:
    def __init__(
        self,
        config: RunConfig | dict[str, Any],
        policy: Any,
        buffer: Any,
        tasks: list[dict],
        pod_cls: type = HarnessPod,
        cursor: int = 0,
        draw_state: dict[str, Any] | None = None,
    ) -> None:
        self.config = RunConfig.model_validate(config)
        self.rollout = self.config.rollout
        self.policy = policy
        self.buffer = buffer
        self.outbox = Outbox(buffer)  # the buffer's records, many per actor call
        self.pool = PodPool(self.config, policy, pod_cls)  # pod_cls: benchmarks simulate pods
        if not tasks:
            raise ValueError("tasks: the suite is empty")
        self._order = list(tasks)
        random.Random(self.rollout.seed).shuffle(self._order)
        self.cursor = cursor  # tasks drawn so far (saved in checkpoints)
        cfg = self.config  # each group's harness, drawn from the mix (saved in checkpoints)
        self.draw = HarnessDraw(
            weights(cfg.harness), cfg.harness_mix, cfg.harness_floor, self.rollout.seed, draw_state
        )
        self._budget = 0
        self._pending: deque[Attempt] = deque()
        self._groups: dict[str, Group] = {}
        self._running: dict[asyncio.Future[Any], tuple[Attempt, Pod]] = {}
        self._replacing: set[asyncio.Task[None]] = set()  # suspect pods being replaced
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None
        self._stopping = False
        self._next_sweep = self._next_retire = self._next_send = 0.0
        self.version = 0
        # seconds with nothing queued or in flight (the rollouts wait: for a request in sync
        # mode, for weights in async), counted at each dispatch pass; a settle wakes one
        self.rollout_idle_s, self._idle_since = 0.0, time.monotonic()
        self.last_progress = time.monotonic()
        self.last_loop_error: str | None = None
        self.ledger = Ledger(self.config.name)  # counts and metrics of settled attempts
        self.counts = self.ledger.counts

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
        """Wait until ``groups`` training groups in all have been buffered or dropped; the
        records of those settled so far have reached the buffer when this returns."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while self.counts["groups_buffered"] + self.counts["groups_dropped"] < groups:
            if deadline is not None and time.monotonic() > deadline:
                break
            self._settled.clear()
            try:
                await asyncio.wait_for(self._settled.wait(), 1.0)
            except TimeoutError:
                pass
        try:
            await self._flush()
        except Exception as e:  # the buffer is gone: the loop reports it too
            log.warning("sending the buffer its records: %r", e)
        return {k: self.counts[k] for k in ("groups_buffered", "groups_dropped")}

    def set_version(self, version: int) -> None:
        self.version = version
        metrics.gauge("version", version, run=self.config.name)

    def pod_actors(self) -> list[Any]:
        """The live pods' actor handles (for operators and fault-injection tests)."""
        return [pod.actor for pod in self.pool.pods]

    def stats(self) -> dict[str, Any]:
        return report.stats(self)

    def stall_report(self) -> str:
        """What collection is waiting for, for a driver that saw no progress for too long."""
        return report.stall_report(self)

    def draw_state(self) -> dict[str, Any]:
        """The harness draw's state, for a checkpoint (:class:`HarnessDraw`)."""
        return self.draw.state()

    async def evaluate(
        self, tasks: list[dict], temperature: float, harness: str | None = None
    ) -> list[Episode]:
        """One attempt of each task in ``harness`` (default: the run's first) (retried on
        failure like any other); nothing is buffered."""
        futures = []
        for task in tasks:
            group = self._open_group(task, 1, harness or self.config.harnesses[0])
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
        running, self._running = self._running, {}
        for future, (attempt, _) in running.items():
            future.remove_done_callback(self._collected)
            future.cancel()
            attempt.group.running -= 1
        for task in self._replacing:
            task.cancel()
        await asyncio.gather(*self._replacing, return_exceptions=True)
        await self.pool.close()
        # Groups cut short: their finished episodes go to disk as dropped ("interrupted").
        for group in list(self._groups.values()):
            del self._groups[group.group_id]
            if group.result is not None:
                group.result.cancel()
            elif group.episodes:
                episodes = [group.episodes[s] for s in sorted(group.episodes)]
                self.counts["groups_interrupted"] += 1
                self.outbox.drop(episodes, group.group_id, "interrupted")
        await self._flush()
        return self.stats()

    async def _flush(self) -> None:
        """Send the buffer what it is owed and wait until it has it; flush the metrics."""
        self.ledger.tally.flush()
        sent = self.outbox.send()
        if sent is not None:
            await sent

    # -- the dispatch loop --------------------------------------------------------------------

    def _next_task(self) -> dict[str, Any]:
        task = self._order[self.cursor % len(self._order)]
        self.cursor += 1
        return task

    def _open_group(self, task: dict, size: int, harness: str) -> Group:
        group = Group(f"g{uuid.uuid4().hex[:12]}", task, size, harness)
        self._groups[group.group_id] = group
        for slot in range(size):
            self._queue(Attempt(group, slot, 0))
        return group

    def _queue(self, attempt: Attempt) -> None:
        attempt.group.queued += 1
        self._pending.append(attempt)

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
            try:  # records waiting go out within SEND_S, wake or not
                await asyncio.wait_for(self._wake.wait(), SEND_S if self.outbox.events else 0.5)
            except TimeoutError:
                pass

    async def _dispatch_once(self) -> None:
        """One pass: open the groups the budget allows, lend an idle pod to each queued attempt
        there is one for (and start more pods in the background for the rest), journal those
        attempts, send the buffer what it is owed when SEND_S has passed since the last call or
        SEND_RECORDS records wait (one call for all), then start the attempts."""
        self.counts["dispatch_passes"] += 1
        if self._budget > 0 and not await self.buffer.full.remote():
            while self._budget > 0:
                self._budget -= 1
                self.counts["groups_started"] += 1
                self._open_group(self._next_task(), self.rollout.group_size, self.draw.draw())
        self._launch()
        if self._pending and not self._stopping:  # more pods, started beside the dispatch
            self.pool.grow(len(self._pending), self._wake.set)
        self._idle_tick()
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_S
            self._sweep(now)
            self.ledger.tally.flush()
            metrics.gauge("queue", len(self._pending), run=self.config.name)
            metrics.gauge("pods", len(self.pool.pods), run=self.config.name)
        if now >= self._next_retire and len(self.pool.pods) > self.rollout.min_pods:
            self._next_retire = now + RETIRE_S
            await self.pool.retire_idle()

    def _idle_tick(self) -> None:
        """Add the idle time up to this pass, and note whether the rollouts wait from now."""
        now, idle = time.monotonic(), not (self._pending or self._running)
        if self._idle_since is not None:
            self.rollout_idle_s += now - self._idle_since
        self._idle_since = now if idle else None

    def _launch(self, freed: Pod | None = None) -> None:
        """Lend an idle pod to each queued attempt there is one for, journal them, send the
        buffer what it is owed if due, and start them. Nothing awaits: the dispatch pass calls
        it, and so does a settled attempt's callback with the pod it ``freed`` (still marked
        busy), which takes the next queued attempt at once, not at the next pass."""
        lent: list[tuple[Pod, Attempt]] = []
        if freed is not None:
            if self._pending and not self._stopping:
                lent.append((freed, self._take()))
            else:
                self.pool.release(freed)
        while self._pending and not self._stopping and self._may_lend(len(lent)):
            pod = self.pool.idle_pod()
            if pod is None:
                break
            lent.append((pod, self._take()))
        for _, attempt in lent:  # journaled before anything the attempt produces
            if attempt.group.result is None:
                self.outbox.dispatched(attempt.group.group_id, attempt.episode_id, attempt.number)
        now = time.monotonic()
        if len(self.outbox.events) >= SEND_RECORDS or now >= self._next_send:
            self._next_send = now + SEND_S
            self.outbox.send()
        for pod, attempt in lent:
            self._start(pod, attempt)

    def _take(self) -> Attempt:
        """The next queued attempt, now running."""
        attempt = self._pending.popleft()
        attempt.group.queued -= 1
        attempt.group.running += 1
        return attempt

    def _may_lend(self, lent: int) -> bool:
        """Whether a pod may be idle (not every pod is busy): a pool of busy pods is not
        scanned for an idle one at every pass."""
        return len(self._running) + lent < len(self.pool.pods)

    # -- one attempt --------------------------------------------------------------------------

    def _start(self, pod: Pod, attempt: Attempt) -> None:
        """Call the pod; the call's future settles the attempt when it is done (no task per
        attempt; :meth:`_sweep` cancels it when it outlives ``attempt_timeout_s``)."""
        group = attempt.group
        attempt.pod, attempt.started = pod.name, time.monotonic()
        self.counts["attempts_dispatched"] += 1
        temperature = self.config.eval_temperature if group.result else self.config.temperature
        spec = {
            "task": group.task,
            "harness": group.harness,
            "harness_options": self.config.options_for(group.harness),
            "attempt": attempt.number,
            "episode_id": attempt.episode_id,
            "temperature": temperature,
            "attempt_timeout_s": self.rollout.attempt_timeout_s,  # the Policy's waits fit in it
        }
        try:
            call = pod.actor.run.remote(spec)  # HarnessPod.run: one argument, cheap to submit
            future = asyncio.wrap_future(call.future())
        except Exception as e:  # the call could not even be made: settles like any failure
            future = asyncio.get_running_loop().create_future()
            future.set_exception(e)
        self._running[future] = (attempt, pod)
        future.add_done_callback(self._collected)

    def _sweep(self, now: float) -> None:
        """Cancel the calls of attempts past ``attempt_timeout_s`` (they settle as timeouts)."""
        limit = self.rollout.attempt_timeout_s
        for future, (attempt, _) in list(self._running.items()):
            if now - attempt.started > limit:
                future.cancel()

    def _collected(self, future: asyncio.Future[Any]) -> None:
        entry = self._running.pop(future, None)
        if entry is None:
            return
        attempt, pod = entry
        try:
            episode, reason, error = outcome(future, self.rollout.policy_failures)
        except Exception as e:  # settle the slot all the same
            self.counts["settle_errors"] += 1
            episode, reason, error = None, "scheduler_error", e
        if error is not None:
            log.warning("attempt %s/%s: %s: %r", attempt.episode_id, attempt.number, reason, error)
            if episode is None:  # the failure record says what raised
                episode = failed_record(attempt, reason or "unknown")
                episode.failure_detail = f"{type(error).__name__}: {error}"[:2000]
        if reason in POD_SUSPECT:  # the pod leaves the pool first (rare: a task for it)
            task = asyncio.get_running_loop().create_task(
                self._replace_and_settle(pod, attempt, episode, reason)
            )
            self._replacing.add(task)
            task.add_done_callback(self._replacing.discard)
            return
        attempt.group.running -= 1
        self._settle(attempt, episode, reason)
        try:  # the freed pod takes the next queued attempt now, or goes back to the pool
            self._launch(freed=pod)
        except Exception as e:  # the dispatch pass will try again
            pod.busy = False
            self._loop_error(e)

    async def _replace_and_settle(
        self, pod: Pod, attempt: Attempt, episode: Episode | None, reason: str
    ) -> None:
        try:
            await self.pool.replace(pod)
        except Exception as e:
            log.warning("replacing %s: %r", pod.name, e)
        attempt.group.running -= 1
        self._settle(attempt, episode, reason)

    def _settle(self, attempt: Attempt, episode: Episode | None, reason: str | None) -> None:
        if attempt.settled:  # never twice, whatever path reached here
            return
        attempt.settled = True
        try:
            self._settle_once(attempt, episode, reason)
        except Exception as e:  # a bug in the bookkeeping: counted, the loop goes on
            self.counts["settle_errors"] += 1
            log.error("settle of %s/%s: %r", attempt.episode_id, attempt.number, e)
        self._wake.set()

    def _settle_once(self, attempt: Attempt, episode: Episode | None, reason: str | None) -> None:
        group, slot = attempt.group, attempt.slot
        self.last_progress = time.monotonic()
        try:
            self.ledger.record(episode, reason, group.harness)
        except Exception as e:  # bookkeeping never stops a settle
            self.counts["settle_errors"] += 1
            log.warning("settle of %s: %r", attempt.episode_id, e)
        if reason is None and episode is not None:
            group.episodes[slot] = episode
        else:
            reason = reason or "unknown"
            record = episode or failed_record(attempt, reason)
            self.outbox.failure(record, group.group_id, reason)
            used = group.retries.get(slot, 0)
            if used < self.rollout.max_retries and group.dropped is None and not self._stopping:
                group.retries[slot] = used + 1
                self.counts["attempts_retried"] += 1
                self._queue(Attempt(group, slot, attempt.number + 1))
            elif group.dropped is None:
                group.dropped = f"{reason} after {used} retries"
                if group.queued:
                    self._pending = deque(p for p in self._pending if p.group is not group)
                    group.queued = 0
        self._maybe_close(group)

    def _maybe_close(self, group: Group) -> None:
        if group.running or group.queued:
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
            self.ledger.tally.inc("groups", outcome="dropped", run=self.config.name)
            self.outbox.drop(episodes, group.group_id, group.dropped)
        else:
            self.draw.record(group.harness, [ep.reward for ep in episodes])
            self.counts["groups_buffered"] += 1
            self.ledger.tally.inc("groups", outcome="buffered", run=self.config.name)
            self.outbox.put(episodes, group.group_id)
