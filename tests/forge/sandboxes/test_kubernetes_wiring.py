"""The kubernetes backend wired into the run: ``sandbox.kubernetes`` reaches the backend,
``sandbox_for``, ``check_isolation`` and ``reap_sandboxes`` dispatch to it, the reconciler the
driver runs, and where the HarnessPod's proxy listens (against kmock: no real API server can be
installed here)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from forge.config import ProxyConfig, SandboxConfig
from forge.sandboxes import kube_cluster as kc
from forge.sandboxes import kube_manifests as km
from forge.sandboxes import kubernetes as kube_backend
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.kube_api import KubeUnavailable
from forge.sandboxes.kubernetes import KubernetesSandbox, is_loopback, reconciler
from forge.sandboxes.registry import check_isolation, reap_sandboxes, sandbox_for

from .kube_controller import KMock

pytestmark = pytest.mark.k8s


def config(url: str, **kube: object) -> SandboxConfig:
    return SandboxConfig.model_validate(
        {"backend": "kubernetes", "kubernetes": {"api_url": url, "namespace": "wired", **kube}}
    )


def pod(name: str, run: str, heartbeat: str = "gone") -> dict:
    labels = {f"{km.LABEL}.role": km.ROLE_SANDBOX, f"{km.LABEL}.run": run,
              f"{km.LABEL}.heartbeat": heartbeat, f"{km.LABEL}.deadline": "9999999999"}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}  # fmt: skip


def test_sandbox_for_builds_a_kubernetes_sandbox_from_the_config(kube: KMock) -> None:
    box = sandbox_for(config(kube.url, agent_port=9999, registry="reg.example"), "react")
    assert isinstance(box, KubernetesSandbox)
    assert box.harness == "react"
    assert (box.settings.namespace, box.settings.agent_port) == ("wired", 9999)
    assert box.settings is box.config.kubernetes


def test_check_isolation_refuses_a_loopback_proxy_for_a_remote_api(kube: KMock) -> None:
    check_isolation(config(kube.url), ProxyConfig())  # kmock is local: loopback is fine
    check_isolation(config(kube.url), ProxyConfig(host="0.0.0.0"))
    remote = config("http://10.255.255.1:6443")
    with pytest.raises(KubeUnavailable, match=r"proxy\.host=0\.0\.0\.0"):
        check_isolation(remote, ProxyConfig())
    with pytest.raises(KubeUnavailable, match="API unusable"):  # nothing answers there
        check_isolation(config("http://127.0.0.1:9"), ProxyConfig())
    box = sandbox_for(remote, None)  # forge eval does not pass the proxy: create() checks too
    with pytest.raises(KubeUnavailable, match="loopback"):
        box.create(SandboxSpec(labels={"run": "r"}, proxy_tcp="127.0.0.1:8000"))
    assert is_loopback("[::1]") and is_loopback("localhost") and not is_loopback("10.0.0.1")


def test_reap_sandboxes_and_the_reconciler_delete_the_runs_pods(kube: KMock, tmp_path) -> None:
    from kubernetes import client

    core = client.CoreV1Api(kube.client())
    for name, run in [("a-1", "run-a"), ("a-2", "run-a"), ("b-1", "run-b")]:
        core.create_namespaced_pod("wired", pod(name, run))
    # a root of its own: the shared default one may hold other processes' dead spare disks,
    # which every reap pass counts (they belong to no run)
    cfg = config(kube.url).model_copy(update={"root": str(tmp_path)})
    assert reap_sandboxes(cfg, "run-a", orphans_only=False) == 2
    assert set(kube.objects("v1/pods", "wired")) == {"b-1"}
    loop = reconciler(cfg, "run-b", interval_s=0.05)
    assert loop.sweep() == 1  # its heartbeat Lease is gone: an orphan
    loop.start()
    loop.stop()
    assert kube.objects("v1/pods", "wired") == {}


def test_harness_pod_listens_on_proxy_host_and_advertises_a_reachable_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from actors.harness_pod import HarnessPod, advertised_host

    assert HarnessPod(None).host == "127.0.0.1"  # loopback unless configured
    monkeypatch.setenv("POD_IP", "10.1.2.3")
    pod = HarnessPod(None, proxy={"host": "0.0.0.0"})
    assert (pod.listen_host, pod.host) == ("0.0.0.0", "10.1.2.3")
    assert advertised_host("fd00::5") == "[fd00::5]"
    monkeypatch.setenv("POD_IP", "fd00::7")
    assert advertised_host("::") == "[fd00::7]"


def test_concurrent_creates_set_the_run_up_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sandboxes created at once (a HarnessPod's first burst) share one namespace setup (its
    NetworkPolicy, ConfigMap and ServiceAccount calls), not one each; a setup that fails is
    tried again by the next create."""
    calls: list[str] = []
    fail = [True]

    def setup(api: object, namespace: str, run: str, **kw: object) -> dict[str, str]:
        calls.append(run)
        time.sleep(0.2)  # the window in which the other creates arrive
        if fail[0]:
            fail[0] = False
            raise RuntimeError("API down")
        return {"uid": f"owner-of-{run}"}

    monkeypatch.setattr(kube_backend.kr, "setup_namespace", setup)
    settings = SandboxConfig(backend="kubernetes").kubernetes
    api = object()
    kube_backend.shutdown()
    with pytest.raises(RuntimeError):
        kube_backend.ensure_run(api, settings, "run-x", None)
    with ThreadPoolExecutor(8) as pool:
        owners = list(pool.map(lambda _: kube_backend.ensure_run(api, settings, "run-x", None),
                               range(8)))  # fmt: skip
    assert owners == [{"uid": "owner-of-run-x"}] * 8
    assert calls == ["run-x", "run-x"]  # the failed one, then one for all eight
    kube_backend.shutdown()


def test_a_default_run_fences_its_sandboxes_to_the_proxy_ports(kube: KMock) -> None:
    """A run with the default ``sandbox.kubernetes`` (only the API's URL and the namespace
    given), against kmock with the local kubelet: the HarnessPod's proxy listens on a port of
    ``proxy_ports``; its sandbox (made as an attempt makes it, handed the proxy's address)
    runs; and the NetworkPolicies the run created let the run's sandbox pods be reached only
    from the HarnessPods, on the agent port, and reach nothing, but for each phase's own
    policy: exactly the proxy ports of the HarnessPods' pods (no other port, no other peer).
    (A whole episode on the default config, in pods of the test dockerd:
    test_kubernetes_episode.py.)"""
    import asyncio

    import yaml

    from actors.harness_pod import HarnessPod
    from forge.config.sandbox import PROXY_PORTS

    from .kube_controller import LocalKubelet

    ns, run = "fenced", "default-run"
    sandbox = {"backend": "kubernetes", "kubernetes": {"api_url": kube.url, "namespace": ns}}
    assert SandboxConfig.model_validate(sandbox).kubernetes.proxy_ports == PROXY_PORTS

    async def play() -> tuple[int, str]:
        pod = HarnessPod(None, pod_id="hp-0", run=run, sandbox=sandbox)
        await pod.start()
        try:
            box = sandbox_for(pod.sandbox_config, "command")
            labels = {"run": run, "pod": pod.pod_id, "episode": "e", "attempt": "0"}
            spec = SandboxSpec(labels=labels, proxy_tcp=f"{pod.host}:{pod.port}")
            await asyncio.to_thread(box.create, spec)
            try:
                out = (await asyncio.to_thread(box.exec, ["echo", "up"], 10)).stdout
            finally:
                box.destroy()
            return pod.port or 0, out
        finally:
            await pod.stop()

    kubelet = LocalKubelet(kube, ns)
    try:
        port, out = asyncio.run(play())
    finally:
        kubelet.close()
        kube_backend.shutdown()
    assert out == "up\n"
    lo, hi = PROXY_PORTS
    assert lo <= port <= hi
    policies = {
        p["metadata"]["name"]: p
        for p in kube.objects("networking.k8s.io/v1/networkpolicies", ns).values()
    }
    policy = policies[kc.network_policy_name(run)]
    spec = policy["spec"]
    harness_pods = [{"podSelector": {"matchLabels": {"openforge.role": "harness-pod"}}}]
    assert spec["egress"] == []  # the run's sandboxes reach nothing but what a phase opens
    for phase in ("agent", "verify"):
        opened = policies[kc.network_policy_name(run, phase)]["spec"]
        assert opened["policyTypes"] == ["Egress"]
        assert opened["egress"] == [
            {"to": harness_pods, "ports": [{"protocol": "TCP", "port": lo, "endPort": hi}]}
        ]
    assert len(policies) == 3
    agent = SandboxConfig().kubernetes.agent_port
    assert spec["ingress"] == [
        {"from": harness_pods, "ports": [{"protocol": "TCP", "port": agent}]}
    ]
    assert spec["podSelector"]["matchLabels"] == {"openforge.run": run, "openforge.role": "sandbox"}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    rendered = {k: policy[k] for k in ("apiVersion", "kind")}
    rendered["metadata"] = {k: policy["metadata"][k] for k in ("name", "namespace", "labels")}
    rendered["spec"] = spec
    print(yaml.safe_dump(rendered, sort_keys=False))  # the policy a default run renders
