"""Faults injected into a real run driven in this process (``forge.driver.Run`` on the test
session's Ray cluster: Serve Policy with the torch engine and the tiny model, HarnessPods, the
react harness in bubblewrap sandboxes, ReplayBuffer, Trainer), while an attempt is running:

1. a HarnessPod actor killed (``ray.kill`` on one of ``scheduler.pod_actors()``),
2. a sandbox process killed (the harness inside a running attempt's bwrap, SIGKILL),
3. a harness hung past its timeout (the harness inside a running attempt, SIGSTOP),
4. the Policy replica killed (``ray.kill``; Serve starts another).

The first three hit step 1 of a one-step run (what they test is the pool, the sandbox and the
attempt's record, whatever the weights' version); the replica is killed in step 2 of two, after
the trainer has published once, so the replica Serve starts must catch up.

Each run must finish its steps with every attempt on disk exactly once (or dropped with its
reason) and no sandbox process or directory left; :mod:`tests.chaos.ledger` checks.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.chaos import runner
from tests.chaos.ledger import Audit, assert_clean, audit_run
from tests.chaos.procs import (
    Observer,
    Proc,
    alive,
    answer_waiting,
    calling_model,
    harness_procs,
    peek_answer,
    poll,
    signal_proc,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster(ray_cluster: Any) -> Any:
    yield ray_cluster
    from ray import serve

    try:
        serve.delete("forge-policy")
    except Exception:
        pass


def running_harness(root: Path, in_call: bool = False) -> tuple[Proc, dict[str, Any]]:
    """The youngest harness process running in a sandbox under ``root`` (the one with the most
    of its attempt still ahead), with its sandbox's labels; ``in_call``: one whose model call
    is in flight."""

    def found() -> list[tuple[Proc, dict[str, Any]]]:
        return [(p, lb) for p, lb in harness_procs(root) if not in_call or calling_model(p)]

    what = "a harness waiting on the model" if in_call else "an attempt's harness to be running"
    return max(wait_for(what, found, timeout_s=180, every=0.02), key=lambda pl: int(pl[0].start))


def run_with_fault(
    tmp_path: Path, name: str, fault: Any, steps: int = 1, **config: Any
) -> tuple[Audit, dict[str, Any], Any]:
    """A run of ``steps`` steps; at the start of the last, ``fault(run, root)`` runs beside the
    collection. Returns the audit, the scheduler's final counts and what the fault returned."""
    from forge.driver import Run

    cfg = runner.config(tmp_path, name, steps=steps, **config)
    root = Path(cfg.sandbox.root)
    run = Run(cfg)
    injector: runner.InjectorThread | None = None

    def arm(step: int) -> None:
        nonlocal injector
        if step == steps:
            injector = runner.InjectorThread(lambda: fault(run, root))
            injector.start()

    try:
        with Observer(root) as observer:
            final = runner.drive(
                run, steps, arm, pending=lambda: bool(injector and injector.is_alive())
            )
            injected = injector.result() if injector else None
            # A killed process takes a moment to go: a leak is what is still there after 15s.
            poll(lambda: not observer.leaked(), 15, every=0.2)
        audit = audit_run(
            name,
            cfg.run_dir,
            observer,
            runner.GROUP_SIZE,
            dispatched=final["attempts_dispatched"],
            steps=run.step,
        )
    finally:
        runner.teardown(run)
    return audit, final, injected


def retried(audit: Audit, labels: dict[str, Any]) -> bool:
    """Whether the slot of the attempt ``labels`` names got a later attempt on disk."""
    return bool(audit.of(labels["episode"], int(labels["attempt"]) + 1))


def test_harness_pod_killed_mid_episode(cluster: Any, tmp_path: Path, chaos_row: Any) -> None:
    import ray

    def kill_pod(run: Any, root: Path) -> dict[str, Any]:
        proc, labels = running_harness(root, in_call=True)
        pods = ray.get(run.scheduler.pod_actors.remote())
        names = ray.get([p.ready.remote() for p in pods])
        assert labels["pod"] in names, (labels, names)
        assert alive(proc), "the attempt ended before the fault"
        ray.kill(pods[names.index(labels["pod"])], no_restart=True)
        return labels

    audit, final, labels = run_with_fault(tmp_path, "pod-killed", kill_pod)
    chaos_row(audit)
    assert_clean(audit)
    hit = audit.of(labels["episode"], int(labels["attempt"]))
    assert [(r.file, r.reason) for r in hit] == [("failures.jsonl", "pod_died")], hit
    assert retried(audit, labels), audit.explain()
    assert final["pods_replaced"] >= 1, final


def test_sandbox_process_killed(cluster: Any, tmp_path: Path, chaos_row: Any) -> None:
    """The harness is killed after its model call was answered, before it could use the
    answer. From outside that is a model command killing its harness (`kill -9 $PPID`, the
    sandbox's memory limit): the policy's (issue 30 item 4), or it could turn its failures
    into retries."""

    def kill_harness(run: Any, root: Path) -> dict[str, Any]:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            proc, labels = running_harness(root, in_call=True)
            if not signal_proc(proc, signal.SIGSTOP):
                continue  # it ended first: take the next one
            # Held until the answer sits unread in its socket. Stopped before its request was
            # all sent, it never gets one; or the answer ended before the token limit: let it
            # go on and take the next attempt (a cut answer is what makes it look like the
            # policy's doing).
            if poll(lambda p=proc: answer_waiting(p), 20):
                answer = peek_answer(proc)
                if answer is None or b'"finish_reason":"length"' in answer.replace(b" ", b""):
                    assert signal_proc(proc, signal.SIGKILL)
                    return {**labels, "peeked": answer is not None}
            signal_proc(proc, signal.SIGCONT)
        raise AssertionError("no harness was caught with its answer unread")

    audit, _, labels = run_with_fault(tmp_path, "sandbox-killed", kill_harness)
    audit.notes.append(f"the answer was seen cut at the limit: {labels['peeked']}")
    chaos_row(audit)
    assert_clean(audit)
    hit = audit.of(labels["episode"], int(labels["attempt"]))
    # Killed with an answer delivered: a truncated episode scored 0 (not "token_limit" though
    # its one answer was cut: the kill is what ended it), recorded once, not retried.
    assert [r.reason for r in hit] == ["harness_killed_by_policy"], hit
    assert hit[0].file in ("episodes.jsonl", "dropped.jsonl"), hit


@pytest.mark.full  # ~35 s: -m full; in CI a harness past its time in
# tests/forge/test_episode_policy.py
def test_harness_hung_past_its_timeout(cluster: Any, tmp_path: Path, chaos_row: Any) -> None:
    def freeze_harness(run: Any, root: Path) -> dict[str, Any]:
        proc, labels = running_harness(root)
        assert signal_proc(proc, signal.SIGSTOP), "the attempt ended before the fault"
        return labels

    audit, _, labels = run_with_fault(tmp_path, "harness-hung", freeze_harness, timeout_s=12)
    chaos_row(audit)
    assert_clean(audit)
    hit = audit.of(labels["episode"], int(labels["attempt"]))
    # Killed at the task's timeout and recorded once: "harness_hung" (a failed attempt, retried:
    # it never got an answer from the model) or "timeout" (a truncated episode, scored 0: it had
    # one, so the policy may be what it waited on).
    assert len(hit) == 1 and hit[0].reason in ("harness_hung", "timeout"), hit
    if hit[0].reason == "harness_hung":
        assert hit[0].file == "failures.jsonl" and retried(audit, labels), audit.explain()


@pytest.mark.full  # ~45 s: -m full; in CI the pod and sandbox kills above
def test_policy_replica_killed(cluster: Any, tmp_path: Path, chaos_row: Any) -> None:
    import ray

    def replicas() -> list[str]:
        """The live Policy replicas' actor names (Serve names each replica's actor)."""
        return [
            a["name"]
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == "serve" and "forge-policy#Policy" in a["name"]
        ]

    def running() -> bool:
        from ray import serve

        app = serve.status().applications.get("forge-policy")
        policy = app.deployments.get("Policy") if app else None
        return bool(policy) and policy.replica_states.get("RUNNING", 0) >= 1

    def kill_replica(run: Any, root: Path) -> dict[str, Any]:
        running_harness(root, in_call=True)
        (old,) = replicas()
        killed_at = time.time()
        ray.kill(ray.get_actor(old, namespace="serve"), no_restart=True)
        new = wait_for(
            "Serve to start another Policy replica",
            lambda: [name for name in replicas() if name != old],
            timeout_s=180,
            every=0.2,
        )
        wait_for("the new replica to be running", running, timeout_s=180, every=0.2)
        return {"old": old, "new": new[0], "killed_at": killed_at, "new_at": time.time()}

    # step 2: the trainer has published once, so the replica Serve starts must catch up
    audit, final, seen = run_with_fault(tmp_path, "policy-replica-killed", kill_replica, steps=2)
    chaos_row(audit)
    assert_clean(audit)
    assert seen["old"] != seen["new"]
    # The fault reached the traffic: a model call made before the new replica was up was
    # answered after the old one died (Serve held it for the new one), or its attempt failed
    # and was retried.
    turns = [t for e in episodes(tmp_path / "policy-replica-killed") for t in e["turns"]]
    across = [
        t
        for t in turns
        if t["started_at"] < seen["new_at"] and t["started_at"] + t["latency_s"] > seen["killed_at"]
    ]
    assert across or final["attempts_retried"] >= 1, (final, len(turns))
    after = {t["policy_version"] for t in turns if t["started_at"] > seen["killed_at"]} | {
        t["policy_version"] for t in across
    }
    audit.notes.append(f"versions served across/after the kill: {sorted(after)}")
    print(audit.explain())


def episodes(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "episodes" / "episodes.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
