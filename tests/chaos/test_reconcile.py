"""What a crash leaves must be accounted for when the run directory is opened again: the
ReplayBuffer's journal (every dispatched attempt ends with a record, ``interrupted`` if need be),
its torn-record repair, and the reconcile pass's reaping of orphaned sandboxes' processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from actors.replay_buffer import ReplayBuffer
from forge.sandboxes.orphans import LABELS_FILE, pid_start, reap_orphans
from forge.types import Episode
from tests.chaos.ledger import Audit, read_records
from tests.chaos.procs import poll


def failed(episode_id: str, attempt: int, why: str = "harness_crash") -> Episode:
    return Episode(
        episode_id=episode_id,
        task_id="t",
        attempt=attempt,
        harness="react",
        reward=0.0,
        status="failed",
        failure=why,
    )


def records(run_dir: Path) -> Audit:
    audit = Audit("reconcile")
    read_records(run_dir, audit)
    return audit


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_a_crashed_runs_open_attempts_and_groups_are_recorded_as_interrupted(
    tmp_path: Path,
) -> None:
    crashed = ReplayBuffer(str(tmp_path))
    crashed.dispatched("g1", "g1-0", 0)
    crashed.dispatched("g1", "g1-1", 0)
    crashed.log_failure(failed("g1-1", 0), "g1", "harness_crash")  # retried ...
    crashed.dispatched("g1", "g1-1", 1)  # ... and running when the run died
    crashed.dispatched("g2", "g2-0", 0)
    crashed.drop([failed("g2-0", 0)], "g2", "pod_died after 2 retries")  # closed
    # The process dies here: no close(). A new buffer opens the run directory (--resume).
    again = ReplayBuffer(str(tmp_path))
    audit = records(tmp_path)
    keys = [(r.episode_id, r.attempt) for r in audit.records]
    assert sorted(keys) == [("g1-0", 0), ("g1-1", 0), ("g1-1", 1), ("g2-0", 0)]
    interrupted = [r for r in audit.records if r.reason == "interrupted"]
    assert {(r.episode_id, r.attempt) for r in interrupted} == {("g1-0", 0), ("g1-1", 1)}
    dropped = lines(tmp_path / "episodes" / "dropped.jsonl")
    assert [(d["group_id"], d["reason"]) for d in dropped] == [
        ("g2", "pod_died after 2 retries"),
        ("g1", "interrupted"),
    ]
    assert again.stats()["attempts_interrupted"] == 2
    # Opening it once more finds nothing left to record.
    ReplayBuffer(str(tmp_path)).close()
    assert len(records(tmp_path).records) == 4


def test_a_record_that_reached_disk_before_the_crash_is_not_recorded_twice(
    tmp_path: Path,
) -> None:
    crashed = ReplayBuffer(str(tmp_path))
    crashed.dispatched("g1", "g1-0", 0)
    # The record was synced, the journal's note of it was not (the crash fell in between).
    with open(tmp_path / "episodes" / "failures.jsonl", "a") as f:
        f.write(json.dumps({"group_id": "g1", "reason": "pod_died", **failed("g1-0", 0).to_dict()}))
        f.write("\n")
    ReplayBuffer(str(tmp_path))
    audit = records(tmp_path)
    assert [(r.episode_id, r.attempt, r.reason) for r in audit.records] == [("g1-0", 0, "pod_died")]


def test_close_records_what_a_stopped_run_left_open(tmp_path: Path) -> None:
    buffer = ReplayBuffer(str(tmp_path))
    buffer.dispatched("g1", "g1-0", 0)
    buffer.dispatched("g1", "g1-1", 0)
    buffer.drop([], "g1", "interrupted")  # the scheduler's stop(): no finished episode
    buffer.close()
    audit = records(tmp_path)
    assert sorted((r.episode_id, r.attempt, r.reason) for r in audit.records) == [
        ("g1-0", 0, "interrupted"),
        ("g1-1", 0, "interrupted"),
    ]
    assert len(lines(tmp_path / "episodes" / "dropped.jsonl")) == 1  # g1 closed once


def test_a_torn_last_record_is_cut_so_the_next_one_parses(tmp_path: Path) -> None:
    buffer = ReplayBuffer(str(tmp_path))
    buffer.log_failure(failed("g1-0", 0), "g1", "pod_died")
    buffer.close()
    path = tmp_path / "episodes" / "failures.jsonl"
    whole = path.read_text()
    with open(path, "a") as f:
        f.write('{"group_id": "g1", "reason": "pod_d')  # the crash, mid-write
    buffer = ReplayBuffer(str(tmp_path))
    buffer.log_failure(failed("g1-0", 1), "g1", "pod_died")
    buffer.close()
    assert path.read_text().startswith(whole)
    assert [r["attempt"] for r in lines(path)] == [0, 1]


def test_reap_orphans_kills_the_processes_of_an_orphaned_sandbox(tmp_path: Path) -> None:
    """An unisolated sandbox's harness outlives its dead pod (no bwrap to take it along): the
    reconcile pass kills it before it deletes the directory."""
    creator = subprocess.Popen(["true"])
    creator.wait()  # a pod that has died
    box = tmp_path / "run-pod-0-0-abc"
    (box / "workspace").mkdir(parents=True)
    (box / LABELS_FILE).write_text(
        json.dumps(
            {
                "labels": {"run": "run", "pod": "pod-0", "episode": "g1-0", "attempt": "0"},
                "pid": creator.pid,
                "pid_start": "1",  # whatever runs under this pid now is not the creator
                "host": socket.gethostname(),
                "deadline": time.time() + 3600,
            }
        )
    )
    harness = subprocess.Popen(["sleep", "600"], cwd=box / "workspace", start_new_session=True)
    try:
        assert pid_start(harness.pid) is not None
        assert reap_orphans(tmp_path, run="other") == 0  # another run's reconcile: not ours
        assert harness.poll() is None
        assert reap_orphans(tmp_path, run="run") == 1
        assert poll(lambda: harness.poll() is not None, 10), "the orphan's process survived"
        assert not box.exists()
    finally:
        if harness.poll() is None:
            os.killpg(harness.pid, 9)
        harness.wait()


def ok(episode_id: str) -> Episode:
    return Episode(
        episode_id=episode_id,
        task_id="t",
        attempt=0,
        harness="react",
        reward=1.0,
        status="ok",
    )


@pytest.mark.ray
def test_groups_never_trained_are_marked_untrained_at_close(ray_cluster, tmp_path: Path) -> None:
    import asyncio

    buffer = ReplayBuffer(str(tmp_path), capacity=8, max_staleness=10)
    for gid in ("g1", "g2"):
        buffer.dispatched(gid, f"{gid}-0", 0)
        buffer.put([ok(f"{gid}-0")], gid)
    assert len(asyncio.run(buffer.sample(1, 0, None))) == 1  # g1 is trained on
    buffer.close()
    dropped = lines(tmp_path / "episodes" / "dropped.jsonl")
    assert dropped == [{"group_id": "g2", "reason": "untrained"}]
    assert [r.episode_id for r in records(tmp_path).records] == ["g1-0", "g2-0"]
