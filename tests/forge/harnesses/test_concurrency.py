"""Real harnesses side by side on a 2-core machine: 8 pi episodes and 2 OpenClaw episodes at
once, each in its own sandbox behind its own pod, all finish and pass on the oracle.
(``scripts/bench/harness_concurrency.py`` reports their memory.)"""

from __future__ import annotations

import pytest

from forge.harnesses.install import PACKAGES


def _run_at_once(ray, harness: str, n: int) -> None:
    from actors.harness_pod import HarnessPod
    from forge.config import PolicyConfig
    from serve.policy import deploy_policy
    from tasks.loader import load_suite

    task = next(t for t in load_suite("smoke") if t.id == "hello_file")
    policy = deploy_policy(
        PolicyConfig(engine={"name": "scripted", "mode": "oracle"}, num_cpus=0.1), f"conc-{harness}"
    )
    pods = [
        ray.remote(HarnessPod).options(num_cpus=0.1).remote(policy, pod_id=f"{harness}-{i}")
        for i in range(n)
    ]
    ray.get([p.start.remote() for p in pods])
    episodes = ray.get([p.run_episode.remote(task.model_dump(), harness) for p in pods])
    ray.get([p.stop.remote() for p in pods])
    for p in pods:
        ray.kill(p)
    assert [(ep.status, ep.failure, ep.reward) for ep in episodes] == [("ok", None, 1.0)] * n
    assert len({ep.episode_id for ep in episodes}) == n  # n distinct episodes, none shared
    assert all(t.prompt_ids and t.completion_ids for ep in episodes for t in ep.turns)


@pytest.mark.skipif(not PACKAGES["pi"].installed(), reason="pi is not installed")
@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.full  # ~30 s: -m full; in CI many attempts at once in
# tests/actors/test_scheduler_scale.py
def test_eight_pi_episodes_at_once(ray_cluster) -> None:
    _run_at_once(ray_cluster, "pi", 8)


@pytest.mark.skipif(not PACKAGES["openclaw"].installed(), reason="openclaw is not installed")
@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.full  # ~1.4 GB and 30 s: -m full; eight pi episodes at once run in CI
def test_two_openclaw_episodes_at_once(ray_cluster) -> None:
    _run_at_once(ray_cluster, "openclaw", 2)
