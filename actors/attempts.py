"""What the Scheduler tracks of its work: GRPO groups, their attempts, why an attempt failed,
and what it owes the ReplayBuffer and the metrics (sent in batches, not one call per attempt)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

import ray.exceptions as rx

from forge.observe import metrics
from forge.types import Episode

log = logging.getLogger(__name__)

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
    harness: str = "react"  # every attempt of a group plays in one harness
    episodes: dict[int, Episode] = field(default_factory=dict)
    retries: dict[int, int] = field(default_factory=dict)
    running: int = 0
    queued: int = 0  # attempts of this group waiting in the scheduler's queue
    dropped: str | None = None
    result: asyncio.Future[list[Episode]] | None = None  # evaluation groups only


@dataclass
class Attempt:
    group: Group
    slot: int
    number: int
    pod: str = ""
    started: float = 0.0
    settled: bool = False  # an attempt settles once, whatever path reaches it

    @property
    def episode_id(self) -> str:
        return f"{self.group.group_id}-{self.slot}"


def failed_record(attempt: Attempt, reason: str) -> Episode:
    """The record of an attempt that produced no episode."""
    return Episode(
        episode_id=attempt.episode_id,
        task_id=attempt.group.task.get("id", "?"),
        attempt=attempt.number,
        harness=attempt.group.harness,
        reward=0.0,
        status="failed",
        failure=reason,
        provenance={"harness": attempt.group.harness},
    )


def add(counts: dict[str, int], key: str, n: int = 1) -> None:
    counts[key] = counts.get(key, 0) + n


def outcome(
    future: asyncio.Future[Any], policy_failures: str
) -> tuple[Episode | None, str | None, BaseException | None]:
    """What a finished pod call gave: its episode, why the attempt failed (if it did), and the
    error that ended the call (if one did; a cancelled call is one that outlived its timeout)."""
    if future.cancelled():
        error: BaseException | None = TimeoutError("attempt_timeout_s passed")
    else:
        error = future.exception()
    if error is None:
        try:
            episode = future.result()
            reason = episode.failure
            if reason is None and episode.truncated and policy_failures == "drop":
                reason = episode.truncated
            return episode, reason, None
        except Exception as e:  # not an Episode: a bug in the pod
            error = e
    return None, infra_reason(error), error


class Ledger:
    """The Scheduler's counts, and the metrics of each settled attempt (summed in a
    :class:`Tally` and flushed with it)."""

    def __init__(self, run: str) -> None:
        self.tags = {"run": run}
        self.tally = Tally()
        self.counts: dict[str, int] = dict.fromkeys(
            (
                "groups_started",
                "groups_buffered",
                "groups_dropped",
                "groups_interrupted",
                "attempts_dispatched",
                "attempts_ok",
                "attempts_failed",
                "attempts_retried",
                "attempts_truncated",
                "segments",
                "loop_errors",
                "settle_errors",
                "dispatch_passes",
            ),
            0,
        )
        self.failures: dict[str, int] = {}
        self.truncations: dict[str, int] = {}
        self.resets: dict[str, int] = {}
        self.tokens = 0
        self.by_harness: dict[str, dict[str, Any]] = {}  # the same counts, per harness

    def _harness(self, harness: str) -> dict[str, Any]:
        return self.by_harness.setdefault(
            harness,
            {
                "attempts_ok": 0,
                "attempts_failed": 0,
                "attempts_truncated": 0,
                "segments": 0,
                "turns": 0,
                "sampled_tokens": 0,
                "truncations": {},
                "failures": {},
                "resets": {},
            },
        )

    def reasons(self) -> dict[str, dict[str, int]]:
        return {
            "failures": dict(self.failures),
            "truncations": dict(self.truncations),
            "resets": dict(self.resets),
        }

    def record(self, episode: Episode | None, reason: str | None, harness: str = "") -> None:
        """Counts and metrics of a settled attempt (of ``harness``: counted apart too)."""
        tags = self.tags
        mine = self._harness(harness or (episode.harness if episode else "") or "?")
        if reason is None and episode is not None:
            self._count_episode(mine, episode)
            self.counts["attempts_ok"] += 1
            self.tally.inc("episodes", status="ok", **tags)
            if episode.truncated:
                self.counts["attempts_truncated"] += 1
                add(self.truncations, episode.truncated)
                self.tally.inc("truncations", reason=episode.truncated, **tags)
            self.counts["segments"] += len(episode.segments)
            for why, n in episode.reset_reasons.items():
                add(self.resets, why, n)
            tokens = sum(len(t.completion_ids) for t in episode.turns)
            self.tokens += tokens
            self.tally.inc("tokens", tokens, **tags)
            for turn in episode.turns:
                metrics.observe("turn_latency", turn.latency_s * 1000, **tags)
        else:
            mine["attempts_failed"] += 1
            add(mine["failures"], reason or "unknown")
            self.counts["attempts_failed"] += 1
            add(self.failures, reason or "unknown")
            self.tally.inc("episodes", status="failed", **tags)
            self.tally.inc("failures", reason=reason or "unknown", **tags)

    @staticmethod
    def _count_episode(mine: dict[str, Any], episode: Episode) -> None:
        mine["attempts_ok"] += 1
        if episode.truncated:
            mine["attempts_truncated"] += 1
            add(mine["truncations"], episode.truncated)
        mine["segments"] += len(episode.segments)
        mine["turns"] += len(episode.turns)
        mine["sampled_tokens"] += sum(len(t.completion_ids) for t in episode.turns)
        for why, n in episode.reset_reasons.items():
            add(mine["resets"], why, n)


class Outbox:
    """Records for the ReplayBuffer, kept in order and sent many to one actor call
    (:meth:`actors.replay_buffer.ReplayBuffer.record`) instead of one call per attempt.

    The scheduler sends before it starts the attempts it journals, so an attempt's
    ``dispatched`` record always reaches the buffer before anything the attempt produced."""

    def __init__(self, buffer: Any) -> None:
        self.buffer = buffer
        self.events: list[tuple[Any, ...]] = []
        self.calls = 0
        self.lost = 0  # records Ray could not send (counted and logged, never silent)

    def dispatched(self, group_id: str, episode_id: str, attempt: int) -> None:
        self.events.append(("dispatched", group_id, episode_id, attempt))

    def failure(self, episode: Episode, group_id: str, reason: str) -> None:
        self.events.append(("failure", episode, group_id, reason))

    def put(self, episodes: list[Episode], group_id: str) -> None:
        self.events.append(("put", episodes, group_id))

    def drop(self, episodes: list[Episode], group_id: str, reason: str) -> None:
        self.events.append(("drop", episodes, group_id, reason))

    def send(self) -> Any | None:
        """Send what is waiting (one actor call); the call's ObjectRef, or None."""
        if not self.events:
            return None
        events, self.events = self.events, []
        self.calls += 1
        try:
            return self.buffer.record.remote(events)
        except Exception as e:  # one record Ray cannot serialize: the others still go
            log.error("sending %d buffer records: %r; sending them one by one", len(events), e)
        ref = None
        for event in events:
            try:
                ref = self.buffer.record.remote([event])
            except Exception as e:
                self.lost += 1
                log.error("buffer record %s of %s lost: %r", event[0], event[2], e)
        return ref


class Tally:
    """Metric increments summed between flushes: one Ray metric call per name and tags."""

    def __init__(self) -> None:
        self.incs: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def inc(self, name: str, value: float = 1.0, **tags: str) -> None:
        key = (name, tuple(sorted(tags.items())))
        self.incs[key] = self.incs.get(key, 0.0) + value

    def flush(self) -> None:
        incs, self.incs = self.incs, {}
        for (name, tags), value in incs.items():
            metrics.inc(name, value, **dict(tags))
