"""One real episode on the kubernetes backend: a HarnessPod (a Ray actor before a Serve Policy
with the scripted oracle) configured with ``sandbox.backend=kubernetes`` and kmock's URL runs
the react harness on a smoke task. The test-only controller starts each pod kmock receives as a
container of the test dockerd (host network, the agent on its own loopback IP), so the harness
reaches the proxy on loopback (proxy.host's default; kmock is local, so check_isolation allows
it) and the task's command verifier runs in a second pod (its JSON checks read the copy of the
workspace). The oracle scores 1.0 and no pod is left."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actors.harness_pod import HarnessPod
from forge.config import PolicyConfig, ProxyConfig, SandboxConfig
from forge.config.sandbox import PROXY_PORTS
from forge.sandboxes.kube_manifests import HARNESS_SELECTOR
from forge.sandboxes.registry import check_isolation
from serve.policy import deploy_policy
from tasks.loader import load_suite

from .kube_controller import DockerKubelet, KMock, emulated_cluster
from .netpol import may_connect

pytestmark = [pytest.mark.k8s, pytest.mark.docker, pytest.mark.ray, pytest.mark.slow]
NS, RUN = "episode", "kube-episode"


def kube_sandbox(kube: KMock) -> dict:
    """The sandbox section of a run on the emulated cluster."""
    return {
        "backend": "kubernetes",
        "kubernetes": {"api_url": kube.url, "namespace": NS, "agent_port": 18939,
                       "pod_start_timeout_s": 60, "heartbeat_s": 5},
    }  # fmt: skip


@pytest.fixture(scope="module")
def cluster(docker_daemon, docker_images) -> Iterator[tuple[KMock, DockerKubelet]]:
    with emulated_cluster(docker_daemon.host, NS) as running:
        yield running


def reaches(policies: list[dict], pods: list[dict], *ports: int | None) -> dict[str, list[int]]:
    """Per phase, which of the proxy's ports (and ``ports``) of a HarnessPod its pods may
    connect to under ``policies`` (netpol.py: NetworkPolicy egress as Kubernetes applies it)."""
    lo, hi = PROXY_PORTS
    probe = sorted({lo, hi, *(p for p in ports if p), 6379, 8265, 52365})
    out: dict[str, list[int]] = {}
    for p in pods:
        labels = p["metadata"]["labels"]
        ok = [n for n in probe if may_connect(policies, labels, HARNESS_SELECTOR, n)]
        out.setdefault(labels["openforge.phase"], ok)
        assert out[labels["openforge.phase"]] == ok
    return out


def test_react_episode_in_kubernetes_pods_oracle_1(ray_cluster, cluster, docker_images) -> None:
    ray = ray_cluster
    kube, _ = cluster
    sandbox = kube_sandbox(kube)
    check_isolation(SandboxConfig.model_validate(sandbox), ProxyConfig())
    oracle = deploy_policy(PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25), "k8s-oracle")
    pod = (
        ray.remote(HarnessPod)
        .options(num_cpus=0.25)
        .remote(oracle, pod_id="k8s-a", run=RUN, sandbox=sandbox)
    )
    url = ray.get(pod.start.remote())
    task = next(t for t in load_suite("smoke") if t.id == "json_extract")
    # a command first: it gets a verifier container of its own; the JSON checks read the copy
    task = task.model_copy(
        update={"verifier": [{"type": "command", "cmd": "true"}, *task.verifier]}
    )
    try:
        good = ray.get(pod.run_episode.remote(task.model_dump(), "react", episode_id="g"))
    finally:
        ray.get(pod.stop.remote())
    assert (good.status, good.reward, good.failure) == ("ok", 1.0, None), good.harness_log
    assert len(good.turns) == len(task.solution) + 1
    posted = [r[3] for r in kube.requests("POST", rf"/api/v1/namespaces/{NS}/pods")]
    images = sorted(p["spec"]["containers"][0]["image"] for p in posted)
    # the harness, the command verifier; the JSON checks after it read the copy: no third pod
    assert images == sorted([docker_images["react"], docker_images["base"]])
    assert {p["metadata"]["labels"]["openforge.run"] for p in posted} == {RUN}
    assert kube.objects("v1/pods", NS) == {}
    # The default proxy_ports: the proxy listens on one, and the run's NetworkPolicies let its
    # agent's pod reach exactly those ports of the HarnessPods' pods, its verifier's nothing
    # (the default verify network, proxy-only: a verifier has no model).
    lo, hi = PROXY_PORTS
    port = int(url.rsplit(":", 1)[1])
    assert lo <= port <= hi
    policies = list(kube.objects("networking.k8s.io/v1/networkpolicies", NS).values())
    ports = [{"protocol": "TCP", "port": lo, "endPort": hi}]
    assert [r["ports"] for p in policies for r in p["spec"]["egress"]] == [ports, ports]
    assert reaches(policies, posted, port) == {"agent": sorted({lo, port, hi}), "verify": []}


def test_each_phase_reaches_out_as_its_network_allows_in_pods(
    ray_cluster, cluster, internet
) -> None:
    """Network by phase on the kubernetes backend: the agent phase's grant reaches the stand-in
    internet through the HarnessPod's egress port (the second of proxy_ports, which the run's
    NetworkPolicy opens), and the grant ends with the phase: the verifier's pod, granted
    nothing, gets no way to the egress proxy. kmock's pods share the host's network, so what
    this shows is the egress path and its keys; the NetworkPolicies that keep a real pod off
    every other address are read as Kubernetes applies them (netpol.py) against the labels
    of the pods the run posted: each phase's pod is fenced by its own phase's policy."""
    from tests.forge.sandboxes.standin import FETCH, STAND_IN

    ray = ray_cluster
    kube, _ = cluster
    url = f"http://{STAND_IN}:{internet}"
    listed = {"mode": "allowlist", "cidrs": [f"{STAND_IN}/32"], "ports": [internet]}
    sandbox = {**kube_sandbox(kube), "network": {"agent": listed}}
    oracle = deploy_policy(PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25), "k8s-net")
    pod = (
        ray.remote(HarnessPod)
        .options(num_cpus=0.25)
        .remote(oracle, pod_id="k8s-net", run=RUN, sandbox=sandbox)
    )
    ray.get(pod.start.remote())
    task = {
        "id": "fetch-both", "instruction": "Save what the URL says.", "files": {"fetch.py": FETCH},
        "solution": [f"python3 fetch.py {url}/agent > got.txt"],
        "verifier": {"type": "command", "cmd": "grep -q 'internet: /agent' got.txt && "
                     'test -z "${http_proxy:-}${HTTPS_PROXY:-}${all_proxy:-}"'},
    }  # fmt: skip
    try:
        ep = ray.get(pod.run_episode.remote(task, "react", episode_id="n"))
    finally:
        ray.get(pod.stop.remote())
    assert ep.status == "ok", ep.harness_log
    assert [(e["phase"], e["allowed"]) for e in ep.egress] == [("agent", True)], ep.egress
    assert ep.reward == 1.0, ep.verifier_detail  # fetched by the agent; no proxy to verify
    assert kube.objects("v1/pods", NS) == {}
    # the phases' pods, as the run's NetworkPolicies fence them on a real cluster
    mine = [r[3] for r in kube.requests("POST", rf"/api/v1/namespaces/{NS}/pods")]
    mine = [p for p in mine if p["metadata"]["labels"]["openforge.episode"] == "n"]
    phases = {p["metadata"]["labels"]["openforge.phase"]: p["metadata"]["labels"] for p in mine}
    assert phases["agent"]["openforge.network"] == "allowlist"
    assert phases["verify"]["openforge.network"] == "proxy-only"
    policies = list(kube.objects("networking.k8s.io/v1/networkpolicies", NS).values())
    lo, hi = PROXY_PORTS  # where the egress proxy listens too
    assert reaches(policies, mine) == {"agent": [lo, hi], "verify": []}
