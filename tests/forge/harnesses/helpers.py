"""Shared by the harness tests: an attempt context, and one real episode per scripted mode."""

from __future__ import annotations

from typing import Any

from forge.harnesses.base import AttemptContext
from forge.types import Episode


def attempt_ctx(**kw: Any) -> AttemptContext:
    """The context of attempt 0 of episode ``e`` behind the bridge's address; ``kw`` overrides."""
    fields: dict[str, Any] = {
        "base_url": "http://127.0.0.1:8931/episodes/e/attempts/0/v1",
        "anthropic_base_url": "http://127.0.0.1:8931/episodes/e/attempts/0",
        "api_key": "key-1",
        "model": "tiny",
        "instruction": "Write hi to a.txt",
        "workspace": "/workspace",
    }
    return AttemptContext(**{**fields, **kw})


def oracle_and_noop(ray: Any, harness: str, task_id: str, **run: Any) -> dict[str, Episode]:
    """One real episode of smoke task ``task_id`` in ``harness`` under the scripted oracle and
    under noop, each through its own Policy and HarnessPod; asserts both ended ok with every
    turn's tokens recorded."""
    from actors.harness_pod import HarnessPod
    from forge.config import PolicyConfig
    from serve.policy import deploy_policy
    from tasks import load_suite

    task = next(t for t in load_suite("smoke") if t.id == task_id)
    episodes = {}
    for mode in ("oracle", "noop"):
        config = PolicyConfig(engine={"name": "scripted", "mode": mode}, num_cpus=0.25)
        handle = deploy_policy(config, f"{harness}-{mode}")
        pod = (
            ray.remote(HarnessPod).options(num_cpus=0.25).remote(handle, pod_id=f"{harness}-{mode}")
        )
        ray.get(pod.start.remote())
        ep = ray.get(pod.run_episode.remote(task.model_dump(), harness, **run))
        ray.get(pod.stop.remote())
        assert ep.status == "ok", (mode, ep.failure, ep.harness_log[-2000:])
        assert ep.turns and all(t.prompt_ids and t.completion_ids for t in ep.turns)
        episodes[mode] = ep
    return episodes
