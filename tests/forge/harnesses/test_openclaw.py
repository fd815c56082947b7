"""The OpenClaw harness: its generated config and command, and the real binary in a HarnessPod."""

from __future__ import annotations

import json

import pytest

from forge.harnesses.install import PACKAGES
from forge.harnesses.openclaw import CONFIG, MOUNT, json_document
from forge.harnesses.registry import get_harness
from forge.sandboxes.base import ExecResult
from tests.forge.harnesses.helpers import attempt_ctx, oracle_and_noop

needs_openclaw = pytest.mark.skipif(
    not PACKAGES["openclaw"].installed(),
    reason="openclaw is not installed: forge harness install openclaw",
)


def test_config_points_openclaw_at_the_attempt_only() -> None:
    claw = get_harness("openclaw", max_tokens=64)
    config = json.loads(claw.files(attempt_ctx())[CONFIG])
    assert config["models"]["mode"] == "replace"  # no built-in provider survives
    (provider,) = config["models"]["providers"].values()
    assert provider["baseUrl"].endswith("/episodes/e/attempts/0/v1")
    assert provider["apiKey"] == "key-1" and provider["api"] == "openai-completions"
    assert provider["models"][0]["id"] == "tiny" and provider["models"][0]["maxTokens"] == 64
    assert config["agents"]["defaults"]["model"]["primary"] == "forge/tiny"
    assert config["tools"]["toolSearch"] is False
    cmd = claw.command(attempt_ctx())
    assert cmd[0].startswith(MOUNT) and cmd[2:4] == ["agent", "exec"]
    assert cmd[cmd.index("--cwd") + 1] == "/workspace" and cmd[-1] == "Write hi to a.txt"
    assert cmd[cmd.index("--config") + 1] == CONFIG
    mapped = claw.command(attempt_ctx(paths={MOUNT: "/host/oc", "/home/agent": "/host/h"}))
    assert mapped[0].startswith("/host/oc/") and "/host/h/.openclaw/forge.json5" in mapped


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        get_harness("openclaw", max_tokens=0)
    with pytest.raises(ValueError, match="context_window"):
        get_harness("openclaw", max_tokens=4096, context_window=1024)


def test_final_answer_reads_the_pretty_printed_report() -> None:
    claw = get_harness("openclaw")
    report = {"ok": True, "status": "ok", "final": "42", "toolSummary": {"calls": 1}}
    out = "[plugins] loaded\n" + json.dumps(report, indent=2) + "\n"
    assert claw.final_answer(ExecResult(0, out, "", 1.0)) == "42"
    assert claw.final_answer(ExecResult(1, "crash\n{ broken", "", 1.0)) is None
    assert json_document('{"a": 1}\n{"b": 2}') == {"b": 2}


@needs_openclaw
@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.full  # ~50-75 s (a 1.4 GB agent): -m full; in CI the other CLI harnesses'
# real episodes and OpenClaw's adapter (above)
def test_real_openclaw_oracle_gets_1_and_noop_gets_0(ray_cluster) -> None:
    eps = oracle_and_noop(ray_cluster, "openclaw", "hello_file")
    good, bad = eps["oracle"], eps["noop"]
    assert all(t.protocol == "chat" for t in good.turns + bad.turns)
    assert good.reward == 1.0 and len(good.turns) == 2  # the solution step, then the answer
    assert bad.reward == 0.0 and len(bad.turns) == 1
    tools = {t["function"]["name"] for t in good.turns[0].request.get("tools", [])}
    assert {"exec", "read", "write"} <= tools  # sent directly, not behind tool search
