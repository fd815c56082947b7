"""The run's own judge (forge/served_judge.py): a checkpoint deployed beside the Policy on a real
local Ray cluster, answered on the driver's loopback with the run's key, its address handed to
the HarnessPods through their environment. The tiny model's verdicts are noise; what is checked
is the path."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
from ray import serve

from forge.config import RunConfig
from forge.sandboxes.bwrap import bwrap_works
from forge.served_judge import APP, ServedJudge
from rewards.judge import BASE_URL_ENV, KEY_ENV, MODEL_ENV, Judge, unready
from tests.forge.test_cli import FORGE, _env

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "tasks" / "fixtures" / "claweval"


class _Box:
    workspace = "/ws"


def test_pods_get_their_environment_and_a_served_judge_counts_as_ready(monkeypatch) -> None:
    config = RunConfig.model_validate({"placement": {"harness_pod": {"env": {"A": "1"}}}})
    assert config.actor_options("harness_pod")["runtime_env"] == {"env_vars": {"A": "1"}}
    assert "runtime_env" not in RunConfig().actor_options("harness_pod")
    for name in (MODEL_ENV, BASE_URL_ENV, KEY_ENV):
        monkeypatch.delenv(name, raising=False)
    plain, own = Judge(rubric="r"), Judge(rubric="r", base_url="http://judge.test/v1")
    assert unready([plain]) and unready([plain], served=True) is None
    assert unready([own], served=True)  # its own endpoint: the served judge is not its


def test_no_judge_no_deployment() -> None:
    judge = ServedJudge.start(RunConfig())
    assert judge.config == RunConfig()
    judge.stop()  # nothing to stop


@pytest.mark.ray
def test_the_served_judge_answers_the_pods_judges_then_goes(ray_cluster, monkeypatch, tmp_path):
    config = RunConfig.model_validate(
        {"judge": {"engine": {"name": "torch", "model": "tiny", "seed": 0}, "num_cpus": 0.5}}
    )
    judge = ServedJudge.start(config)
    try:
        env = judge.config.placement.harness_pod.env
        assert env[MODEL_ENV] == "tiny" and env[BASE_URL_ENV].startswith("http://127.0.0.1:")
        assert judge.config.actor_options("harness_pod")["runtime_env"]["env_vars"] == env
        for name, value in env.items():  # as a HarnessPod's process has them
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("FORGE_JUDGE_CACHE", str(tmp_path))
        verdict = Judge(rubric="The answer is 42.", max_tokens=16).verify_with(_Box(), "42", None)
        record = json.loads(verdict.outputs["judge"])
        assert record["model"] == "tiny" and [c["cached"] for c in record["calls"]] == [False]
        assert verdict.reward in (0.0, 1.0)
        wrong = httpx.post(env[BASE_URL_ENV] + "/chat/completions", json={}, timeout=10,
                           headers={"Authorization": "Bearer not-the-key"})  # fmt: skip
        assert wrong.status_code == 401  # the run's key only
        assert APP in serve.status().applications
    finally:
        judge.stop()
    assert APP not in serve.status().applications
    with pytest.raises(httpx.ConnectError):
        httpx.get(env[BASE_URL_ENV] + "/models", timeout=5)


@pytest.mark.slow
@pytest.mark.full  # ~66 s: -m full; in CI the deployment, its address in the pods' options
# (test_the_served_judge_answers_the_pods_judges_then_goes) and a judge's address reaching a real
# pod through runtime_env (test_browser_episode.py's vision judge) cover its parts
@pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap")
def test_forge_eval_asks_the_judge_it_serves(tmp_path) -> None:
    """No judge of anyone's: the ClawEval fixture's judged task is scored by the run's own."""
    env = {k: v for k, v in _env().items() if not k.startswith("FORGE_JUDGE")}
    env["FORGE_JUDGE_CACHE"] = str(tmp_path / "cache")
    out = tmp_path / "eval"
    args = ["eval", "examples/oracle.yaml", "policy.engine.mode=noop", "judge.num_cpus=0.5",
            "judge.engine.name=torch", "judge.engine.model=tiny", "task_ids=[f02_capital]",
            "--harness", "react", "--tasks", f"claweval:{FIXTURES}", "-k", "1",
            "--out", str(out)]  # fmt: skip
    r = subprocess.run([*FORGE, *args], capture_output=True, text=True, timeout=600, env=env,
                       cwd=ROOT)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "[forge] judge ready: torch:tiny at http://127.0.0.1:" in r.stdout
    [episode] = [json.loads(line) for line in (out / "react" / "episodes.jsonl").open()]
    record = json.loads(episode["verifier_outputs"]["judge"])
    assert episode["status"] == "ok" and record["model"] == "tiny" and len(record["calls"]) == 1
