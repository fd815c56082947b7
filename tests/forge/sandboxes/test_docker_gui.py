"""GUI episodes in containers: the ``browser`` and ``desktop`` harnesses in their images built on
``openforge/gui`` (Debian's Chromium, Xvfb, openbox and X applications) in the tests' own
dockerd, each driven by a real HarnessPod before a real Serve Policy with the scripted oracle.
One web task (its app served inside the container, Chromium through Playwright) and one desktop
task (Xvfb, openbox, xmessage, xdotool, ImageMagick) score 1.0; no container of the run is left.

The gui root filesystem is made once (apt-get in a chroot, minutes) and cached as a tar; a new
daemon imports it. These tests are marked ``full`` (the test command's set-up never builds
that tar): ``forge image build gui && bash scripts/test.sh -m full`` runs them; without the tar
they skip with that command as the reason.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from forge.images import tags as images
from forge.sandboxes.docker_api import client_for

pytestmark = [
    pytest.mark.docker,
    pytest.mark.browser,
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.full,
]
RUN = "docker-gui"
CASES = [("browser", "web", "shop_blue_mug"), ("desktop", "desktop", "xmessage_deploy_decision")]


def test_gui_harness_images_build_on_the_gui_base(gui_images: dict[str, str]) -> None:
    gui = gui_images["gui"]
    assert gui == images.base_tag(gui=True) and gui.startswith("openforge/gui:")
    for name in ("browser", "desktop"):
        assert gui_images[name] == images.harness_tag(name)
        assert gui_images[name].endswith("-" + gui.rsplit("-", 1)[1])
    assert images.harness_tag("react").endswith("-" + gui_images["base"].rsplit("-", 1)[1])


@pytest.fixture(scope="module")
def gui_pod(ray_cluster: Any, docker_daemon: Any, gui_images: dict[str, str]) -> Any:
    """A HarnessPod with docker sandboxes before a Serve Policy with the scripted oracle."""
    from ray import serve

    from actors.harness_pod import HarnessPod
    from forge.config import PolicyConfig
    from serve.policy import deploy_policy

    ray = ray_cluster
    handle = deploy_policy(
        PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25), "docker-gui-oracle"
    )
    sandbox = {"backend": "docker", "docker_host": docker_daemon.host}
    pod = (
        ray.remote(HarnessPod)
        .options(num_cpus=0.25)
        .remote(handle, pod_id="docker-gui", run=RUN, sandbox=sandbox)
    )
    ray.get(pod.start.remote())
    yield pod
    ray.get(pod.stop.remote())
    ray.kill(pod)
    serve.delete("docker-gui-oracle")


@pytest.mark.parametrize(
    ("harness", "suite", "task_id"),
    CASES,
)
def test_oracle_episode_in_a_container(
    ray_cluster: Any,
    docker_daemon: Any,
    gui_images: dict[str, str],
    gui_pod: Any,
    harness: str,
    suite: str,
    task_id: str,
) -> None:
    from tasks.loader import load_suite

    ray = ray_cluster
    client = client_for(docker_daemon.host)
    task = next(t for t in load_suite(suite) if t.id == task_id)
    since = int(time.time()) - 1
    t0 = time.monotonic()
    ep = ray.get(gui_pod.run_episode.remote(task.model_dump(), harness, episode_id=harness))
    print(f"\n[docker gui] {harness} {task_id}: {time.monotonic() - t0:.1f}s")
    assert (ep.status, ep.reward, ep.failure) == ("ok", 1.0, None), ep.harness_log[-3000:]
    assert any(t.images for t in ep.turns), "no screenshot reached the policy"
    events = client.api.events(
        since=since,
        until=int(time.time()) + 1,
        filters={"label": f"openforge.episode={harness}", "event": "create"},
        decode=True,
    )
    created = {(e["Actor"]["Attributes"]["openforge.harness"], e["Actor"]["Attributes"]["image"])
               for e in events}  # fmt: skip
    assert (harness, gui_images[harness]) in created  # the harness ran in its own gui image
    left = client.api.containers(all=True, filters={"label": f"openforge.episode={harness}"})
    assert left == []
