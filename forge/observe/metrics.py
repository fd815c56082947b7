"""The project's metrics, exported through ``ray.util.metrics`` so the Ray dashboard shows them.

Created lazily (only inside a Ray worker or driver) and shared per process. Recording a metric
never raises: a metric is an observation, and no bookkeeping may stop the work it observes (a
zero increment, which Ray refuses, is skipped; any other error is logged once per metric).
"""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

log = logging.getLogger(__name__)
_failed: set[str] = set()


@cache
def _metrics() -> dict[str, Any]:
    from ray.util.metrics import Counter, Gauge, Histogram

    ms = [5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000]
    return {
        "episodes": Counter(
            "forge_episodes_total", "Finished attempts by status.", tag_keys=("run", "status")
        ),
        "failures": Counter(
            "forge_failures_total", "Failed attempts by reason.", tag_keys=("run", "reason")
        ),
        "truncations": Counter(
            "forge_truncations_total",
            "Episodes the policy ended (reward 0, trained on) by reason.",
            tag_keys=("run", "reason"),
        ),
        "groups": Counter(
            "forge_groups_total", "GRPO groups by outcome.", tag_keys=("run", "outcome")
        ),
        "tokens": Counter(
            "forge_sampled_tokens_total", "Tokens sampled by the policy.", tag_keys=("run",)
        ),
        "turn_latency": Histogram(
            "forge_turn_latency_ms", "Model call latency seen by the proxy.", ms, ("run",)
        ),
        "queue": Gauge("forge_queue_depth", "Attempts waiting for a pod.", tag_keys=("run",)),
        "pods": Gauge("forge_pods", "Live HarnessPods.", tag_keys=("run",)),
        "version": Gauge("forge_policy_version", "Trainer's policy version.", tag_keys=("run",)),
        "step_time": Histogram(
            "forge_train_step_ms", "Trainer step wall time.", [*ms, 60000, 120000], ("run",)
        ),
    }


def _record(name: str, method: str, value: float, tags: dict[str, str]) -> None:
    try:
        getattr(_metrics()[name], method)(value, tags=tags)
    except Exception as e:
        if name not in _failed:
            _failed.add(name)
            log.warning("metric %s not recorded (further errors not logged): %r", name, e)


def inc(name: str, value: float = 1.0, **tags: str) -> None:
    if value > 0:
        _record(name, "inc", value, tags)


def observe(name: str, value: float, **tags: str) -> None:
    _record(name, "observe", value, tags)


def gauge(name: str, value: float, **tags: str) -> None:
    _record(name, "set", value, tags)
