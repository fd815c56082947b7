"""ReplayBuffer: finished, rewarded GRPO groups, held as Ray object references.

A plain class; ``ray.remote(ReplayBuffer)`` where it is created. Every episode that reaches it is
appended to ``<run_dir>/episodes/episodes.jsonl`` (and flushed to the OS) before the group is
acknowledged, so a crash loses nothing that had finished; dropped groups are appended to
``dropped.jsonl`` with their reason, failed attempts to ``failures.jsonl`` with
theirs. The trainer samples whole groups, oldest first; a group
whose oldest turn is more than ``max_staleness`` policy versions behind the trainer is evicted
and counted instead of trained on.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import deque
from pathlib import Path
from typing import Any

from forge.types import Episode


def group_version(group: list[Episode]) -> int:
    """The oldest policy version that produced any token of the group."""
    versions = [t.policy_version for ep in group for t in ep.turns]
    return min(versions) if versions else 0


class ReplayBuffer:
    def __init__(self, run_dir: str, capacity: int = 64, max_staleness: int = 1) -> None:
        self.capacity = capacity
        self.max_staleness = max_staleness
        self.dir = Path(run_dir) / "episodes"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._episodes = open(self.dir / "episodes.jsonl", "a", buffering=1)  # noqa: SIM115
        self._dropped = open(self.dir / "dropped.jsonl", "a", buffering=1)  # noqa: SIM115
        self._failures = open(self.dir / "failures.jsonl", "a", buffering=1)  # noqa: SIM115
        self._groups: deque[tuple[int, list[Any], str]] = deque()
        self._arrived = asyncio.Event()
        self.counts = {
            "groups_in": 0,
            "episodes_written": 0,
            "groups_sampled": 0,
            "groups_evicted_stale": 0,
            "groups_dropped": 0,
            "episodes_dropped": 0,
            "attempts_failed": 0,
        }

    def _write(self, f: Any, record: dict[str, Any]) -> None:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())

    def put(self, group: list[Episode], group_id: str) -> int:
        """Store a finished group; returns the buffer size. Episodes reach disk first."""
        import ray

        for ep in group:
            self._write(self._episodes, {"group_id": group_id, **ep.to_dict()})
        self.counts["episodes_written"] += len(group)
        self.counts["groups_in"] += 1
        self._groups.append((group_version(group), [ray.put(group)], group_id))
        self._arrived.set()
        return len(self._groups)

    def drop(self, group: list[Episode], group_id: str, reason: str) -> None:
        """A group that will not be trained on (a failure outlived its retries): logged, counted."""
        record = {"group_id": group_id, "reason": reason, "episodes": [e.to_dict() for e in group]}
        self._write(self._dropped, record)
        self.counts["groups_dropped"] += 1
        self.counts["episodes_dropped"] += len(group)

    def log_failure(self, episode: Episode, group_id: str, reason: str) -> None:
        """A failed attempt (retried, or part of a dropped group): on disk with its reason."""
        self._write(self._failures, {"group_id": group_id, "reason": reason, **episode.to_dict()})
        self.counts["attempts_failed"] += 1

    def _evict_stale(self, trainer_version: int) -> None:
        keep = deque()
        for item in self._groups:
            if trainer_version - item[0] > self.max_staleness:
                self.counts["groups_evicted_stale"] += 1
                self._write(self._dropped, {"group_id": item[2], "reason": "stale"})
            else:
                keep.append(item)
        self._groups = keep

    async def sample(
        self, n: int, trainer_version: int, timeout_s: float | None = None
    ) -> list[list[Any]]:
        """Up to ``n`` whole groups (each ``[ObjectRef]``), oldest first, none stale; waits up
        to ``timeout_s`` for ``n`` to be there (None: return what there is now)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        while True:
            self._evict_stale(trainer_version)
            if len(self._groups) >= n or deadline is None or loop.time() >= deadline:
                break
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), deadline - loop.time())
            except TimeoutError:
                pass
        out = [self._groups.popleft() for _ in range(min(n, len(self._groups)))]
        self.counts["groups_sampled"] += len(out)
        return [box for _, box, _ in out]

    def size(self) -> int:
        return len(self._groups)

    def full(self) -> bool:
        return len(self._groups) >= self.capacity

    def stats(self) -> dict[str, int]:
        return {**self.counts, "size": len(self._groups)}

    def close(self) -> None:
        for f in (self._episodes, self._dropped, self._failures):
            f.close()
