"""Where an attempt's time goes: :func:`forge.episode.run_attempt` marks the end of each of its
stages when asked (its ``stages``), for ``scripts/bench/episode_overhead.py`` and anyone who
wants to know what an attempt spends besides the harness's own run."""

from __future__ import annotations

import time
from collections.abc import Callable

# What ``run_attempt`` marks, in order: opening the attempt on the proxy; creating the agent's
# sandbox; its task and harness files; the harness's run; closing the attempt; copying the
# workspace out, destroying the agent's sandbox and verifying the copy; the destroy that
# follows; the Episode's assembly (segments, provenance).
STAGES = ("setup", "create", "files", "harness", "close", "verify", "destroy", "assemble")


def stage_marks(stages: dict[str, float] | None) -> Callable[[str], None]:
    """``mark(name)`` adds the seconds since the previous mark (or since this call) to
    ``stages[name]``; a no-op without ``stages``."""
    if stages is None:
        return lambda name: None
    last = time.perf_counter()

    def mark(name: str) -> None:
        nonlocal last
        now = time.perf_counter()
        stages[name] = stages.get(name, 0.0) + now - last
        last = now

    return mark
