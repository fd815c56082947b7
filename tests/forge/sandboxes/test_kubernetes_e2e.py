"""KubernetesSandbox end to end: pods created in kmock (an emulated Kubernetes API; no real API
server can be installed here) are started as containers of the test dockerd by a test-only
controller, which writes their pod IP and phase back; exec and files then go through the real
agent in the real image, and the proxy is reached at ``proxy_host_port()``. The containers use
host networking (that dockerd has no bridge), each agent on its own loopback IP."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Iterator

import pytest

from forge.config import SandboxConfig
from forge.sandboxes.agent_boot import HARNESS_UID
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.kube_calls import RetryPolicy
from forge.sandboxes.kube_reconcile import reap_pods
from forge.sandboxes.kubernetes import KubernetesSandbox, KubeSettings
from tests.forge.httpstub import StubServer

from .kube_controller import DockerKubelet, KMock, emulated_cluster

pytestmark = [pytest.mark.k8s, pytest.mark.docker]
NS = "e2e"


@pytest.fixture(scope="module")
def cluster(docker_daemon, docker_images) -> Iterator[tuple[KMock, DockerKubelet]]:
    with emulated_cluster(docker_daemon.host, NS) as running:
        yield running


def test_pod_in_a_container_exec_files_proxy_destroy(cluster) -> None:
    kube, kubelet = cluster
    stub = StubServer(lambda m, p, h, b: (200, {"path": p}, {}))
    settings = KubeSettings(namespace=NS, agent_port=18938, pod_start_timeout_s=60)
    config = SandboxConfig(backend="kubernetes", disk_mb=16)
    box = KubernetesSandbox(config, settings=settings, api=kube.client(), policy=RetryPolicy())
    try:
        labels = {"run": "e2e", "pod": "hp-0", "episode": "ep-1", "attempt": "0"}
        box.create(SandboxSpec(labels=labels, deadline_s=120, proxy_tcp=stub.address))
        assert box.pod_ip.startswith("127.")
        r = box.exec(["sh", "-c", "id -u; pwd; cat /etc/debian_version"], 20)
        assert r.exit_code == 0, r.stderr
        uid, cwd, _ = r.stdout.splitlines()
        assert (uid, cwd) == (str(HARNESS_UID), "/workspace")  # the harness is unprivileged
        # the token is in the agent's environment (the pod spec's env): not readable to it
        token = box._state.agent._auth.removeprefix("Bearer ")
        r = box.exec(["sh", "-c", "for d in /proc/[0-9]*; do cat $d/environ; done"], 20)
        assert token not in r.stdout + r.stderr and "Permission denied" in r.stderr
        assert token in box.exec(["cat", "/proc/1/environ"], 20, user="root").stdout + (
            box.exec(["sh", "-c", "cat /proc/[0-9]*/environ"], 20, user="root").stdout
        )
        r = box.exec(["sh", "-c", "yes > f; du -m f | cut -f1; rm f"], 60)  # its disk quota
        assert "No space left on device" in r.stderr and int(r.stdout) <= 16, r
        box.put_file("src/a.py", "print(6 * 7)\n")
        assert box.exec(["python3", "src/a.py"], 20).stdout == "42\n"
        with tarfile.open(fileobj=io.BytesIO(box.get_archive("src"))) as tar:
            assert tar.getnames() == ["a.py"]
        url = f"http://{box.proxy_host_port()}/episodes/x/v1/models"
        got = box.exec(["curl", "-s", url], 20)
        assert got.exit_code == 0 and '"/episodes/x/v1/models"' in got.stdout
        [(_, cid)] = kubelet.started.values()
        assert kubelet.docker.api.inspect_container(cid)["State"]["Running"]
    finally:
        box.destroy()
        stub.close()
    assert kube.objects("v1/pods", NS) == {}
    assert reap_pods(kube.client(), NS, "e2e") == 0
    end = time.monotonic() + 20  # the controller removes the container when it sees the delete
    while kubelet.docker.api.containers(all=True, filters={"id": cid}) and time.monotonic() < end:
        time.sleep(0.1)
    assert kubelet.docker.api.containers(all=True, filters={"id": cid}) == []


def test_harness_pod_runs_from_its_image(cluster, docker_images) -> None:
    from forge.harnesses.react import PROGRAM
    from forge.harnesses.registry import get_harness

    kube, _ = cluster
    settings = KubeSettings(namespace=NS, agent_port=18938, pod_start_timeout_s=60)
    box = KubernetesSandbox(harness="react", settings=settings, api=kube.client())
    try:
        labels = {"run": "e2e", "pod": "hp-0", "episode": "ep-2", "attempt": "0"}
        mounts = get_harness("react").ro_mounts()
        box.create(SandboxSpec(labels=labels, deadline_s=120, ro_mounts=mounts))
        assert box.image == docker_images["react"]
        r = box.exec(["python3", "-c", f"print(open({PROGRAM!r}).read()[:2])"], 20)
        assert r.exit_code == 0 and r.stdout.strip(), r.stderr
    finally:
        box.destroy()
