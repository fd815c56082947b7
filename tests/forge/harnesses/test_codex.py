"""The codex harness: its generated config and command, and the real Codex CLI in a HarnessPod."""

from __future__ import annotations

import json

import pytest
import tomllib

from forge.harnesses import get_harness
from forge.harnesses.base import AttemptContext
from forge.harnesses.codex import CODEX_HOME, MOUNT
from forge.harnesses.install import PACKAGES
from forge.sandboxes.base import ExecResult

needs_codex = pytest.mark.skipif(
    not PACKAGES["codex"].installed(), reason="codex is not installed: forge harness install codex"
)


def _ctx(**kw) -> AttemptContext:
    return AttemptContext(
        base_url="http://127.0.0.1:8931/episodes/e/attempts/0/v1",
        anthropic_base_url="http://127.0.0.1:8931/episodes/e/attempts/0",
        api_key="key-1",
        model='ti"ny',
        instruction="Write hi to a.txt",
        workspace="/workspace",
        **kw,
    )


def test_config_points_codex_at_the_attempt() -> None:
    codex = get_harness("codex")
    assert codex.protocol == "responses"
    config = tomllib.loads(codex.files(_ctx())[f"{CODEX_HOME}/config.toml"])
    provider = config["model_providers"][config["model_provider"]]
    assert provider["base_url"].endswith("/episodes/e/attempts/0/v1")
    assert provider["wire_api"] == "responses"
    assert codex.env(_ctx())[provider["env_key"]] == "key-1"
    assert config["model"] == 'ti"ny'  # quoted safely
    assert config["approval_policy"] == "never"
    cmd = codex.command(_ctx())
    assert cmd[0].startswith(MOUNT) and cmd[1] == "exec" and cmd[-1] == "Write hi to a.txt"
    assert "--json" in cmd and cmd[cmd.index("-C") + 1] == "/workspace"


def test_final_answer_is_the_last_agent_message() -> None:
    codex = get_harness("codex")
    events = [
        {"type": "thread.started"},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "first"}},
        {"type": "item.completed", "item": {"type": "command_execution"}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "42"}},
        {"type": "turn.completed"},
    ]
    out = "\n".join(json.dumps(e) for e in events) + "\n[1, 2]\n"
    assert codex.final_answer(ExecResult(0, out, "", 1.0)) == "42"
    assert codex.final_answer(ExecResult(1, "crash", "", 1.0)) is None


@needs_codex
@pytest.mark.slow
@pytest.mark.ray
def test_real_codex_oracle_gets_1_and_noop_gets_0(ray_cluster) -> None:
    from actors.harness_pod import HarnessPod
    from forge.config import PolicyConfig
    from serve.policy import deploy_policy
    from tasks import load_suite

    ray = ray_cluster
    task = next(t for t in load_suite("smoke") if t.id == "json_extract")
    rewards = {}
    for mode in ("oracle", "noop"):
        config = PolicyConfig(engine={"name": "scripted", "mode": mode}, num_cpus=0.25)
        handle = deploy_policy(config, f"codex-{mode}")
        pod = ray.remote(HarnessPod).options(num_cpus=0.25).remote(handle, pod_id=f"cx-{mode}")
        ray.get(pod.start.remote())
        ep = ray.get(pod.run_episode.remote(task.model_dump(), "codex", episode_id=f"cx-{mode}"))
        ray.get(pod.stop.remote())
        assert ep.status == "ok", (ep.failure, ep.harness_log[-2000:])
        assert all(t.protocol == "responses" and t.completion_ids for t in ep.turns)
        rewards[mode] = (ep.reward, len(ep.turns))
    assert rewards["oracle"] == (1.0, len(task.solution) + 1)
    assert rewards["noop"] == (0.0, 1)
