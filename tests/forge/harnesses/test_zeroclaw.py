"""The ZeroClaw harness: its generated config and command; the real binary where one is given
(``FORGE_ZEROCLAW_BIN`` or ``zeroclaw`` on PATH): no build is installable from the registries."""

from __future__ import annotations

import os
import shutil
import tomllib

import pytest

from forge.config import RunConfig
from forge.harnesses.install import HarnessNotInstalled
from forge.harnesses.registry import get_harness, require
from forge.harnesses.zeroclaw import CONFIG_DIR, MOUNT
from forge.sandboxes.base import ExecResult
from tests.forge.harnesses.helpers import attempt_ctx, oracle_and_noop

BINARY = os.environ.get("FORGE_ZEROCLAW_BIN") or shutil.which("zeroclaw")


def test_config_is_a_custom_provider_a_full_risk_profile_and_an_agent(tmp_path) -> None:
    exe = tmp_path / "zeroclaw"
    exe.write_text("")
    claw = get_harness("zeroclaw", binary=str(exe), protocol="responses")
    config = tomllib.loads(claw.files(attempt_ctx(model='ti"ny'))[f"{CONFIG_DIR}/config.toml"])
    provider = config["providers"]["models"]["custom"]["forge"]
    assert provider == {
        "uri": "http://127.0.0.1:8931/episodes/e/attempts/0/v1",
        "api_key": "key-1",
        "model": 'ti"ny',
        "wire_api": "responses",
    }
    risk = config["risk_profiles"]["forge"]
    assert risk["level"] == "full" and risk["allowed_commands"] == ["*"]
    assert risk["sandbox_enabled"] is False and risk["require_approval_for_medium_risk"] is False
    agent = config["agents"]["forge"]
    assert agent["model_provider"] == "custom.forge" and agent["risk_profile"] == "forge"
    assert agent["workspace"]["path"] == "/workspace" and agent["enabled"] is True
    assert claw.protocol == "responses"
    assert claw.ro_mounts() == {str(exe): MOUNT}
    assert claw.command(attempt_ctx()) == [MOUNT, "agent", "-a", "forge", "-m", "Write hi to a.txt"]
    assert claw.env(attempt_ctx())["ZEROCLAW_CONFIG_DIR"] == CONFIG_DIR


def test_without_a_binary_a_run_stops_naming_the_option(tmp_path) -> None:
    with pytest.raises(HarnessNotInstalled, match=r"harness_options\.binary"):
        require("zeroclaw", {})
    with pytest.raises(ValueError, match="not a file"):
        get_harness("zeroclaw", binary=str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="protocol"):
        get_harness("zeroclaw", protocol="anthropic")
    with pytest.raises(ValueError, match="harness_options"):
        RunConfig(harness="zeroclaw", harness_options={"binary": str(tmp_path / "missing")})


def test_final_answer_is_its_reply() -> None:
    claw = get_harness("zeroclaw")
    assert claw.final_answer(ExecResult(0, "\n42\n", "", 1.0)) == "42"
    assert claw.final_answer(ExecResult(1, "error: provider", "", 1.0)) is None


@pytest.mark.skipif(
    BINARY is None,
    reason="no ZeroClaw binary (none is installable from the registries): set FORGE_ZEROCLAW_BIN",
)
@pytest.mark.slow
@pytest.mark.ray
def test_real_zeroclaw_oracle_gets_1_and_noop_gets_0(ray_cluster) -> None:
    eps = oracle_and_noop(ray_cluster, "zeroclaw", "hello_file", harness_options={"binary": BINARY})
    assert eps["oracle"].reward == 1.0 and eps["noop"].reward == 0.0
