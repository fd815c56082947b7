"""The codex harness: its generated config and command, and the real Codex CLI in a HarnessPod."""

from __future__ import annotations

import json
import tomllib

import pytest

from forge.harnesses.base import AttemptContext
from forge.harnesses.codex import CODEX_HOME, MOUNT
from forge.harnesses.install import PACKAGES
from forge.harnesses.registry import get_harness
from forge.sandboxes.base import ExecResult
from tests.forge.harnesses.helpers import attempt_ctx, oracle_and_noop

needs_codex = pytest.mark.skipif(
    not PACKAGES["codex"].installed(), reason="codex is not installed: forge harness install codex"
)


def _ctx(**kw) -> AttemptContext:
    return attempt_ctx(model='ti"ny', **kw)


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


def test_lean_config_and_own_instructions_use_codex_switches() -> None:
    codex = get_harness("codex", lean=True, instructions="Be brief.")
    files = codex.files(_ctx())
    config = tomllib.loads(files[f"{CODEX_HOME}/config.toml"])
    assert files[config["model_instructions_file"]] == "Be brief."
    assert config["web_search"] == "disabled"
    assert config["features"] == {"multi_agent": False, "goals": False}
    assert config["agents"]["enabled"] is False
    assert config["skills"]["include_instructions"] is False
    plain = tomllib.loads(get_harness("codex").files(_ctx())[f"{CODEX_HOME}/config.toml"])
    assert not {"model_instructions_file", "web_search", "features"} & set(plain)


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
    eps = oracle_and_noop(ray_cluster, "codex", "json_extract")
    good, bad = eps["oracle"], eps["noop"]
    assert all(t.protocol == "responses" for t in good.turns + bad.turns)
    assert (good.reward, len(good.turns)) == (1.0, 2)  # the solution step, then the answer
    assert (bad.reward, len(bad.turns)) == (0.0, 1)


@needs_codex
@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.full  # ~20 s: -m full; in CI Codex's oracle and no-op episodes (the test above)
def test_real_lean_codex_fits_a_small_context(ray_cluster) -> None:
    options = {"lean": True, "instructions": "Do the task with your tools, then answer."}
    eps = oracle_and_noop(ray_cluster, "codex", "json_extract", harness_options=options)
    assert eps["oracle"].reward == 1.0 and eps["noop"].reward == 0.0
    tools = {t.get("name") for t in eps["oracle"].turns[0].request["tools"]}
    assert "exec_command" in tools and "multi_agent_v1" not in tools
    assert max(len(t.prompt_ids) for t in eps["oracle"].turns) < 8192  # the tiny model's limit
