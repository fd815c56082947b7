"""What the proxy records of one attempt while it runs: its turns, errors and refusals, and the
time its calls spent inside the Policy (which the attempt's time budget does not count)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from forge.types import ImagePart, Turn
from serve.live import LiveCompletion
from tasks.services import World


@dataclass
class AttemptState:
    episode_id: str
    attempt: int
    key: str
    script: dict[str, Any] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    turns: list[Turn] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    rejected: dict[str, int] = field(default_factory=dict)
    refusals: list[str] = field(default_factory=list)  # "STATUS message" of each 4xx answered
    streams: list[tuple[Turn, LiveCompletion]] = field(default_factory=list)
    images: dict[str, ImagePart] = field(default_factory=dict)  # the turns' images by sha256
    world: World | None = None  # the task's services (actors.service_routes), if it has any
    pages: dict[int, Any] = field(default_factory=dict)  # its page application, by port
    max_turns: int | None = None  # the task's turn limit: the call after it gets 429
    in_policy: int = 0  # calls now inside the Policy
    policy_since: float = 0.0  # time.monotonic() when the first of them went in
    policy_wait_s: float = 0.0  # seconds with a call inside the Policy, before policy_since
    waiting_at_close: bool = False  # the harness ended while a call of it was in the Policy

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def delivered(self) -> int:
        """Answers the harness got (a stream counts until its client is seen to leave)."""
        return sum(1 for t in self.turns if t.delivered)

    @contextlib.contextmanager
    def in_policy_call(self) -> Iterator[None]:
        """Time with at least one call inside the Policy (queued, generating, or held by a
        weight update): the harness's time budget does not count it (forge.episode)."""
        if self.in_policy == 0:
            self.policy_since = time.monotonic()
        self.in_policy += 1
        try:
            yield
        finally:
            self.in_policy -= 1
            if self.in_policy == 0:
                self.policy_wait_s += time.monotonic() - self.policy_since

    def policy_wait(self, now: float | None = None) -> float:
        """Seconds so far with a call inside the Policy (the open stretch included)."""
        if self.in_policy == 0:
            return self.policy_wait_s
        return self.policy_wait_s + ((now or time.monotonic()) - self.policy_since)

    def settle_deliveries(self) -> None:
        """A streamed turn was delivered when its client was sent the whole answer."""
        for turn, live in self.streams:
            turn.delivered = turn.delivered and live.delivered
        self.streams.clear()
