"""A judge that is a model this project serves (``forge serve``'s app over a real Serve Policy
of the ``tiny`` model, weights and all), asked over both of the judge's wires. The tiny model's
verdicts are noise; what is checked is the path: the calls reach it with its key, are
recorded, cached, and a reply with no verdict votes 0."""

from __future__ import annotations

import json

import pytest

from forge.config import PolicyConfig
from rewards.judge import Judge
from serve.policy import deploy_policy
from serve.server import BackgroundServer, make_app

pytestmark = pytest.mark.ray


class _Box:
    workspace = "/ws"


@pytest.fixture(scope="module")
def served(ray_cluster):
    config = PolicyConfig(engine={"name": "torch", "model": "tiny", "seed": 0}, num_cpus=0.5)
    handle = deploy_policy(config, app_name="judge-served")
    with BackgroundServer(make_app(handle, "tiny", api_key="judge-key")) as url:
        yield url


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_served_checkpoint_judges_over_either_wire(served, api, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("FORGE_JUDGE_CACHE", str(tmp_path))
    monkeypatch.setenv("SERVED_JUDGE_KEY", "judge-key")
    base = served + ("/v1" if api == "openai" else "")
    judge = Judge(rubric="The answer is 42.", model="tiny", base_url=base, api=api,
                  api_key_env="SERVED_JUDGE_KEY", n=2, max_tokens=16, temperature=1.0)  # fmt: skip
    verdict = judge.verify_with(_Box(), "42", None)
    record = json.loads(verdict.outputs["judge"])
    assert [c["cached"] for c in record["calls"]] == [False, False]
    assert all(c["vote"] in (None, 0.0, 1.0) for c in record["calls"])
    assert verdict.reward in (0.0, 1.0) and record["model"] == "tiny"
    again = json.loads(judge.verify_with(_Box(), "42", None).outputs["judge"])
    assert [c["reply"] for c in again["calls"]] == [c["reply"] for c in record["calls"]]
    assert [c["cached"] for c in again["calls"]] == [True, True]
    monkeypatch.setenv("SERVED_JUDGE_KEY", "wrong-key")  # the server checks it
    with pytest.raises(Exception, match="HTTP 401"):
        Judge(rubric="Another rubric.", model="tiny", base_url=base, api=api,
              api_key_env="SERVED_JUDGE_KEY").verify_with(_Box(), "42", None)  # fmt: skip
