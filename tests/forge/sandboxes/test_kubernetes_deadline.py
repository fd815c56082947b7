"""On Kubernetes the attempt's deadline counts from the pod being ready, not from its creation:
waiting for a node and pulling the image are not the agent's time. Against kmock, with the
local kubelet of kube_controller holding the pod Pending (as a slow image pull would) until
the test lets it run."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from forge.sandboxes import kube_manifests as km
from forge.sandboxes import kubernetes as kube_backend
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.kube_calls import RetryPolicy, TokenBucket
from forge.sandboxes.kubernetes import KubernetesSandbox, KubeSettings

from .kube_controller import KMock, LocalKubelet

pytestmark = pytest.mark.k8s
NS = "deadline"


@pytest.fixture
def kubelet() -> Iterator[tuple[KMock, LocalKubelet]]:
    kube = KMock()
    let = LocalKubelet(kube, NS)
    yield kube, let
    kube_backend.shutdown()
    let.close()
    kube.close()


def test_the_deadline_counts_from_the_pod_being_ready(kubelet) -> None:
    kube, let = kubelet
    released = threading.Event()
    let.hold = lambda name: not released.is_set()  # Pending: no node yet, or an image pull
    settings = KubeSettings(
        namespace=NS, agent_port=18941, pod_start_timeout_s=60, heartbeat_s=3600
    )
    policy, bucket = RetryPolicy(timeout_s=10), TokenBucket(100, 100)
    box = KubernetesSandbox(settings=settings, api=kube.client(), policy=policy, bucket=bucket)
    labels = {"run": "r", "pod": "hp-0", "episode": "e", "attempt": "0"}
    spec = SandboxSpec(labels=labels, deadline_s=300, proxy_tcp="10.0.0.9:21000")
    created: list[BaseException] = []

    def create() -> None:
        try:
            box.create(spec)
        except BaseException as e:  # reported below
            created.append(e)

    worker = threading.Thread(target=create)
    worker.start()
    try:
        while not kube.objects("v1/pods", NS) and worker.is_alive():
            time.sleep(0.02)
        [pod] = kube.objects("v1/pods", NS).values()  # created, and held Pending
        ready_at_earliest = time.time()
        released.set()
        worker.join(60)
        assert not worker.is_alive() and not created, created
        # The agent gets its whole 300 s from ready on; the old deadline (creation + 300 s)
        # had already lost the time the pod spent Pending.
        assert box.deadline >= ready_at_earliest + spec.deadline_s
        # The pod's own bounds outlast that deadline whatever the start took within its
        # timeouts: the reaper's label and Kubernetes's activeDeadlineSeconds.
        lifetime = box.lifetime_s(spec)
        assert lifetime >= spec.deadline_s + settings.pod_start_timeout_s + 30
        assert pod["spec"]["activeDeadlineSeconds"] == int(lifetime)
        assert float(pod["metadata"]["labels"][f"{km.LABEL}.deadline"]) >= box.deadline
        assert box.exec(["true"], 5).exit_code == 0
    finally:
        released.set()
        worker.join(60)
        box.destroy()
