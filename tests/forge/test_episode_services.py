"""Episodes of tasks with services, end to end: a real HarnessPod (Ray actor) runs the harness
under the services launcher in a bubblewrap sandbox, the app's state reaches the verifier, and a
service that never comes up is an infrastructure failure (``service_failed``), not a reward 0.

The "agent" is the ``command`` harness running a small program that uses the shop's JSON API
(no browser here: tests/tasks/test_web_suite.py plays the pages).
"""

from __future__ import annotations

import pytest

from actors.harness_pod import HarnessPod
from forge.config import PolicyConfig
from forge.sandboxes.bwrap import bwrap_works
from serve.policy import deploy_policy
from tasks.loader import load_suite
from tasks.webapps.hosted import WEBAPPS

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(not bwrap_works(), reason="bubblewrap cannot build sandboxes here"),
]

BUY_RED_MUG = """
import json, urllib.request
def post(action, body):
    req = urllib.request.Request("http://127.0.0.1:8765/api/" + action, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()
post("add", {"id": 2})
post("order", {})
print("done")
"""


@pytest.fixture(scope="module")
def pod(ray_cluster):
    config = PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25)
    handle = deploy_policy(config, "pod-services")
    actor = ray_cluster.remote(HarnessPod).options(num_cpus=0.25).remote(handle, pod_id="svc")
    ray_cluster.get(actor.start.remote())
    yield ray_cluster, actor
    ray_cluster.get(actor.stop.remote())


def _run(pod, task, program: str):
    ray, actor = pod
    options = {"name": "api-agent", "command": ["python3", "-c", program]}
    return ray.get(actor.run_episode.remote(task.model_dump(), "command", harness_options=options))


def test_app_state_is_verified_after_the_episode(pod) -> None:
    task = next(t for t in load_suite("web") if t.id == "shop_cheapest_mug")
    good = _run(pod, task, BUY_RED_MUG)
    assert (good.status, good.failure, good.reward) == ("ok", None, 1.0), good.harness_log
    idle = _run(pod, task, "print('I ordered it.')")
    assert (idle.status, idle.reward) == ("ok", 0.0)
    assert "orders.length is 0" in idle.verifier_detail


def test_service_that_never_comes_up_is_service_failed(pod) -> None:
    task = next(t for t in load_suite("web") if t.id == "shop_cheapest_mug")
    broken = task.model_copy(
        update={
            "services": [
                task.services[0].model_copy(
                    update={"command": f"python3 {WEBAPPS}/server.py no-such-app --port 8765"}
                )
            ]
        }
    )
    ep = _run(pod, broken, BUY_RED_MUG)
    assert (ep.status, ep.failure, ep.reward) == ("failed", "service_failed", 0.0)
    assert "no web app 'no-such-app'" in ep.harness_log, ep.harness_log
