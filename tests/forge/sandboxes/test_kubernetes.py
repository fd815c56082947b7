"""KubernetesSandbox against kmock (an emulated Kubernetes API: no real API server can be
installed here) with faults injected, and a local "kubelet" that runs each pod's agent as a
process on a loopback IP, so create -> exec -> destroy is real on the agent side."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import kubernetes_validate
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from forge.sandboxes import kube_calls
from forge.sandboxes import kube_cluster as kc
from forge.sandboxes import kube_manifests as km
from forge.sandboxes import kubernetes as kube_backend
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.kube_calls import KubeError, KubeInvalid, RetryPolicy, TokenBucket, call
from forge.sandboxes.kube_reconcile import (
    Heartbeat,
    Reconciler,
    micro_time,
    reap_pods,
    setup_namespace,
)
from forge.sandboxes.kubernetes import KubernetesSandbox, KubeSettings, PodStartError

from .kube_controller import KMock, LocalKubelet, invalid

pytestmark = pytest.mark.k8s
PODS = r"/api/v1/namespaces/[^/]+/pods"
AGENT_PORT = 18937


class Env:
    def __init__(self, kube: KMock, namespace: str) -> None:
        self.kube, self.ns = kube, namespace
        self.api = kube.client()
        self.kubelet = LocalKubelet(kube, namespace)
        self.sleeps: list[float] = []
        self.policy = RetryPolicy(sleep=self.sleeps.append, rng=lambda: 0.5, timeout_s=10)
        self.settings = KubeSettings(
            namespace=namespace, agent_port=AGENT_PORT, pod_start_timeout_s=20, heartbeat_s=3600
        )
        self.boxes: list[KubernetesSandbox] = []

    def sandbox(self, bucket: TokenBucket | None = None, **settings: Any) -> KubernetesSandbox:
        s = KubeSettings(**{**self.settings.__dict__, **settings})
        box = KubernetesSandbox(
            settings=s, api=self.api, policy=self.policy, bucket=bucket or TokenBucket(1000, 1000)
        )
        self.boxes.append(box)
        return box

    def posts(self, path: str = PODS) -> list[dict]:
        return [r[3] for r in self.kube.requests("POST", path.replace("[^/]+", self.ns))]

    def deletes(self) -> list[tuple]:
        return self.kube.requests("DELETE", rf".*/namespaces/{self.ns}/.*")

    def pods(self) -> dict[str, dict]:
        return self.kube.objects("v1/pods", self.ns)


def spec(run: str = "run-a", attempt: int = 0, episode: str = "ep-1", **kw: Any) -> SandboxSpec:
    labels = {"run": run, "pod": "hp-0", "episode": episode, "attempt": str(attempt)}
    return SandboxSpec(labels=labels, deadline_s=300, proxy_tcp="10.0.0.9:8931", **kw)


@pytest.fixture
def env(
    kube: KMock, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Env]:
    monkeypatch.setattr(kube_calls, "_last_throttled", 0.0)  # no 429 of an earlier test counts
    ns = km.dns_label(request.node.name)[:40] + "-" + km.digest(request.node.name, n=5)
    e = Env(kube, ns)
    yield e
    for box in e.boxes:
        box.destroy()
    kube_backend.shutdown()
    e.kubelet.close()
    kube.run(lambda emu: emu.faults.clear())


def test_create_exec_destroy_sends_what_we_expect(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    box = env.sandbox()
    s = spec(env={"FOO": "bar"})
    box.create(s)
    assert box.name == km.pod_name(s.labels) and km.is_dns_label(box.name)
    r = box.exec(["sh", "-c", "echo $FOO; echo err >&2; exit 3"], 10)
    assert (r.exit_code, r.stdout, r.stderr) == (3, "bar\n", "err\n")
    assert "FORGE_AGENT_TOKEN" not in box.exec(["env"], 10).stdout
    box.put_file("d/a.txt", "hello")
    assert box.get_file("d/a.txt") == b"hello" and box.get_file("nope") is None
    assert box.proxy_host_port() == "10.0.0.9:8931"
    [sent] = env.posts()
    meta, pod_spec = sent["metadata"], sent["spec"]
    assert meta["name"] == box.name and meta["namespace"] == env.ns
    assert meta["labels"]["openforge.run"] == "run-a"
    assert meta["labels"]["openforge.attempt"] == "0"
    assert meta["labels"]["openforge.heartbeat"] == kc.lease_name("run-a", "hp-0")
    # The pod's own bound: its 300 s plus the start timeouts (20 s pending, 30 s for the agent)
    lifetime = 300 + 20 + 30 + kube_backend.START_SLACK_S
    assert box.lifetime_s(s) == lifetime
    assert abs(int(meta["labels"]["openforge.deadline"]) - (time.time() + lifetime)) < 30
    assert pod_spec["activeDeadlineSeconds"] == lifetime
    assert pod_spec["containers"][0]["resources"]["limits"] == {
        "cpu": "1",
        "memory": "4096Mi",
        "ephemeral-storage": "10240Mi",
    }
    [cm] = env.kube.objects("v1/configmaps", env.ns).values()
    assert meta["ownerReferences"] == [km.owner_reference({**cm, "kind": "ConfigMap"})]
    token = next(
        e["value"] for e in pod_spec["containers"][0]["env"] if e["name"] == "FORGE_AGENT_TOKEN"
    )
    assert len(token) == 64 and token not in caplog.text and token not in repr(box)
    for path, count in (
        (PODS, 1),
        (r"/apis/networking.k8s.io/v1/namespaces/[^/]+/networkpolicies", 3),  # all, and by phase
        (r"/api/v1/namespaces/[^/]+/configmaps", 1),
        (r"/apis/coordination.k8s.io/v1/namespaces/[^/]+/leases", 1),
        (r"/api/v1/namespaces/[^/]+/serviceaccounts", 1),
    ):
        bodies = env.posts(path)
        assert len(bodies) == count, path
        for body in bodies:
            for version in ("1.31.0", kubernetes_validate.latest_version() + ".0"):
                kubernetes_validate.validate(body, version, strict=True)
    box.destroy()
    box.destroy()
    deletes = env.kube.requests("DELETE", rf"{PODS.replace('[^/]+', env.ns)}/{box.name}")
    assert len(deletes) == 1 and deletes[0][2] == {"gracePeriodSeconds": "0"}
    assert env.pods() == {}
    with pytest.raises(RuntimeError, match="destroyed"):
        box.exec(["true"], 5)


def test_setup_namespace_is_idempotent(env: Env) -> None:
    args = dict(agent_port=AGENT_PORT, proxy_ports=(21000, 21063), policy=env.policy)
    first = setup_namespace(env.api, env.ns, "run-a", **args)
    second = setup_namespace(env.api, env.ns, "run-a", **args)
    assert first == second and first is not None and first["uid"]
    assert len(env.kube.objects("networking.k8s.io/v1/networkpolicies", env.ns)) == 3
    assert len(env.kube.objects("v1/serviceaccounts", env.ns)) == 1
    assert setup_namespace(env.api, env.ns, "run-b", owner=False, **args) is None


def test_429_honours_retry_after(env: Env) -> None:
    env.kube.fault("POST", PODS, status=429, headers={"Retry-After": "2"}, times=2)
    box = env.sandbox()
    box.create(spec())
    assert len(env.posts()) == 3
    waits = [s for s in env.sleeps if s >= 2.0]
    assert len(waits) == 2 and all(2.0 <= s <= 2.3 for s in waits)
    assert box.exec(["true"], 5).exit_code == 0


def test_5xx_and_dropped_connections_are_retried(env: Env) -> None:
    env.kube.fault("POST", PODS, status=503, times=1)
    env.kube.fault("POST", PODS, drop=True, times=1)
    env.kube.fault("GET", PODS + r"/[^/]+", status=500, times=1)
    box = env.sandbox()
    box.create(spec())
    assert len(env.posts()) == 3 and len(env.pods()) == 1
    assert env.sleeps[:3] == pytest.approx([0.1875, 0.375, 0.1875])  # backoff, jittered


def test_retries_are_bounded(env: Env) -> None:
    env.kube.fault("POST", PODS, status=503, times=100)
    box = env.sandbox()
    with pytest.raises(KubeError, match="gave up after 6 attempts"):
        box.create(spec())
    assert len(env.posts()) == 6 and env.pods() == {}


def test_422_names_the_field_and_is_not_retried(env: Env) -> None:
    body = invalid("spec.containers[0].resources.limits.memory", "must be a quantity")
    env.kube.fault("POST", PODS, status=422, body=body, times=5)
    box = env.sandbox()
    with pytest.raises(KubeInvalid, match=r"spec\.containers\[0\]\.resources\.limits\.memory"):
        box.create(spec())
    assert len(env.posts()) == 1 and env.sleeps == []


def test_422_message_never_carries_the_token() -> None:
    def fn(*args: Any, **kwargs: Any) -> None:
        e = ApiException(status=422, reason="Invalid")
        e.body = json.dumps(invalid("spec.containers[0].env[4].value", "bad value 'SECRET'"))
        raise e

    with pytest.raises(KubeInvalid) as info:
        call(fn, what="create pod x", redact=("SECRET",))
    assert "SECRET" not in str(info.value) and "env[4].value" in str(info.value)


def test_lost_create_response_adopts_our_pod(env: Env) -> None:
    env.kube.fault("POST", PODS, status=500, commit=True, times=1)  # written, answer lost
    box = env.sandbox()
    box.create(spec())
    assert len(env.posts()) == 2  # the retry met 409 and found its own nonce
    assert env.deletes() == []
    assert box.exec(["echo", "ok"], 5).stdout == "ok\n"


def test_stale_pod_of_the_same_attempt_is_replaced(env: Env) -> None:
    first = env.sandbox()
    first.create(spec())
    first._state.name = None  # as if its HarnessPod died: the pod stays behind
    old_uid = env.pods()[first.name]["metadata"]["uid"]
    second = env.sandbox()
    second.create(spec())
    assert second.name == first.name
    assert env.pods()[second.name]["metadata"]["uid"] != old_uid
    assert len(env.deletes()) == 1
    assert second.exec(["true"], 5).exit_code == 0


def test_a_foreign_pod_with_our_name_is_left_alone(env: Env) -> None:
    name = km.pod_name(spec().labels)
    env.kube.put(
        "v1/pods",
        env.ns,
        name,
        {"metadata": {"name": name, "namespace": env.ns, "labels": {"app": "theirs"}}},
    )
    box = env.sandbox()
    with pytest.raises(KubeError, match="not a sandbox of this run"):
        box.create(spec())
    box._state.name = None  # do not let cleanup delete it either
    assert env.deletes() == [] and name in env.pods()


def test_pending_past_timeout_is_deleted(env: Env) -> None:
    env.kubelet.hold = lambda name: True
    box = env.sandbox(pod_start_timeout_s=1.0)
    with pytest.raises(PodStartError, match="still pending after 1s"):
        box.create(spec())
    assert env.pods() == {}
    [delete] = env.deletes()
    assert delete[2] == {"gracePeriodSeconds": "0"}


def test_failed_pod_is_an_infrastructure_error(env: Env) -> None:
    env.kubelet.fail = lambda name: True
    box = env.sandbox()
    with pytest.raises(PodStartError, match="Injected"):
        box.create(spec())
    assert env.pods() == {}


def test_dropped_watches_are_resumed(env: Env) -> None:
    released = threading.Event()
    env.kubelet.hold = lambda name: not released.is_set()
    empty = env.kube.fault("GET", PODS, status=200, times=2, params=("watch", "fieldSelector"))
    cut = env.kube.fault("GET", PODS, drop=True, times=1, params=("watch", "fieldSelector"))

    def release() -> None:
        while empty.hits + cut.hits < 3:
            time.sleep(0.02)
        released.set()

    threading.Thread(target=release, daemon=True).start()
    box = env.sandbox()
    box.create(spec())
    assert empty.hits == 2 and cut.hits == 1
    watches = [
        r
        for r in env.kube.requests("GET", PODS.replace("[^/]+", env.ns))
        if "fieldSelector" in r[2]
    ]
    assert len(watches) >= 4
    assert box.exec(["true"], 5).exit_code == 0


def test_creation_is_rate_limited(env: Env) -> None:
    waits: list[float] = []
    bucket = TokenBucket(qps=5, burst=2, clock=lambda: 0.0, sleep=waits.append, rng=lambda: 0.0)
    boxes = [env.sandbox(bucket=bucket) for _ in range(6)]
    threads = [
        threading.Thread(target=b.create, args=(spec(attempt=i),)) for i, b in enumerate(boxes)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(env.posts()) == 6 and len(env.pods()) == 6
    assert sorted(waits) == pytest.approx([0.2, 0.4, 0.6, 0.8])  # 2 at once, then 1/qps apart
    assert all(b.exec(["true"], 5).exit_code == 0 for b in boxes)


def _bare_pod(
    env: Env, run: str, name: str, deadline: float, beat: str | None = None, pod: str = "hp-0"
) -> None:
    labels = km.pod_labels({"run": run, "pod": pod, "attempt": "0"}, deadline, None)
    if beat is not None:
        labels["openforge.heartbeat"] = beat
    env.kube.put(
        "v1/pods", env.ns, name, {"metadata": {"name": name, "namespace": env.ns, "labels": labels}}
    )


def test_reap_pods_deletes_only_the_runs_pods_and_expired_ones(env: Env) -> None:
    env.kubelet.hold = lambda name: True
    now = time.time()
    _bare_pod(env, "run-a", "a1", now + 600)
    _bare_pod(env, "run-a", "a2", now + 600)
    _bare_pod(env, "run-b", "b1", now + 600)
    _bare_pod(env, "run-c", "c-expired", now - 5)
    env.kube.put("v1/pods", env.ns, "other", {"metadata": {"name": "other", "labels": {}}})
    assert reap_pods(env.api, env.ns, "run-a", policy=env.policy) == 3
    assert sorted(env.pods()) == ["b1", "other"]
    assert reap_pods(env.api, env.ns, None, policy=env.policy) == 0  # only expired ones
    sel = [r[2]["labelSelector"] for r in env.kube.requests("GET") if "labelSelector" in r[2]]
    assert sel[0] == "openforge.role=sandbox,openforge.run=run-a"


def test_reap_skips_the_sweep_when_list_fails(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    _bare_pod(env, "run-a", "a1", time.time() - 5)
    env.kube.fault("GET", PODS, status=500, times=100, params=("labelSelector",))
    assert reap_pods(env.api, env.ns, "run-a", policy=env.policy) is None
    assert "skipping this sweep" in caplog.text
    assert "a1" in env.pods() and env.deletes() == []
    rec = Reconciler(env.api, env.ns, "run-a", policy=env.policy)
    assert rec.sweep() is None and rec.skipped == 1


def test_orphans_of_dead_harness_pods_are_reaped(env: Env) -> None:
    now = time.time()
    live = Heartbeat(env.api, env.ns, "run-a", "hp-live", ttl_s=60, policy=env.policy)
    assert live.beat()
    dead = Heartbeat(
        env.api, env.ns, "run-a", "hp-dead", ttl_s=60, policy=env.policy, clock=lambda: now - 120
    )
    assert dead.beat()
    _bare_pod(env, "run-a", "alive", now + 600, beat=live.name)
    _bare_pod(env, "run-a", "orphan", now + 600, beat=dead.name)
    _bare_pod(env, "run-a", "lost", now + 600, beat=kc.lease_name("run-a", "hp-gone"))
    _bare_pod(env, "run-a", "unbeaten", now + 600)  # no heartbeat label: only its deadline
    lease_list = env.kube.fault(
        "GET", r"/apis/coordination.k8s.io/v1/namespaces/[^/]+/leases", status=500, times=6
    )
    assert reap_pods(env.api, env.ns, "run-a", orphans_only=True, policy=env.policy) == 0
    assert lease_list.hits == 6  # could not tell the living from the dead: reaped nothing
    rec = Reconciler(env.api, env.ns, "run-a", policy=env.policy)
    assert rec.sweep() == 2 and rec.reaped == 2
    assert sorted(env.pods()) == ["alive", "unbeaten"]
    live.stop()
    assert kc.lease_name("run-a", "hp-live") not in env.kube.objects(
        "coordination.k8s.io/v1/leases", env.ns
    )
    assert reap_pods(env.api, env.ns, "run-a", orphans_only=True, policy=env.policy) == 1


def test_a_throttling_server_makes_no_stale_lease_an_orphan(env: Env) -> None:
    """While the server throttles (429s within a Lease's TTL), a live HarnessPod's renewals may
    be the ones held back: its stale Lease reaps nothing; once a TTL has passed without a 429,
    the stale Lease's pods go."""
    now = time.time()
    stale = Heartbeat(
        env.api, env.ns, "run-a", "hp-slow", ttl_s=30, policy=env.policy, clock=lambda: now - 60
    )
    assert stale.beat()
    _bare_pod(env, "run-a", "slow", now + 600, beat=stale.name)
    # This process is answered a 429 (on a path only it asks for: the test kubelet's own
    # requests could take a fault on the pod list first, and did under a loaded CI)
    probe = rf"{PODS.replace('[^/]+', env.ns)}/probe-429"
    env.kube.fault("GET", probe, status=429, headers={"Retry-After": "1"}, times=1)
    with pytest.raises(ApiException):  # 429, then the pod that is not there: 404
        call(client.CoreV1Api(env.api).read_namespaced_pod, "probe-429", env.ns, policy=env.policy)
    assert len(env.kube.requests("GET", probe)) == 2  # the 429, then the retry
    assert reap_pods(env.api, env.ns, "run-a", orphans_only=True, policy=env.policy) == 0
    assert sorted(env.pods()) == ["slow"]
    later = time.time() + 31
    assert reap_pods(env.api, env.ns, "run-a", orphans_only=True, policy=env.policy, now=later) == 1


def test_leases_stale_all_at_once_reap_nothing(env: Env) -> None:
    """Three of four HarnessPods' Leases stale in one sweep is taken for the API failing their
    renewals, not for three deaths: no pod goes by its Lease (its deadline still applies); one
    of four stale is a death, and its pod goes."""
    now = time.time()
    for i in range(4):
        clock = (lambda: now) if i == 3 else (lambda: now - 120)
        beat = Heartbeat(env.api, env.ns, "run-a", f"hp-{i}", ttl_s=30, policy=env.policy,
                         clock=clock)  # fmt: skip
        assert beat.beat()
        _bare_pod(env, "run-a", f"p{i}", now + 600, beat=beat.name)
    _bare_pod(env, "run-a", "late", now - 5, beat=kc.lease_name("run-a", "hp-0"))
    assert reap_pods(env.api, env.ns, "run-a", orphans_only=True, policy=env.policy) == 1
    assert sorted(env.pods()) == ["p0", "p1", "p2", "p3"]  # only the one past its deadline went
    for i in (1, 2):
        Heartbeat(env.api, env.ns, "run-a", f"hp-{i}", ttl_s=30, policy=env.policy).beat()
    assert reap_pods(env.api, env.ns, "run-a", orphans_only=True, policy=env.policy) == 1
    assert sorted(env.pods()) == ["p1", "p2", "p3"]


def test_no_pod_is_made_before_its_lease(env: Env) -> None:
    """k8s_scale at 1,000: Lease creates given up under throttling left pods naming a Lease that
    did not exist, which the reconcile pass deleted as orphans while they were in use. A
    sandbox whose HarnessPod's Lease cannot be made fails (an infrastructure failure, retried)
    before its pod is posted; once the Lease can be made, the next create goes through."""
    leases = r"/apis/coordination.k8s.io/v1/namespaces/[^/]+/leases"
    env.kube.fault("POST", leases, status=503, times=12)  # the first beat's and the retry's
    box = env.sandbox()
    with pytest.raises(KubeError, match=r"heartbeat Lease \S+ could not be created"):
        box.create(spec())
    assert env.posts() == []
    again = env.sandbox()  # the next attempt's sandbox
    again.create(spec(attempt=1))
    assert len(env.posts()) == 1
    assert again.exec(["true"], 5).exit_code == 0


def test_a_replaced_harness_pods_pods_go_at_once(env: Env) -> None:
    """The pool replaced hp-stuck (hung, not dead): its Lease is still fresh (its process may
    still beat), yet its pods are deleted now, not when the Lease expires; the other
    HarnessPod's pods, and other runs' pods of the same name, stay."""
    now = time.time()
    beats = {}
    for hp in ("hp-stuck", "hp-fine"):
        beats[hp] = Heartbeat(env.api, env.ns, "run-a", hp, ttl_s=60, policy=env.policy)
        assert beats[hp].beat()
    _bare_pod(env, "run-a", "stuck1", now + 600, beat=beats["hp-stuck"].name, pod="hp-stuck")
    _bare_pod(env, "run-a", "stuck2", now + 600, beat=beats["hp-stuck"].name, pod="hp-stuck")
    _bare_pod(env, "run-a", "fine", now + 600, beat=beats["hp-fine"].name, pod="hp-fine")
    _bare_pod(env, "run-b", "other-run", now + 600, pod="hp-stuck")
    assert reap_pods(env.api, env.ns, "run-a", orphans_only=True, policy=env.policy) == 0
    reaped = reap_pods(
        env.api, env.ns, "run-a", orphans_only=True, dead_pods=("hp-stuck",), policy=env.policy
    )
    assert reaped == 2
    assert sorted(env.pods()) == ["fine", "other-run"]


def test_heartbeat_renews_its_lease(env: Env) -> None:
    t = [1_800_000_000.0]
    beat = Heartbeat(
        env.api, env.ns, "run-a", "hp-0", ttl_s=45, policy=env.policy, clock=lambda: t[0]
    )
    assert beat.beat()
    t[0] += 10
    assert beat.beat()
    lease = env.kube.objects("coordination.k8s.io/v1/leases", env.ns)[beat.name]
    assert lease["spec"]["renewTime"] == micro_time(t[0])
    assert lease["spec"]["leaseDurationSeconds"] == 45
    env.kube.fault("PATCH", r".*/leases/.*", status=503, times=6)
    assert beat.beat() is False  # logged, never raised


def test_host_mounts_are_refused(env: Env) -> None:
    box = env.sandbox()
    with pytest.raises(ValueError, match="cannot mount host paths"):
        box.create(spec(ro_mounts={"/usr/lib": "/opt/x"}))
    assert env.posts() == []
