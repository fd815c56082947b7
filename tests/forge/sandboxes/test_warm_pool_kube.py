"""Warm sandbox pools on kubernetes, against kmock (an emulated API server) with the local test
kubelet running each pod's agent as a process: a handover sends no pod creation and relabels
the pod for its attempt, a warm pod is never handed out twice, a crashed HarnessPod's warm pods
go in the reconcile pass, and a pool of size 0 changes nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from forge.config import SandboxConfig
from forge.sandboxes import kube_calls, warm_pool
from forge.sandboxes import kube_manifests as km
from forge.sandboxes import kubernetes as kube_backend
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.kube_calls import RetryPolicy, TokenBucket
from forge.sandboxes.kube_reconcile import reap_pods
from forge.sandboxes.kubernetes import KubernetesSandbox

from .kube_controller import KMock, LocalKubelet

pytestmark = pytest.mark.k8s
REPO = Path(__file__).resolve().parents[3]
AGENT_PORT = 18938
FILL_S = 120.0


class Env:
    """One namespace of kmock with its kubelet, and sandboxes that share one API client,
    retry policy and token bucket (a warm pool serves sandboxes made alike)."""

    def __init__(self, kube: KMock, namespace: str, size: int) -> None:
        self.kube, self.ns = kube, namespace
        self.api = kube.client()
        self.kubelet = LocalKubelet(kube, namespace)
        self.policy = RetryPolicy(timeout_s=10)
        self.bucket = TokenBucket(1000, 1000)
        self.config = SandboxConfig(
            backend="kubernetes",
            kubernetes={"namespace": namespace, "agent_port": AGENT_PORT, "heartbeat_s": 3600},
            warm_pool={"size": size},
        )
        self.boxes: list[KubernetesSandbox] = []

    def sandbox(self) -> KubernetesSandbox:
        box = KubernetesSandbox(
            self.config, None, api=self.api, policy=self.policy, bucket=self.bucket
        )
        self.boxes.append(box)
        return box

    def pods(self) -> dict[str, dict]:
        return self.kube.objects("v1/pods", self.ns)

    def pod_posts(self) -> list[dict]:
        return [r[3] for r in self.kube.requests("POST", rf"/api/v1/namespaces/{self.ns}/pods")]


@pytest.fixture
def env(kube: KMock, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(kube_calls, "_last_throttled", 0.0)  # no 429 of an earlier test counts
    ns = km.dns_label(request.node.name)[:40] + "-" + km.digest(request.node.name, n=5)
    made: list[Env] = []

    def make(size: int = 2) -> Env:
        made.append(Env(kube, ns, size))
        return made[-1]

    yield make
    warm_pool.shutdown()
    for e in made:
        for box in e.boxes:
            box.destroy()
    kube_backend.shutdown()
    for e in made:
        e.kubelet.close()


def spec(attempt: int = 0, **kw: Any) -> SandboxSpec:
    labels = {"run": "run-w", "pod": "hp-0", "episode": f"ep-{attempt}", "attempt": str(attempt)}
    return SandboxSpec(labels={**labels, "network": "proxy-only"}, deadline_s=300,
                       proxy_tcp="10.0.0.9:8931", **kw)  # fmt: skip


def test_handover_sends_no_pod_creation(env) -> None:
    e = env()
    pool = warm_pool.prewarm(e.sandbox(), spec())
    assert pool is not None and pool.wait_full(FILL_S)
    ready = {b.name for b in pool.ready_sandboxes()}
    assert set(e.pods()) == ready and len(ready) == 2
    for name in ready:  # the phase labels the NetworkPolicies select on: the agent phase's
        labels = e.pods()[name]["metadata"]["labels"]
        assert labels["openforge.phase"] == "agent" and labels["openforge.network"] == "proxy-only"
        assert labels["openforge.warm"].startswith(pool.id) and "openforge.episode" not in labels
    t0 = time.time()
    box = e.sandbox()
    box.create(spec(4, env={"FOO": "bar"}))
    assert box.name in ready and pool.handed == 1
    assert not [p for p in e.pod_posts() if p["metadata"]["labels"].get("openforge.episode")]
    assert box.relabelled is not None and box.relabelled.result(30)  # in the background
    labels = e.pods()[box.name]["metadata"]["labels"]  # relabelled for its attempt
    assert (labels["openforge.episode"], labels["openforge.attempt"]) == ("ep-4", "4")
    assert labels["openforge.run"] == "run-w" and labels["openforge.phase"] == "agent"
    assert labels["openforge.role"] == "sandbox" and labels["openforge.heartbeat"]  # still reaped
    assert t0 + 300 <= int(labels["openforge.deadline"]) <= time.time() + 300 + 60
    assert t0 + 300 <= box.deadline <= time.time() + 300
    r = box.exec(["sh", "-c", "echo $FOO"], 10)
    assert (r.exit_code, r.stdout) == (0, "bar\n")
    assert box.proxy_host_port() == "10.0.0.9:8931"
    box.destroy()
    assert box.name not in e.pods()
    assert pool.wait_full(FILL_S) and box.name not in {b.name for b in pool.ready_sandboxes()}


def test_a_warm_pod_is_never_handed_out_twice(env) -> None:
    e = env(size=4)
    pool = warm_pool.prewarm(e.sandbox(), spec())
    assert pool is not None and pool.wait_full(FILL_S)
    ready = {b.name for b in pool.ready_sandboxes()}
    n = 6
    boxes = [e.sandbox() for _ in range(n)]
    gate = threading.Barrier(n)
    errors: list[BaseException] = []

    def one(i: int) -> None:
        gate.wait()
        try:
            boxes[i].create(spec(10 + i))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    names = [b.name for b in boxes]
    assert len(set(names)) == n  # every attempt its own pod
    assert 1 <= len([x for x in names if x in ready]) == pool.handed <= 4
    for i, b in enumerate(boxes):
        b.put_file("who", str(i))
    assert [b.get_file("who") for b in boxes] == [str(i).encode() for i in range(n)]
    for b in boxes:
        b.destroy()
    assert pool.wait_full(FILL_S) and not {b.name for b in pool.ready_sandboxes()} & set(names)


CHILD = """
import json, sys
from forge.config import SandboxConfig
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.registry import prewarm
cfg = SandboxConfig.model_validate_json(sys.argv[1])
labels = {"run": "run-w", "pod": "hp-crashed", "episode": "e", "attempt": "0"}
pool = prewarm(cfg, None, SandboxSpec(labels=labels, deadline_s=300, proxy_tcp="10.0.0.9:8931"))
assert pool.wait_full(120), "pool did not fill"
print(json.dumps([b.name for b in pool.ready_sandboxes()]), flush=True)
sys.stdin.read()  # SIGKILLed here
"""


def test_a_crashed_harness_pods_warm_pods_are_reaped(env, kube: KMock) -> None:
    e = env()
    cfg = e.config.model_copy(deep=True)
    cfg.kubernetes.api_url, cfg.kubernetes.heartbeat_s = kube.url, 5.0  # its Lease lives 30 s
    live = warm_pool.prewarm(e.sandbox(), spec())  # this process's: its Lease is renewed
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, cfg.model_dump_json()],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, f"the child made no pool (exit {proc.wait(30)})"
        theirs = set(json.loads(line))
        assert live is not None and live.wait_full(FILL_S)
        mine = {b.name for b in live.ready_sandboxes()}
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert len(theirs) == 2 and theirs | mine == set(e.pods())  # the crash left its pods
        later = time.time() + 31  # past the dead HarnessPod's Lease (30 s); this one's lives
        assert reap_pods(e.api, e.ns, "run-w", orphans_only=True, now=later) == 2
        assert set(e.pods()) == mine
    finally:
        proc.kill()


def test_size_0_changes_nothing(env) -> None:
    e = env(size=0)
    box = e.sandbox()
    box.create(spec(2))
    assert warm_pool.pools() == [] and warm_pool.prewarm(e.sandbox(), spec()) is None
    [posted] = e.pod_posts()
    assert posted["metadata"]["name"] == box.name == km.pod_name(spec(2).labels)
    assert posted["metadata"]["labels"]["openforge.attempt"] == "2"
    assert "openforge.warm" not in posted["metadata"]["labels"] and box.relabelled is None
    box.destroy()
    assert e.pods() == {}
