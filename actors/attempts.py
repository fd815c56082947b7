"""What the Scheduler tracks of its work: GRPO groups, their attempts, and why an attempt failed."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import ray.exceptions as rx

from forge.types import Episode

# Reasons for which the pod is replaced: it may be dead, stuck or in an unknown state.
POD_SUSPECT = frozenset(
    {"attempt_timeout", "pod_died", "pod_error", "object_lost", "node_died", "oom", "ray_error"}
)


def infra_reason(error: BaseException) -> str:
    """The failure reason for an exception that ended an attempt's call."""
    if isinstance(error, TimeoutError):
        return "attempt_timeout"
    for kind, reason in (
        (rx.OutOfMemoryError, "oom"),
        (rx.NodeDiedError, "node_died"),
        (rx.ObjectLostError, "object_lost"),
        (rx.RayActorError, "pod_died"),
        (rx.RayTaskError, "pod_error"),
        (rx.RayError, "ray_error"),
    ):
        if isinstance(error, kind):
            return reason
    return "scheduler_error"


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
class Attempt:
    group: Group
    slot: int
    number: int
    pod: str = ""
    started: float = 0.0

    @property
    def episode_id(self) -> str:
        return f"{self.group.group_id}-{self.slot}"


def add(counts: dict[str, int], key: str, n: int = 1) -> None:
    counts[key] = counts.get(key, 0) + n
