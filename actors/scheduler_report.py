"""The Scheduler's counts and its report of a stalled collection (read by the driver and by
``forge run``'s progress line); functions of a :class:`actors.scheduler.Scheduler` (typed
``Any``: this module sits beside it, not above it)."""

from __future__ import annotations

import time
from typing import Any


def stats(sched: Any) -> dict[str, Any]:
    return {
        **sched.counts,
        **sched.pool.counts,
        "pods_failed_start": sched.pool.failed_starts,
        **sched.ledger.reasons(),
        "pods": len(sched.pool.pods),
        "queue": len(sched._pending),
        "in_flight": len(sched._running) + len(sched._replacing),
        "budget": sched._budget,
        "groups_open": sum(1 for g in sched._groups.values() if g.result is None),
        "sampled_tokens": sched.ledger.tokens,
        "cursor": sched.cursor,
        "harness_shares": sched.draw.shares(),
        "by_harness": {
            h: {k: dict(v) if isinstance(v, dict) else v for k, v in c.items()}
            for h, c in sched.ledger.by_harness.items()
        },
        "idle_s": time.monotonic() - sched.last_progress,
        "rollout_idle_s": sched.rollout_idle_s
        + (time.monotonic() - sched._idle_since if sched._idle_since is not None else 0.0),
        "buffer_calls": sched.outbox.calls,
        "buffer_records_lost": sched.outbox.lost,
    }


def stall_report(sched: Any) -> str:
    """What collection is waiting for, for a driver that saw no progress for too long."""
    now = time.monotonic()
    lines = [
        f"no attempt settled for {now - sched.last_progress:.0f}s; "
        f"{len(sched._pending)} attempt(s) queued, {len(sched._running)} in flight, "
        f"{len(sched.pool.pods)} pod(s) ({sum(p.busy for p in sched.pool.pods)} busy), "
        f"budget {sched._budget} group(s)"
    ]
    running = sorted((a for a, _ in sched._running.values()), key=lambda a: a.started)
    for a in running[:10]:
        lines.append(
            f"  in flight: {a.episode_id} attempt {a.number} of task "
            f"{a.group.task.get('id')} on {a.pod} for {now - a.started:.0f}s"
        )
    for g in list(sched._groups.values())[:10]:
        lines.append(
            f"  open group {g.group_id} (task {g.task.get('id')}): "
            f"{len(g.episodes)}/{g.size} done, {g.running} running"
        )
    if sched.pool.failed_starts:
        lines.append(
            f"  {sched.pool.failed_starts} pod start(s) failed; last: {sched.pool.last_start_error}"
        )
    if sched.last_loop_error:
        lines.append(
            f"  dispatch loop errors: {sched.counts['loop_errors']}; last: {sched.last_loop_error}"
        )
    return "\n".join(lines)
