"""GUI tasks on the kubernetes backend: the ``browser`` harness on a MiniWoB++ task (the web
suite's tasks were run the same way while this was built), each attempt a pod of the harness's
gui image (kmock's API, the test controller starting pods as containers of the tests' dockerd).
Pods cannot mount host paths, so the services launcher, the web applications and MiniWoB's HTML
come baked into the image; the oracle scores 1.0 from them and no pod is left. Skipped, with the
reason, where the gui root filesystem is not cached (as the docker GUI tests are)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from forge.config import PolicyConfig
from tasks.loader import load_suite

from .kube_controller import DockerKubelet, KMock, emulated_cluster

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.docker,
    pytest.mark.browser,
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.full,  # ~40 s, and needs the gui root filesystem (forge image build gui)
]
NS, RUN = "gui", "kube-gui"
# one case (suite time): a MiniWoB++ task needs the launcher and MiniWoB's HTML baked in; the
# web apps are baked the same way (tests/forge/images/test_tags.py lists every baked path)
CASES = [("miniwob", "click-button-sequence-s0")]


@pytest.fixture(scope="module")
def cluster(
    docker_daemon: Any, gui_images: dict[str, str]
) -> Iterator[tuple[KMock, DockerKubelet]]:
    with emulated_cluster(docker_daemon.host, NS) as running:
        yield running


@pytest.fixture(scope="module")
def kube_pod(ray_cluster: Any, cluster: tuple[KMock, DockerKubelet]) -> Iterator[Any]:
    from ray import serve

    from actors.harness_pod import HarnessPod
    from serve.policy import deploy_policy

    kube, _ = cluster
    sandbox = {
        "backend": "kubernetes",
        "kubernetes": {"api_url": kube.url, "namespace": NS, "agent_port": 18941,
                       "pod_start_timeout_s": 90, "heartbeat_s": 5},
    }  # fmt: skip
    handle = deploy_policy(PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25), "kube-gui")
    pod = (
        ray_cluster.remote(HarnessPod)
        .options(num_cpus=0.25)
        .remote(handle, pod_id="kube-gui", run=RUN, sandbox=sandbox)
    )
    ray_cluster.get(pod.start.remote())
    yield pod
    ray_cluster.get(pod.stop.remote())
    ray_cluster.kill(pod)
    serve.delete("kube-gui")


@pytest.mark.parametrize(("suite", "task_id"), CASES)
def test_browser_oracle_in_a_pod(
    ray_cluster: Any,
    cluster: tuple[KMock, DockerKubelet],
    gui_images: dict[str, str],
    kube_pod: Any,
    suite: str,
    task_id: str,
) -> None:
    kube, _ = cluster
    task = next(t for t in load_suite(suite) if t.id == task_id)
    before = len(kube.requests("POST", rf"/api/v1/namespaces/{NS}/pods"))
    ep = ray_cluster.get(
        kube_pod.run_episode.remote(task.model_dump(), "browser", episode_id=suite)
    )
    assert (ep.status, ep.reward, ep.failure) == ("ok", 1.0, None), ep.harness_log[-3000:]
    assert any(t.images for t in ep.turns), "no screenshot reached the policy"
    posted = [r[3] for r in kube.requests("POST", rf"/api/v1/namespaces/{NS}/pods")][before:]
    pods = [p["spec"]["containers"][0] for p in posted]
    # the harness ran in its gui image (a mount it lacked would have refused the pod)
    assert gui_images["browser"] in {c["image"] for c in pods}
    assert kube.objects("v1/pods", NS) == {}
