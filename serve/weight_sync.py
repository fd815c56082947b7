"""WeightSync: how new weights travel from the trainer to every Policy replica.

Every replica subscribes to a small ``WeightStore`` actor by long poll and acknowledges each
version it swaps in; a publisher returns when every live replica runs the new version. What the
store hands out depends on the strategy:

- ``ObjectStoreWeightSync`` (CPUs, and GPUs without NCCL): the trainer's weights, put into Ray's
  object store once; each replica fetches them and swaps them in (``Policy.update_weights``).
  Replicas that Serve starts later fetch the latest weights when they subscribe.
- ``CollectiveWeightSync`` (NCCL on GPUs, gloo on CPUs): a message saying where a process group
  meets; the trainer broadcasts bucketed tensors as rank 0 and each replica's model workers
  receive them (``Policy.receive_weights``, :mod:`serve.collective`). The group is made once and
  made anew when the set of live replicas changes; a replica that Serve starts later serves its
  initial weights (and says so in each completion's version) until the next publish takes it in.

The source of weights is an actor with the Trainer's ``get_weights``, ``collective_endpoint`` and
``broadcast_weights`` methods.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

logger = logging.getLogger("forge.weight_sync")

HEARTBEAT_S = 10.0  # a replica re-polls at least this often; silent for 3x this = gone


class WeightSync(Protocol):
    def publish(self, source: Any, version: int) -> dict[str, float]:
        """Make ``source``'s weights live as ``version`` on every replica; returns timings."""
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


def _check_acks(store: Any, version: int, replicas: int) -> None:
    import ray

    done = ray.get(store.wait_acks.remote(version, replicas))
    if done < replicas:
        raise RuntimeError(
            f"weight sync: only {done} of {replicas} Policy replicas took version {version}"
        )


class ObjectStoreWeightSync:
    """Publish through the object store: the source's weights, put there once."""

    def __init__(self, store: Any, replicas: int) -> None:
        self.store = store
        self.replicas = replicas

    def publish(self, source: Any, version: int) -> dict[str, float]:
        import ray

        t0 = time.perf_counter()
        ray.get(self.store.publish.remote([source.get_weights.remote()], version))
        _check_acks(self.store, version, self.replicas)
        return {"weight_sync_s": time.perf_counter() - t0}


class CollectiveWeightSync:
    """Publish by broadcast from the source (rank 0) to every replica's workers."""

    def __init__(
        self,
        store: Any,
        replicas: int,
        backend: str = "gloo",
        bucket_mib: float = 256.0,
        timeout_s: float = 300.0,
        ranks_per_replica: int = 1,
    ) -> None:
        self.store = store
        self.replicas = replicas
        self.backend = backend
        self.bucket_bytes = int(bucket_mib * 2**20)
        self.timeout_s = timeout_s
        self.ranks_per_replica = ranks_per_replica
        self.group: dict[str, Any] | None = None  # the message's group part, while it holds
        self.epoch = 0

    def _members(self) -> list[str]:
        import ray

        deadline = time.monotonic() + self.timeout_s
        while True:
            live = sorted(ray.get(self.store.replicas.remote()))
            if len(live) >= self.replicas or time.monotonic() > deadline:
                return live
            time.sleep(0.05)

    def _new_group(self, source: Any, members: list[str]) -> dict[str, Any]:
        import ray

        endpoint = ray.get(source.collective_endpoint.remote())
        self.epoch += 1
        n = self.ranks_per_replica
        return {
            **endpoint,  # address, port, group (id), tensors
            "epoch": self.epoch,  # groups this publisher made
            "world_size": 1 + n * len(members),
            "ranks": {r: 1 + n * i for i, r in enumerate(members)},
            "backend": self.backend,
            "bucket_bytes": self.bucket_bytes,
            "timeout_s": self.timeout_s,
        }

    def publish(self, source: Any, version: int) -> dict[str, float]:
        import ray

        t0 = time.perf_counter()
        members = self._members()
        if self.group is None or sorted(self.group["ranks"]) != members:
            self.group = self._new_group(source, members)
        message = self.group
        sending = source.broadcast_weights.remote(message)
        ray.get(self.store.publish.remote([message], version))
        try:
            sent = ray.get(sending)
        except Exception:
            self.group = None  # the next publish makes a fresh group
            raise
        _check_acks(self.store, version, len(members))
        return {"weight_sync_s": time.perf_counter() - t0, "weight_sync_mib": sent / 2**20}


def make_weight_sync(config: Any, store: Any, policy: Any, trainer_device: str) -> WeightSync:
    """The strategy ``config`` (a ``WeightSyncConfig``) names, publishing into ``store`` for the
    replicas of ``policy`` (a ``PolicyConfig``)."""
    if config.strategy == "object_store":
        return ObjectStoreWeightSync(store, policy.replicas)
    backend = config.backend
    if backend == "auto":
        backend = "nccl" if trainer_device.startswith("cuda") else "gloo"
    workers = policy.engine.tensor_parallel_size if policy.engine.name == "vllm" else 1
    return CollectiveWeightSync(
        store, policy.replicas, backend, config.bucket_mib, config.timeout_s, workers
    )


async def subscribe(policy: Any, store_name: str, replica: str) -> None:
    """A Policy replica's loop: take every newer version (runs until the store is gone)."""
    import ray

    store = ray.get_actor(store_name)
    seen = policy.version
    while True:
        try:
            box, version = await store.wait_newer.remote(seen, replica)
        except ray.exceptions.RayActorError:
            return  # the run is over
        if box is None:
            continue
        seen = version
        item = box[0]
        try:
            if isinstance(item, dict):  # a collective broadcast
                rank = item["ranks"].get(replica)
                if rank is None:
                    continue  # made before this replica subscribed: the next one takes it in
                await policy.receive_weights(item, rank, version)
            else:
                await policy.update_weights(await item, version)
        except Exception as e:  # the publisher sees the missing ack and reports it
            logger.error("replica %s: weights of version %d not taken: %r", replica, version, e)
            continue
        store.ack.remote(replica, version)
