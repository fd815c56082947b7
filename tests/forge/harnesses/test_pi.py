"""The pi harness: its generated config and command, and the real pi binary in a HarnessPod."""

from __future__ import annotations

import json

import pytest

from forge.harnesses.base import AttemptContext
from forge.harnesses.install import PACKAGES
from forge.harnesses.pi import AGENT_DIR, MOUNT
from forge.harnesses.registry import get_harness
from forge.sandboxes.base import ExecResult
from tests.forge.harnesses.helpers import attempt_ctx, oracle_and_noop

needs_pi = pytest.mark.skipif(
    not PACKAGES["pi"].installed(), reason="pi is not installed: forge harness install pi"
)


def _ctx(**kw) -> AttemptContext:
    return attempt_ctx(**kw)


def test_config_points_pi_at_the_attempt() -> None:
    pi = get_harness("pi", max_tokens=64)
    files = pi.files(_ctx())
    provider = json.loads(files[f"{AGENT_DIR}/models.json"])["providers"]["forge"]
    assert provider["baseUrl"].endswith("/episodes/e/attempts/0/v1")
    assert provider["apiKey"] == "key-1" and provider["api"] == "openai-completions"
    assert provider["models"] == [{"id": "tiny", "contextWindow": 32768, "maxTokens": 64}]
    cmd = pi.command(_ctx())
    assert cmd[0].startswith(MOUNT) and cmd[-2:] == ["-p", "Write hi to a.txt"]
    assert "--no-session" in cmd and cmd[cmd.index("--mode") + 1] == "json"
    assert pi.env(_ctx())["PI_CODING_AGENT_DIR"] == AGENT_DIR
    # Without isolation the sandbox maps its paths to host paths; so does the command.
    mapped = pi.command(_ctx(paths={MOUNT: "/host/pi", "/home/agent": "/host/home"}))
    assert mapped[0].startswith("/host/pi/")
    assert pi.env(_ctx(paths={"/home/agent": "/host/home"}))["PI_CODING_AGENT_DIR"] == (
        "/host/home/.pi/agent"
    )


def test_system_prompt_and_tools_are_pis_own_flags() -> None:
    cmd = get_harness("pi", system_prompt="Be brief.", tools=["bash", "read"]).command(_ctx())
    assert cmd[cmd.index("--system-prompt") + 1] == "Be brief."
    assert cmd[cmd.index("--tools") + 1] == "bash,read"
    plain = get_harness("pi").command(_ctx())
    assert "--system-prompt" not in plain and "--tools" not in plain
    for bad, field in (({"tools": "bash"}, "tools"), ({"system_prompt": 3}, "system_prompt")):
        with pytest.raises(ValueError, match=f"harness_options.{field}"):
            get_harness("pi", **bad)


def test_final_answer_is_the_last_assistant_text() -> None:
    pi = get_harness("pi")
    end = {
        "type": "agent_end",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "q"}]},
            {"role": "assistant", "content": [{"type": "toolCall", "name": "bash"}]},
            {"role": "toolResult", "content": [{"type": "text", "text": "out"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "42"}]},
        ],
    }
    out = "\n".join(['{"type": "agent_start"}', "not json", json.dumps(end)])
    assert pi.final_answer(ExecResult(0, out, "", 1.0)) == "42"
    assert pi.final_answer(ExecResult(1, "boom", "", 1.0)) is None


def test_missing_install_names_the_command(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("FORGE_CACHE", str(tmp_path))
    with pytest.raises(RuntimeError, match="forge harness install pi"):
        get_harness("pi").ro_mounts()


@needs_pi
@pytest.mark.slow
@pytest.mark.ray
def test_real_pi_oracle_gets_1_and_noop_gets_0(ray_cluster) -> None:
    """With pi's own --system-prompt and --tools (its default prompt and four tools run in the
    docker Harbor and concurrency tests): pi sends our prompt (with the date and working
    directory it appends) and bash alone."""
    options = {"system_prompt": "Use bash.", "tools": ["bash"]}
    eps = oracle_and_noop(ray_cluster, "pi", "json_extract", harness_options=options)
    good, bad = eps["oracle"], eps["noop"]
    request = good.turns[0].request
    assert request["messages"][0]["content"].startswith("Use bash.\nCurrent date: ")
    assert [t["function"]["name"] for t in request["tools"]] == ["bash"]
    assert (good.reward, len(good.turns)) == (1.0, 2)  # the solution step, then the answer
    assert (bad.reward, len(bad.turns)) == (0.0, 1)
