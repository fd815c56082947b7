"""Placement on a multi-node Ray cluster, and a lost worker node: a short run on a local
cluster of four raylets (head, gpu, two cpu nodes: :mod:`tests.forge.placement_cluster`, in a
process and a Ray temp dir of its own), with a ``placement`` that sends each actor kind to its
kind of node; one cpu node is killed while attempts run on it.

Asserted: every actor is on the node its placement names; HarnessPods share the cpu nodes out
(spread, not packed); the attempts the lost node took with it are recorded as infrastructure
failures and retried on pods of the node that is left; nothing is lost (every dispatched
attempt is on disk once: trained, or failed with its reason), no group is dropped, and no
sandbox is left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.procs import session

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
INFRA = {"pod_died", "node_died"}  # what a lost node's attempts may be recorded as


def run_cluster(out: Path) -> tuple[dict[str, Any] | None, str]:
    """Run :mod:`tests.forge.placement_cluster` into ``out``: its report (None if it wrote
    none) and the tail of its output. Its session (the cluster's processes) is killed after."""
    ray_tmp = tempfile.mkdtemp(prefix="fp", dir="/tmp")  # short: Ray's socket paths live in it
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=ray_tmp, PYTHONUNBUFFERED="1")
    out.mkdir(parents=True, exist_ok=True)
    log = out / "child.log"
    with open(log, "wb") as f:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.forge.placement_cluster", str(out)],
            cwd=ROOT,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            child.wait(780)
        except subprocess.TimeoutExpired:
            pass
        finally:  # the cluster's raylets are in its session: none outlives the test
            for pid in [child.pid, *session(child.pid)]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            child.wait()
            shutil.rmtree(ray_tmp, ignore_errors=True)
    found = out / "report.json"
    tail = log.read_text(errors="replace")[-4000:]
    return (json.loads(found.read_text()) if found.exists() else None), tail


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("placement")
    for attempt in range(2):
        result, tail = run_cluster(root / f"try{attempt}")
        assert result is not None, f"the cluster run wrote no report:\n{tail}"
        if not result.get("start_failed"):
            break
    else:  # Ray gives a raylet a fixed 30 s to register; not something this test can change
        pytest.skip(
            f"the test cluster's nodes did not start, twice (load average "
            f"{os.getloadavg()[0]:.0f} on {os.cpu_count()} CPUs): {result['start_failed']}"
        )
    assert result["error"] is None, result["error"] + "\n" + tail
    print(
        f"cluster up {result['cluster_start_s']}s, run ready {result['run_ready_s']}s, "
        f"node lost {result['hit']['at_s']}s, run done {result['run_done_s']}s"
    )
    return result


@pytest.mark.full  # a 3-node cluster, ~70 s: -m full; in CI tests/forge/config/test_placement.py
def test_each_actor_lands_where_its_placement_puts_it(report: dict[str, Any]) -> None:
    node = {node_id: name for name, node_id in report["nodes"].items()}
    assert node[report["driver_node"]] == "head"
    placed = {kind: [node[n] for n in ids] for kind, ids in report["placed"].items()}
    assert placed == {
        "scheduler": ["head"],
        "replay_buffer": ["head"],
        "weight_store": ["head"],  # beside the driver
        "trainer": ["gpu"],
        "policy": ["gpu"],
    }
    # HarnessPods: cpu nodes only, shared out evenly (4 pods, 4 harness_pod slots a node: a
    # packing placement could put them all on one node).
    pods = Counter(node[n] for n in report["pods_at_start"].values())
    assert pods == {"cpu-a": 2, "cpu-b": 2}, pods


@pytest.mark.full  # the same cluster: -m full; in CI the chaos kills of
# tests/chaos/test_in_process.py
def test_a_lost_node_loses_no_episode(report: dict[str, Any]) -> None:
    audit = report["audit"]
    assert not (audit["lost"] or audit["duplicated"] or audit["leaked"] or audit["problems"]), (
        audit["explain"]
    )
    records = audit["records"]
    hit = {(e, n) for e, n, _ in report["hit"]["running"]}
    assert hit, "no attempt was running on the lost node"
    lost_pods = set(report["lost_pods"])
    ran_on = {(e, n): pod for e, n, pod in report["sandboxes"]}
    for episode, attempt in sorted(hit):
        mine = [r for r in records if (r["episode_id"], r["attempt"]) == (episode, attempt)]
        assert [(r["file"], r["reason"] in INFRA) for r in mine] == [("failures.jsonl", True)], mine
        # retried, and the retry finished as a trained episode on a pod of the node left
        later = [r for r in records if r["episode_id"] == episode and r["attempt"] > attempt]
        assert any(r["file"] == "episodes.jsonl" and r["status"] == "ok" for r in later), later
        assert all(ran_on[(episode, r["attempt"])] not in lost_pods for r in later), later
    # Failures are the lost node's doing only, and counted as such; every group was trained.
    failed = [r for r in records if r["file"] == "failures.jsonl"]
    assert {r["reason"] for r in failed} <= INFRA, failed
    final = report["final"]
    assert final["groups_dropped"] == 0 and final["groups_buffered"] == 2, final  # 1 step of 2
    assert final["attempts_failed"] == len(failed) and final["pods_replaced"] >= len(lost_pods)
    assert sum(final["failures"].values()) == len(failed), final
    # The pool after the loss: pods on the cpu node that is left only.
    node = {node_id: name for name, node_id in report["nodes"].items()}
    after = {node[n] for n in report["pods_after_loss"].values()}
    assert after == {"cpu-b"}, report["pods_after_loss"]
