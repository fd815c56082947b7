"""One real episode in containers: a HarnessPod (a real Ray actor before a real Serve Policy
with the scripted engine) runs the react harness on a smoke task with sandbox.backend=docker;
the harness runs in its own container, the task's command verifier in another (its JSON checks
read the copy of the workspace: no container). The oracle scores 1.0 and noop 0.0, and no
container of the run is left."""

from __future__ import annotations

import time

import pytest

from actors.harness_pod import HarnessPod
from forge.config import PolicyConfig
from forge.sandboxes.docker_api import client_for
from serve.policy import deploy_policy
from tasks.loader import load_suite

pytestmark = [pytest.mark.docker, pytest.mark.ray, pytest.mark.slow]
RUN = "docker-episode"


def _pod(ray, handle, name: str, host: str):
    sandbox = {"backend": "docker", "docker_host": host}
    pod = (
        ray.remote(HarnessPod)
        .options(num_cpus=0.25)
        .remote(handle, pod_id=name, run=RUN, sandbox=sandbox)
    )
    ray.get(pod.start.remote())
    return pod


def test_react_episode_in_containers_oracle_1_noop_0(ray_cluster, docker_daemon, docker_images):
    ray = ray_cluster
    client = client_for(docker_daemon.host)
    oracle = deploy_policy(PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25), "dk-oracle")
    noop_config = PolicyConfig(engine={"name": "scripted", "mode": "noop"}, num_cpus=0.25)
    noop = deploy_policy(noop_config, "dk-noop")
    good_pod, bad_pod = (
        _pod(ray, oracle, "dk-a", docker_daemon.host),
        _pod(ray, noop, "dk-b", docker_daemon.host),
    )
    task = next(t for t in load_suite("smoke") if t.id == "json_extract")
    # a command first: it gets a verifier container of its own; the JSON checks read the copy
    task = task.model_copy(
        update={"verifier": [{"type": "command", "cmd": "true"}, *task.verifier]}
    )
    since = int(time.time()) - 1
    try:
        t0 = time.monotonic()
        good = ray.get(good_pod.run_episode.remote(task.model_dump(), "react", episode_id="g"))
        took = time.monotonic() - t0
        bad = ray.get(bad_pod.run_episode.remote(task.model_dump(), "react", episode_id="b"))
    finally:
        ray.get([good_pod.stop.remote(), bad_pod.stop.remote()])
    print(f"\n[docker] oracle episode (harness and verifier containers) in {took:.1f}s")
    assert (good.status, good.reward, good.failure) == ("ok", 1.0, None), good.harness_log
    assert (bad.status, bad.reward) == ("ok", 0.0)
    assert len(good.turns) == len(task.solution) + 1
    events = client.api.events(
        since=since,
        until=int(time.time()) + 1,
        filters={"label": f"openforge.run={RUN}", "event": "create"},
        decode=True,
    )
    created = [e["Actor"]["Attributes"] for e in events]
    images = {a["image"] for a in created}
    assert docker_images["react"] in images  # the harness ran in its own image
    assert docker_images["base"] in images  # the command verifier in the base image
    assert {a["openforge.episode"] for a in created} == {"g", "b"}
    verifiers = sorted(
        a["openforge.episode"] for a in created if a["image"] == docker_images["base"]
    )
    assert verifiers == ["b", "g"]  # one each: the JSON checks after the command made none
    assert client.api.containers(all=True, filters={"label": f"openforge.run={RUN}"}) == []
