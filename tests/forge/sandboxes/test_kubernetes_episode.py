"""One real episode on the kubernetes backend: a HarnessPod (a Ray actor before a Serve Policy
with the scripted oracle) configured with ``sandbox.backend=kubernetes`` and kmock's URL runs
the react harness on a smoke task. The test-only controller starts each pod kmock receives as a
container of the test dockerd (host network, the agent on its own loopback IP), so the harness
reaches the proxy on loopback (proxy.host's default; kmock is local, so check_isolation allows
it) and the verifier runs in a second pod. The oracle scores 1.0 and no pod is left."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actors.harness_pod import HarnessPod
from forge.config import PolicyConfig, ProxyConfig, SandboxConfig
from forge.config.sandbox import PROXY_PORTS
from forge.sandboxes.registry import check_isolation
from serve.policy import deploy_policy
from tasks.loader import load_suite

from .kube_controller import DockerKubelet, KMock, emulated_cluster

pytestmark = [pytest.mark.k8s, pytest.mark.docker, pytest.mark.ray, pytest.mark.slow]
NS, RUN = "episode", "kube-episode"


@pytest.fixture(scope="module")
def cluster(docker_daemon, docker_images) -> Iterator[tuple[KMock, DockerKubelet]]:
    with emulated_cluster(docker_daemon.host, NS) as running:
        yield running


def test_react_episode_in_kubernetes_pods_oracle_1(ray_cluster, cluster, docker_images) -> None:
    ray = ray_cluster
    kube, _ = cluster
    sandbox = {
        "backend": "kubernetes",
        "kubernetes": {"api_url": kube.url, "namespace": NS, "agent_port": 18939,
                       "pod_start_timeout_s": 60, "heartbeat_s": 5},
    }  # fmt: skip
    check_isolation(SandboxConfig.model_validate(sandbox), ProxyConfig())
    oracle = deploy_policy(PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25), "k8s-oracle")
    pod = (
        ray.remote(HarnessPod)
        .options(num_cpus=0.25)
        .remote(oracle, pod_id="k8s-a", run=RUN, sandbox=sandbox)
    )
    url = ray.get(pod.start.remote())
    task = next(t for t in load_suite("smoke") if t.id == "json_extract")
    try:
        good = ray.get(pod.run_episode.remote(task.model_dump(), "react", episode_id="g"))
    finally:
        ray.get(pod.stop.remote())
    assert (good.status, good.reward, good.failure) == ("ok", 1.0, None), good.harness_log
    assert len(good.turns) == len(task.solution) + 1
    posted = [r[3] for r in kube.requests("POST", rf"/api/v1/namespaces/{NS}/pods")]
    images = sorted(p["spec"]["containers"][0]["image"] for p in posted)
    assert images == sorted([docker_images["react"], docker_images["base"]])  # harness, verifier
    assert {p["metadata"]["labels"]["openforge.run"] for p in posted} == {RUN}
    assert kube.objects("v1/pods", NS) == {}
    # The default proxy_ports: the proxy listens on one, and the run's NetworkPolicy lets its
    # sandbox pods reach exactly those ports of the HarnessPods' pods.
    lo, hi = PROXY_PORTS
    assert lo <= int(url.rsplit(":", 1)[1]) <= hi
    [policy] = kube.objects("networking.k8s.io/v1/networkpolicies", NS).values()
    ports = [{"protocol": "TCP", "port": lo, "endPort": hi}]
    assert [rule["ports"] for rule in policy["spec"]["egress"]] == [ports]
