"""The Scheduler at scale: many pods, the buffer's records batched, nothing lost.

The real Scheduler, PodPool and ReplayBuffer actors; the pods are the throughput bench's
simulated ones (``scripts/bench/scheduler_throughput.py``: a few host actors serve many pods,
each pod still its own entry in the pool). No timing is asserted.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ray import cloudpickle

from actors.replay_buffer import ReplayBuffer
from forge.types import Episode

pytestmark = pytest.mark.ray
BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "scheduler_throughput.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("scheduler_throughput", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    cloudpickle.register_pickle_by_value(mod)  # its pods and scheduler run in workers
    return mod


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _records(run_dir: Path) -> list[tuple[str, int]]:
    """Every attempt that has a record: a buffered episode, a failure, or a dropped group's."""
    d = run_dir / "episodes"
    keys = [(e["episode_id"], e["attempt"]) for e in _lines(d / "episodes.jsonl")]
    keys += [(e["episode_id"], e["attempt"]) for e in _lines(d / "failures.jsonl")]
    for dropped in _lines(d / "dropped.jsonl"):
        keys += [(e["episode_id"], e["attempt"]) for e in dropped.get("episodes", [])]
    return keys


def _dispatched(run_dir: Path) -> list[tuple[str, int]]:
    journal = _lines(run_dir / "episodes" / "attempts.jsonl")
    return [(e["episode_id"], e["attempt"]) for e in journal if e["event"] == "dispatched"]


def test_many_pods_settle_every_attempt_once_in_few_buffer_calls(ray_cluster, tmp_path):
    bench = _bench()
    row = bench.bench(pods=128, attempts=1024, group_size=4, hosts=2, run_dir=str(tmp_path))
    stats = row["stats"]
    assert stats["attempts_dispatched"] == stats["attempts_ok"] == 1024, stats
    assert stats["groups_buffered"] == 256 and stats["pods"] == 128, stats
    episodes = _lines(tmp_path / "episodes" / "episodes.jsonl")
    keys = [(e["group_id"], e["episode_id"]) for e in episodes]
    assert len(keys) == len(set(keys)) == 1024
    dispatched = _dispatched(tmp_path)
    assert len(dispatched) == len(set(dispatched)) == 1024
    assert sorted(_records(tmp_path)) == sorted(dispatched)  # each journaled attempt recorded
    # One buffer call per attempt and one per group before (1.25 per attempt): now batched.
    assert stats["buffer_calls"] <= stats["attempts_dispatched"] // 2, stats


def test_stop_mid_flight_leaves_every_dispatched_attempt_recorded(ray_cluster, tmp_path):
    """Stop while 64 pods are busy: each attempt the journal saw dispatched has exactly one
    record once the buffer closes (finished, interrupted, or in a group cut short)."""
    ray = ray_cluster
    bench = _bench()
    sched, buffer, hosts = bench.setup(64, 64, 4, 2, str(tmp_path), delay_s=0.3)
    ray.get(sched.start.remote())
    sched.request.remote(64)
    deadline = time.monotonic() + 60
    while ray.get(sched.stats.remote())["attempts_ok"] < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    final = ray.get(sched.stop.remote())
    ray.get(buffer.close.remote())
    for actor in (sched, buffer, *hosts):
        ray.kill(actor)
    assert final["attempts_ok"] >= 100 and final["in_flight"] == 0, final
    dispatched = _dispatched(tmp_path)
    assert len(dispatched) == final["attempts_dispatched"]
    assert sorted(_records(tmp_path)) == sorted(dispatched)
    failures = _lines(tmp_path / "episodes" / "failures.jsonl")
    assert failures and {f["reason"] for f in failures} == {"interrupted"}


def _ep(episode_id: str, attempt: int, failure: str | None = None) -> Episode:
    status = "failed" if failure else "ok"
    return Episode(episode_id, "t", attempt, "sim", 0.0 if failure else 1.0, status, failure)


def test_record_batch_keeps_event_order_in_the_journal(ray_cluster, tmp_path):
    buf = ReplayBuffer(str(tmp_path), 8, 1)
    size = buf.record(
        [
            ("dispatched", "g1", "g1-0", 0),
            ("dispatched", "g1", "g1-1", 0),
            ("failure", _ep("g1-1", 0, "pod_died"), "g1", "pod_died"),
            ("dispatched", "g1", "g1-1", 1),
            ("put", [_ep("g1-0", 0), _ep("g1-1", 1)], "g1"),
            ("dispatched", "g2", "g2-0", 0),
        ]
    )
    assert size == 1 and buf.size() == 1
    journal = _lines(tmp_path / "episodes" / "attempts.jsonl")
    assert [(e["event"], e.get("closed")) for e in journal] == [
        ("dispatched", None),
        ("dispatched", None),
        ("recorded", False),
        ("dispatched", None),
        ("recorded", True),
        ("dispatched", None),
    ]
    assert [e["episode_id"] for e in _lines(tmp_path / "episodes" / "episodes.jsonl")] == [
        "g1-0",
        "g1-1",
    ]
    with pytest.raises(ValueError, match=r"events\[1\]"):
        buf.record([("dispatched", "g3", "g3-0", 0), ("bogus", "g3")])
    assert len(_lines(tmp_path / "episodes" / "attempts.jsonl")) == 6  # nothing of that batch
    # A crash now: a buffer that opens the directory again records what was left open.
    again = ReplayBuffer(str(tmp_path), 8, 1)
    assert again.counts["attempts_interrupted"] == 1 and again.counts["groups_interrupted"] == 1
    failures = _lines(tmp_path / "episodes" / "failures.jsonl")
    assert [(f["episode_id"], f["reason"]) for f in failures] == [
        ("g1-1", "pod_died"),
        ("g2-0", "interrupted"),
    ]
    dropped = _lines(tmp_path / "episodes" / "dropped.jsonl")
    assert [(d["group_id"], d["reason"]) for d in dropped] == [("g2", "interrupted")]
