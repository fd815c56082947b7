"""WeightSync: how new weights travel from the trainer to every Policy replica.

``ObjectStoreWeightSync`` (CPUs, and GPUs without NCCL): the trainer's weights are put into the
Ray object store once; every replica, subscribed to a small ``WeightStore`` actor by long poll,
fetches them, swaps them in between batches (``Policy.update_weights``) and acknowledges; the
publisher returns when every live replica runs the new version. Replicas that Serve starts later
fetch the latest weights when they subscribe, so no replica serves stale weights for long. The
NCCL broadcast strategy plugs in behind the same ``WeightSync`` protocol.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

HEARTBEAT_S = 10.0  # a replica re-polls at least this often; silent for 3x this = gone


class WeightSync(Protocol):
    def publish(self, weights: Any, version: int) -> dict[str, float]:
        """Make ``version`` live on every replica; returns timings (seconds)."""
        ...


class WeightStore:
    """The rendezvous between publisher and replicas (a plain class; a named Ray actor)."""

    def __init__(self) -> None:
        self.version = 0
        self._box: list[Any] | None = None  # [ObjectRef] of the latest weights
        self._changed = asyncio.Event()
        self._acked: dict[str, int] = {}
        self._seen: dict[str, float] = {}

    async def publish(self, box: list[Any], version: int) -> None:
        if version <= self.version:
            raise ValueError(f"version {version} is not newer than {self.version}")
        self._box, self.version = box, version
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_newer(
        self, version: int, replica: str, timeout_s: float = HEARTBEAT_S
    ) -> tuple[list[Any] | None, int]:
        """Return ``([weights_ref], v)`` once a version newer than ``version`` exists, or
        ``(None, version)`` after ``timeout_s`` (a heartbeat)."""
        self._seen[replica] = time.monotonic()
        self._acked.setdefault(replica, version)
        if self.version <= version:
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), timeout_s)
            except TimeoutError:
                return None, version
        return self._box, self.version

    def ack(self, replica: str, version: int) -> None:
        self._acked[replica] = version
        self._seen[replica] = time.monotonic()

    def replicas(self) -> dict[str, int]:
        now = time.monotonic()
        return {r: v for r, v in self._acked.items() if now - self._seen[r] < 3 * HEARTBEAT_S}

    async def wait_acks(self, version: int, expected: int, timeout_s: float = 300.0) -> int:
        """Wait until ``expected`` live replicas run ``version`` (or newer); returns how many."""
        deadline = time.monotonic() + timeout_s
        while True:
            live = self.replicas()
            done = sum(1 for v in live.values() if v >= version)
            if done >= expected or time.monotonic() > deadline:
                return done
            await asyncio.sleep(0.005)


class ObjectStoreWeightSync:
    """Publish through the object store: one ``ray.put`` (done by the caller or here)."""

    def __init__(self, store: Any, replicas: int) -> None:
        self.store = store
        self.replicas = replicas

    def publish(self, weights: Any, version: int) -> dict[str, float]:
        import ray

        t0 = time.perf_counter()
        ref = weights if isinstance(weights, ray.ObjectRef) else ray.put(weights)
        ray.get(self.store.publish.remote([ref], version))
        done = ray.get(self.store.wait_acks.remote(version, self.replicas))
        if done < self.replicas:
            raise RuntimeError(
                f"weight sync: only {done} of {self.replicas} Policy replicas took version "
                f"{version}"
            )
        return {"weight_sync_s": time.perf_counter() - t0}


async def subscribe(policy: Any, store_name: str, replica: str) -> None:
    """A Policy replica's loop: fetch every newer version and swap it in (runs forever)."""
    import ray

    store = ray.get_actor(store_name)
    while True:
        try:
            box, version = await store.wait_newer.remote(policy.version, replica)
        except ray.exceptions.RayActorError:
            return  # the run is over
        if box is None:
            continue
        state = await box[0]
        await policy.update_weights(state, version)
        store.ack.remote(replica, version)
