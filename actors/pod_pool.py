"""The Scheduler's elastic pool of HarnessPod actors: start (with a deadline), lend, retire.

New pods start in the background (:meth:`PodPool.grow`): attempts go to the pods already
there while others start, so a pod that is slow to schedule holds up nothing. A pod that cannot
be created or started within ``pod_start_timeout_s`` (its constructor or ``start`` raised, or
Ray never found room to schedule it) is killed and counted, and further starts back off: the
attempts wait in the queue, and the driver's stall report names the failed starts and the last
error.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray

from forge.config import RunConfig
from forge.sandboxes.registry import reap_sandboxes

log = logging.getLogger(__name__)
START_BACKOFF_S = (1.0, 30.0)  # wait after a failed start: doubles from the first to the second


@dataclass
class Pod:
    name: str
    actor: Any
    busy: bool = False
    idle_since: float = field(default_factory=time.monotonic)


class PodPool:
    def __init__(self, config: RunConfig, policy: Any, pod_cls: type) -> None:
        self.config = config
        self.rollout = config.rollout
        self.policy = policy
        self.pod_cls = pod_cls
        self.pods: list[Pod] = []
        self._ids = itertools.count()
        self.counts = {"pods_started": 0, "pods_replaced": 0, "pods_retired": 0}
        self.failed_starts = 0
        self.last_start_error: str | None = None
        self._next_try = 0.0  # monotonic time before which no new pod is tried (after failures)
        self._backoff = START_BACKOFF_S[0]
        self._starting: set[asyncio.Task[Pod | None]] = set()

    async def fill(self) -> None:
        """Start pods up to ``min_pods``, all at once (failures are counted, not raised)."""
        wanted = self.rollout.min_pods - len(self.pods)
        await asyncio.gather(*(self.new_pod() for _ in range(wanted)))

    def idle_pod(self) -> Pod | None:
        """An idle pod (marked busy), or None."""
        for pod in self.pods:
            if not pod.busy:
                pod.busy = True
                return pod
        return None

    def grow(self, wanted: int, ready: Callable[[], None]) -> None:
        """Start up to ``wanted`` more pods in the background (never past ``max_pods``,
        counting those starting); ``ready()`` is called as each one joins the pool or fails.
        Nothing waits on a start: attempts go to the pods that are there meanwhile."""
        starting = len(self._starting)
        room = self.rollout.max_pods - len(self.pods) - starting
        for _ in range(min(wanted - starting, room)):
            if time.monotonic() < self._next_try:
                return
            task = asyncio.get_running_loop().create_task(self.new_pod())
            self._starting.add(task)
            task.add_done_callback(lambda t: (self._starting.discard(t), ready()))

    async def new_pod(self) -> Pod | None:
        if time.monotonic() < self._next_try:
            return None
        name = f"pod-{next(self._ids)}"
        actor = None
        try:
            actor = (
                ray.remote(self.pod_cls)
                .options(**self.config.actor_options("harness_pod"), max_concurrency=1000)
                .remote(
                    self.policy,
                    pod_id=name,
                    run=self.config.name,
                    model=self.config.policy.engine.model,
                    proxy=self.config.proxy.model_dump(),
                    sandbox=self.config.sandbox.model_dump(),
                )
            )
            await asyncio.wait_for(actor.start.remote(), self.rollout.pod_start_timeout_s)
        except asyncio.CancelledError:  # the pool closed while it started
            if actor is not None:
                self._kill(actor)
            raise
        except Exception as e:  # constructor or start raised, or never scheduled in time
            if isinstance(e, TimeoutError):
                why = f"not started within {self.rollout.pod_start_timeout_s:g}s"
            else:
                why = f"{type(e).__name__}: {e}"
            self.failed_starts += 1
            self.last_start_error = f"{name}: {why}"[:2000]
            self._next_try = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, START_BACKOFF_S[1])
            log.warning(
                "HarnessPod %s failed to start (%d so far): %s", name, self.failed_starts, why
            )
            if actor is not None:
                self._kill(actor)
            return None
        self._backoff = START_BACKOFF_S[0]
        pod = Pod(name, actor)
        self.pods.append(pod)
        self.counts["pods_started"] += 1
        return pod

    def release(self, pod: Pod) -> None:
        pod.busy = False
        pod.idle_since = time.monotonic()

    async def replace(self, pod: Pod) -> None:
        """A pod that cannot be trusted any more (died, timed out, erred) leaves the pool, and
        the sandboxes it left behind are reaped (those whose creating process is gone, and on
        kubernetes every pod labelled with its name: its heartbeat would vouch for them until
        it expired)."""
        await self.retire(pod)
        self.counts["pods_replaced"] += 1
        try:
            await asyncio.to_thread(
                reap_sandboxes,
                self.config.sandbox,
                self.config.name,
                orphans_only=True,
                dead_pods=(pod.name,),
            )
        except Exception as e:
            log.warning("reaping the sandboxes of %s: %r", pod.name, e)

    async def retire(self, pod: Pod) -> None:
        if pod in self.pods:
            self.pods.remove(pod)
        try:
            await asyncio.wait_for(pod.actor.stop.remote(), 10)
        except Exception:  # a dead or stuck pod is killed all the same
            pass
        self._kill(pod.actor)

    async def retire_idle(self) -> None:
        now = time.monotonic()
        for pod in list(self.pods):
            extra = len(self.pods) > self.rollout.min_pods
            if extra and not pod.busy and now - pod.idle_since > self.rollout.pod_idle_s:
                await self.retire(pod)
                self.counts["pods_retired"] += 1

    async def close(self) -> None:
        starting, self._starting = list(self._starting), set()
        for task in starting:
            task.cancel()
        await asyncio.gather(*starting, return_exceptions=True)
        pods, self.pods = self.pods, []
        for pod in pods:
            await self.retire(pod)

    @staticmethod
    def _kill(actor: Any) -> None:
        try:
            ray.kill(actor, no_restart=True)
        except Exception as e:  # already gone
            log.debug("kill of a pod actor: %s", e)
