"""scripts/bench/k8s_scale.py's core at 10 pods, 10 HarnessPods in 2 processes: every sandbox
created, used and deleted through the kubernetes backend against kmock (in its own process),
3 pod calls each besides the watch, a reconcile pass of 2 calls. No timing asserted."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("kmock")
pytest.importorskip("kubernetes")
pytest.importorskip("psutil")

pytestmark = pytest.mark.k8s

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "k8s_scale.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("k8s_scale", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_ten_sandboxes_through_the_backend() -> None:
    bench = load()
    r = bench.run_once(10, latency_ms=1, qps_limit=1000, n_agents=2, client_qps=100,
                       client_burst=100, pod_start_s=0.3, processes=2)  # fmt: skip
    assert r.failed == []
    assert r.ok == 10 and (r.harness_pods, r.processes) == (10, 2)
    calls = bench.pod_calls(r)
    assert {v: round(calls.get(v, 0), 2) for v in ("POST", "GET", "DELETE")} == {
        "POST": 1.0, "GET": 1.0, "DELETE": 1.0}  # fmt: skip
    assert 0 < calls.get("WATCH", 0) <= 1.0  # pods start 0.15-0.45 s late: watched
    assert r.reap[0] == 2 and r.sweep[0] == 2
    assert r.cpu_client_s > 0 and r.cpu_emulator_s > 0  # each process measured its own


def test_throttling_uses_up_no_attempt_until_its_budget() -> None:
    """What the bench found at 1,000 sandboxes: a server that keeps answering 429 with
    Retry-After made creates give up after 6 attempts. 10 such answers in a row now only
    delay the call; beyond ``max_throttled_s`` of waiting it gives up, naming the time."""
    from kubernetes import client

    from forge.sandboxes.kube_calls import KubeError, RetryPolicy, call
    from tests.forge.sandboxes.kube_controller import KMock

    kube = KMock()
    try:
        api, path = kube.client(), r"/api/v1/namespaces/ns/pods"
        core = client.CoreV1Api(api)
        kube.fault("GET", path, status=429, headers={"Retry-After": "1"}, times=10)
        sleeps: list[float] = []
        policy = RetryPolicy(sleep=sleeps.append, rng=lambda: 0.5, timeout_s=10)
        assert call(core.list_namespaced_pod, "ns", policy=policy)["items"] == []
        assert len(sleeps) == 10 and all(1.0 <= s <= 1.1 for s in sleeps)
        kube.fault("GET", path, status=429, headers={"Retry-After": "1"}, times=100)
        short = RetryPolicy(sleep=sleeps.append, rng=lambda: 0.5, max_throttled_s=3.5)
        with pytest.raises(KubeError, match=r"gave up after 6 attempts and 3s throttled: HTTP 429"):
            call(core.list_namespaced_pod, "ns", policy=short)
    finally:
        kube.close()
