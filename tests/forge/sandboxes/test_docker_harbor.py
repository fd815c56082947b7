"""Harbor-format tasks run in containers of their own images: real HarnessPods (Ray actors
before a real Serve Policy with the scripted engine) play the example tasks of
examples/harbor through react and pi with sandbox.backend=docker. Each task's image is built
from its Dockerfile (FROM debian, ubuntu and python resolved to the local base, a multi-stage
build with ARG and RUN, an ENTRYPOINT service with a health check), the agent works in its
WORKDIR with its ENV, and tests/test.sh runs in the agent's own container once its processes
are gone (Harbor's mode), or sealed in a fresh one. The oracle (solution/solve.sh) scores 1.0
and noop 0.0; a task whose image fails to build is reported and the rest play; an agent that
forges the reward file and the tests scores 0."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from actors.harness_pod import HarnessPod
from forge.config import PolicyConfig, SandboxConfig
from forge.harnesses.install import PACKAGES
from forge.images.task import prepare
from forge.sandboxes.docker_api import client_for
from serve.policy import deploy_policy
from tasks.loader import load_suite

pytest.importorskip("harbor.models.task.config", reason="the harbor package reads task.toml")
pytestmark = [pytest.mark.docker, pytest.mark.ray, pytest.mark.slow]
RUN = "docker-harbor"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harbor"


@pytest.fixture(scope="module")
def pods(ray_cluster, docker_daemon, docker_images):
    ray = ray_cluster
    sandbox = {"backend": "docker", "docker_host": docker_daemon.host}
    out = {}
    for mode in ("oracle", "noop"):
        config = PolicyConfig(engine={"name": "scripted", "mode": mode}, num_cpus=0.25)
        policy = deploy_policy(config, f"hb-{mode}")
        pod = (
            ray.remote(HarnessPod)
            .options(num_cpus=0.25)
            .remote(policy, pod_id=f"hb-{mode}", run=RUN, sandbox=sandbox)
        )
        ray.get(pod.start.remote())
        out[mode] = pod
    yield out
    ray.get([p.stop.remote() for p in out.values()])


def _play(ray, pods, tasks, harness: str, noop_tasks: int | None = None) -> dict:
    """Each mode's episodes of ``tasks`` at once (noop's of the first ``noop_tasks`` only)."""
    calls = {
        (mode, t.id): pod.run_episode.remote(
            t.model_dump(), harness, episode_id=f"{harness}-{mode}-{t.id}"
        )
        for mode, pod in pods.items()
        for t in (tasks[:noop_tasks] if mode == "noop" else tasks)
    }
    return dict(zip(calls, ray.get(list(calls.values())), strict=True))


@pytest.mark.parametrize(
    "harness",
    [
        "react",
        pytest.param(
            "pi",
            marks=[
                pytest.mark.skipif(
                    not PACKAGES["pi"].installed(),
                    reason="pi is not installed: forge harness install pi",
                ),
                pytest.mark.full,  # ~35 s (the pi image): -m full; react plays them in CI
            ],
        ),
    ],
)
def test_harbor_tasks_oracle_1_noop_0(ray_cluster, docker_daemon, pods, harness):
    loaded = load_suite(f"harbor:{EXAMPLES}")
    client = client_for(docker_daemon.host)
    t0 = time.monotonic()
    config = SandboxConfig(backend="docker", docker_host=docker_daemon.host)
    # the one image that fails to build is reported with its build's last lines; the rest play
    [(bad, field, why)] = prepare([t.model_dump() for t in loaded], config, lambda _: None)
    assert (bad, field) == ("broken-build", "image"), why
    assert "this step fails on purpose" in why and why.count("building ") == 1, why
    tasks = [t for t in loaded if t.id != bad]
    print(f"\n[harbor] {len(tasks)} task images ready in {time.monotonic() - t0:.1f}s")
    # the containers made, watched live (the daemon keeps only its last 256 events, and the
    # tasks' health checks make many)
    stream = client.api.events(
        filters={"label": f"openforge.run={RUN}", "event": "create"}, decode=True
    )
    created: list[dict] = []
    watcher = threading.Thread(target=lambda: created.extend(stream), daemon=True)
    watcher.start()
    # every task's tests score react's noop 0; pi's noop (it answers at once, touching
    # nothing) needs one task to show the same
    episodes = _play(ray_cluster, pods, tasks, harness, None if harness == "react" else 1)
    time.sleep(1.0)  # the last create's event on its way
    stream.close()
    created = [e["Actor"]["Attributes"] for e in created]
    for (mode, task_id), ep in episodes.items():
        assert ep.status == "ok", (task_id, ep.failure, ep.harness_log)
        assert ep.reward == (1.0 if mode == "oracle" else 0.0), (mode, task_id, ep.verifier_detail)
        assert ep.verifier_detail.startswith("test.sh exited 0: reward."), ep.verifier_detail
    greet = episodes[("oracle", "fix-greeting")]
    assert greet.verifier_detail.endswith('reward.json {"cases_passed": 3, "reward": 1}')
    assert json.loads(greet.verifier_outputs["rewards"]) == {"cases_passed": 3, "reward": 1}
    # a command installed outside the workdir, tests importing a module beside them, a
    # solution longer than a sampled turn: as Harbor runs them, in the agent's own container
    tool = episodes[("oracle", "install-tool")]
    assert json.loads(tool.verifier_outputs["ctrf.json"])["results"]["summary"]["passed"] == 4
    assert "primes 500: passed" in tool.verifier_outputs["test-stdout.txt"]
    assert "A /usr/local/bin/primes" in tool.verifier_outputs["system_changes"].splitlines()
    # the image's ENTRYPOINT service (its token only in its memory) served agent and tests
    assert (
        "the service says: ok"
        in episodes[("oracle", "service-token")].verifier_outputs["test-stdout.txt"]
    )
    services = [a for a in created if "openforge.service" in a]
    agents = [a for a in created if "openforge.service" not in a]
    # the tests ran in the agent's own container (Harbor's mode), of the task's own image;
    # compose-api's api service beside it, once per episode
    assert len(agents) == len(episodes)
    assert {a["image"].split(":")[0] for a in agents} == {f"openforge/task-{t.id}" for t in tasks}
    n_compose = sum(task_id == "compose-api" for _, task_id in episodes)
    assert [a["openforge.service"] for a in services] == ["api"] * n_compose
    assert client.api.containers(all=True, filters={"label": f"openforge.run={RUN}"}) == []


def test_sealed_tests_see_only_the_workdir_and_safe_interpreters(ray_cluster, pods) -> None:
    """Sealed (verifier.environment_mode = "separate", or harbor_verify=sealed): a fresh
    container with a copy of the workdir and OpenForge's interpreter settings: the correct
    agent of install-tool scores 0 there (its command is outside the workdir, its tests import
    a sibling module under PYTHONSAFEPATH), which is why Harbor's mode is the default."""
    (task,) = load_suite(f"harbor:{EXAMPLES / 'install-tool'}")
    data = task.model_dump()
    data["verifier"]["in_place"] = False
    ep = ray_cluster.get(pods["oracle"].run_episode.remote(data, "react"))
    assert (ep.status, ep.reward) == ("ok", 0.0), ep.verifier_detail
    assert "No module named 'helpers'" in ep.verifier_outputs["test-stdout.txt"]
    assert "A /usr/local/bin/primes" in ep.verifier_outputs["system_changes"]  # still recorded


def test_a_prebuilt_image_the_daemon_has_is_used(docker_daemon, docker_images) -> None:
    """port-config names docker_image (as Terminal-Bench 2 does): when the daemon has it, the
    task's image starts from it and its Dockerfile is not built."""
    from forge.images import tags as images
    from forge.images.task import plan

    client = client_for(docker_daemon.host)
    (task,) = load_suite(f"harbor:{EXAMPLES / 'port-config'}")
    env = task.environment.model_dump()
    client.images.get(images.base_tag()).tag("openforge-example/port-config", "1.0")
    try:
        _, dockerfile, note = plan(env, SandboxConfig().image_aliases, client)
    finally:
        client.images.remove("openforge-example/port-config:1.0")
    assert dockerfile.startswith("FROM openforge-example/port-config:1.0\n") and note == ""
    _, dockerfile, note = plan(env, SandboxConfig().image_aliases, client)
    assert "ENV APP_PORT=8080" in dockerfile and "is not here: building" in note


CHEAT = """#!/bin/bash
# forge what the verifier reads, outside the workdir, and answer wrong in it
mkdir -p /logs/verifier /tests
echo 1 > /logs/verifier/reward.txt
printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh
chmod +x /tests/test.sh
echo cheat > /etc/cheat
echo 41 > /app/answer.txt
"""
TEST = """#!/bin/bash
ok() { [ "$(cat /app/answer.txt)" = 42 ] && [ ! -e /etc/cheat ] && [ ! -e /app/sales.csv ]; }
if ok; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
"""


def test_an_agent_cannot_forge_the_reward_or_the_tests(ray_cluster, pods, tmp_path: Path):
    task = tmp_path / "answer"
    shutil.copytree(EXAMPLES / "csv-total", task)
    (task / "instruction.md").write_text("Write 42 to /app/answer.txt; delete sales.csv.\n")
    (task / "solution" / "solve.sh").write_text(CHEAT)
    (task / "tests" / "test.sh").write_text(TEST)
    (task / "tests" / "test.sh").chmod(0o755)
    (loaded,) = load_suite(f"harbor:{task}")
    ep = ray_cluster.get(pods["oracle"].run_episode.remote(loaded.model_dump(), "react"))
    assert (ep.status, ep.reward) == ("ok", 0.0), ep.verifier_detail
    assert ep.verifier_detail == "test.sh exited 0: reward.txt 0"
    # what the agent deleted in its workdir stays deleted for the tests (the image has it)
    honest = loaded.model_copy(update={"solution": ["echo 42 > answer.txt && rm sales.csv"]})
    ep = ray_cluster.get(pods["oracle"].run_episode.remote(honest.model_dump(), "react"))
    assert (ep.status, ep.reward) == ("ok", 1.0), ep.verifier_detail


GREET_CHEAT = r"""#!/bin/sh
# forge the reward the tests will read, then kill the tests before they write theirs
mkdir -p /logs/verifier
echo '{"reward": 1}' > /logs/verifier/reward.json
for p in /proc/[0-9]*; do
  grep -q /tests/test.sh "$p/cmdline" 2>/dev/null && kill -9 "${p#/proc/}"
done
"""
LINK_TEST = """#!/bin/bash
if cmp -s /app/output.json /tests/expected.json; then r=1; else r=0; fi
echo "$r" > /logs/verifier/reward.txt
"""
LINK_CHEATS = {
    "direct": "ln -s /tests/expected.json /app/output.json",
    "via-proc": "ln -s /proc/self/root/tests/expected.json /app/output.json",
    "via-dir": "ln -s / /app/root && ln -s root/tests/expected.json /app/output.json",
}


def test_a_program_that_forges_the_reward_and_kills_the_tests_scores_0(ray_cluster, pods) -> None:
    """Issue 30: an agent whose greet.sh writes {"reward": 1} and kills test.sh scored 1.0
    (``test.sh exited -9: reward.json {"reward": 1}``); a run killed by a signal scores 0."""
    (loaded,) = load_suite(f"harbor:{EXAMPLES / 'fix-greeting'}")
    cheat = [{"path": "greet.sh", "content": GREET_CHEAT}, "chmod +x greet.sh"]
    cheater = loaded.model_copy(update={"solution": cheat})
    ep = ray_cluster.get(pods["oracle"].run_episode.remote(cheater.model_dump(), "react"))
    assert (ep.status, ep.reward) == ("ok", 0.0), ep.verifier_detail
    assert ep.verifier_detail.startswith("test.sh was killed by signal 9"), ep.verifier_detail


def test_links_to_the_tests_files_are_removed_before_the_tests_run(
    ray_cluster, pods, tmp_path: Path
) -> None:
    """``ln -s /tests/expected.json output.json`` made the tests compare their expected file
    with itself (1.0); such links are removed, so the answer reads as missing."""
    task = tmp_path / "linked"
    shutil.copytree(EXAMPLES / "csv-total", task)
    (task / "instruction.md").write_text('Write {"total": 555} to /app/output.json.\n')
    (task / "tests" / "expected.json").write_text('{"total": 555}\n')
    (task / "tests" / "test.sh").write_text(LINK_TEST)
    (loaded,) = load_suite(f"harbor:{task}")
    for name, cheat in LINK_CHEATS.items():
        t = loaded.model_copy(update={"solution": [cheat]})
        ep = ray_cluster.get(pods["oracle"].run_episode.remote(t.model_dump(), "react"))
        assert (ep.status, ep.reward) == ("ok", 0.0), (name, ep.verifier_detail)
        assert "removed links to the verifier's files: /app/" in ep.verifier_detail, name
    honest = loaded.model_copy(
        update={"solution": ["""printf '{"total": 555}\\n' > output.json"""]}
    )
    ep = ray_cluster.get(pods["oracle"].run_episode.remote(honest.model_dump(), "react"))
    assert (ep.status, ep.reward) == ("ok", 1.0), ep.verifier_detail
