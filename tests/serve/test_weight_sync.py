"""Object-store weight sync into every replica of a real Serve Policy deployment."""

from __future__ import annotations

import asyncio

import pytest
import torch

from forge.config import PolicyConfig
from forge.types import ChatRequest, Message, SamplingParams
from serve.engines import EngineRequest
from serve.engines.torch_engine import TorchEngine
from serve.policy import Policy, deploy_policy
from serve.weight_sync import ObjectStoreWeightSync, WeightStore

pytestmark = pytest.mark.ray


def _chat() -> ChatRequest:
    return ChatRequest(
        [Message("user", "hello")], sampling=SamplingParams(temperature=0, max_tokens=12)
    )


def _greedy(engine: TorchEngine) -> list[int]:
    policy = Policy.__new__(Policy)  # only to render the same prompt as the deployment
    policy.tokenizer = engine.tokenizer
    prompt = Policy.tokenize_prompt(policy, _chat())
    out = engine.generate_sync([EngineRequest(prompt, _chat().sampling)])
    return out[0].completion_ids


def test_publish_reaches_every_replica_and_changes_outputs(ray_cluster):
    ray = ray_cluster
    store = ray.remote(WeightStore).options(name="ws-test", num_cpus=0).remote()
    config = PolicyConfig(
        engine={"name": "torch"}, replicas=2, num_cpus=0.25, weight_store="ws-test"
    )
    handle = deploy_policy(config, "ws-policy")
    local = TorchEngine()
    old_ids = _greedy(local)
    state = {k: v.clone() for k, v in local.state_dict().items()}
    with torch.no_grad():
        for v in state.values():
            v.add_(torch.randn_like(v) * 0.05)
    local.load_weights(state)
    new_ids = _greedy(local)
    assert new_ids != old_ids  # the perturbation changes greedy output

    async def versions_and_ids(n: int) -> list[tuple[int, list[int]]]:
        outs = await asyncio.gather(*(handle.generate.remote(_chat()) for _ in range(n)))
        return [(c.policy_version, c.completion_ids) for c in outs]

    before = asyncio.run(versions_and_ids(8))
    assert {v for v, _ in before} == {0} and all(ids == old_ids for _, ids in before)
    sync = ObjectStoreWeightSync(store, replicas=2)
    timing = sync.publish(state, 1)
    assert timing["weight_sync_s"] > 0
    assert len(ray.get(store.replicas.remote())) == 2
    after = asyncio.run(versions_and_ids(16))
    # Every replica answers with version 1 and the new weights' greedy output, from the first
    # request after publish returns.
    assert {v for v, _ in after} == {1}
    assert all(ids == new_ids for _, ids in after)
    with pytest.raises(ray.exceptions.RayTaskError, match="not newer"):
        sync.publish(state, 1)
