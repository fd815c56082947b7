"""Weight sync into every replica of a real Serve Policy deployment, by both strategies: the
object store, and a collective broadcast from the trainer (gloo here; NCCL on GPUs)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from actors.trainer import Trainer
from forge.config import PolicyConfig
from forge.types import ChatRequest, Message, SamplingParams
from serve.engines.base import EngineRequest
from serve.engines.torch_engine import TorchEngine
from serve.policy import Policy, deploy_policy
from serve.weight_sync import CollectiveWeightSync, ObjectStoreWeightSync, WeightStore

pytestmark = pytest.mark.ray


class PerturbedTrainer(Trainer):
    """The real Trainer, whose weights a test can move without a training step."""

    def perturb(self, scale: float, seed: int) -> None:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * scale)


def _chat() -> ChatRequest:
    return ChatRequest(
        [Message("user", "hello")], sampling=SamplingParams(temperature=0, max_tokens=12)
    )


def _greedy(state: dict[str, torch.Tensor]) -> list[int]:
    engine = TorchEngine()
    engine.load_weights(state)
    policy = Policy.__new__(Policy)  # only to render the same prompt as the deployment
    policy.tokenizer = engine.tokenizer
    prompt = Policy.tokenize_prompt(policy, _chat())
    return engine.generate_sync([EngineRequest(prompt, _chat().sampling)])[0].completion_ids


@pytest.fixture(scope="module")
def deployment(ray_cluster):
    """One Policy deployment of 2 replicas subscribed to one WeightStore, and the trainer whose
    weights both strategies publish into it (a deployment takes a while here: one for both)."""
    ray = ray_cluster
    store = ray.remote(WeightStore).options(name="ws-publish", num_cpus=0).remote()
    config = PolicyConfig(
        engine={"name": "torch"}, replicas=2, num_cpus=0.25, weight_store="ws-publish"
    )
    handle = deploy_policy(config, "ws-policy")
    trainer = ray.remote(PerturbedTrainer).options(num_cpus=0).remote()
    yield store, handle, trainer
    ray.kill(trainer)


@pytest.mark.parametrize("strategy", ["object_store", "collective"])
def test_publish_reaches_every_replica_and_changes_outputs(ray_cluster, deployment, strategy: str):
    ray = ray_cluster
    store, handle, trainer = deployment
    # The replicas run the trainer's weights: its initial ones (version 0, a fresh deployment),
    # or those the other strategy published last.
    base = ray.get(store.__ray_call__.remote(lambda store: store.version))
    old_ids = _greedy(ray.get(trainer.get_weights.remote()))

    async def versions_and_ids(n: int) -> list[tuple[int, list[int]]]:
        outs = await asyncio.gather(*(handle.generate.remote(_chat()) for _ in range(n)))
        return [(c.policy_version, c.completion_ids) for c in outs]

    before = asyncio.run(versions_and_ids(8))
    assert {v for v, _ in before} == {base} and all(ids == old_ids for _, ids in before)
    if strategy == "object_store":
        sync = ObjectStoreWeightSync(store, replicas=2)
    else:
        sync = CollectiveWeightSync(store, replicas=2, backend="gloo", bucket_mib=1.0)
    for version in (base + 1, base + 2):  # the second publish reuses the collective group
        ray.get(trainer.perturb.remote(0.05, version))
        new_ids = _greedy(ray.get(trainer.get_weights.remote()))
        assert new_ids != old_ids  # the perturbation changes greedy output
        timing = sync.publish(trainer, version)
        assert timing["weight_sync_s"] > 0
        after = asyncio.run(versions_and_ids(16))
        # Every replica answers with the new version and the new weights' greedy output, from
        # the first request after publish returns.
        assert {v for v, _ in after} == {version}
        assert all(ids == new_ids for _, ids in after)
        old_ids = new_ids
    assert len(ray.get(store.replicas.remote())) == 2
    if strategy == "collective":
        weights = ray.get(trainer.get_weights.remote())
        size = sum(t.numel() * t.element_size() for t in weights.values())
        assert size <= timing["weight_sync_mib"] * 2**20 < size + 8 * len(weights)
        assert sync.epoch == 1  # one group, made once
    with pytest.raises(ray.exceptions.RayTaskError, match="not newer"):
        sync.publish(trainer, base + 2)


def _listening(port: int) -> list[str]:
    """Local addresses (hex, as the kernel writes them) listening on TCP ``port``."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                out.append(address)
    return out


def test_collective_group_listens_on_loopback_only_for_a_local_cluster(ray_cluster):
    ray = ray_cluster
    trainer = ray.remote(Trainer).options(num_cpus=0).remote()
    endpoint = ray.get(trainer.collective_endpoint.remote())
    assert endpoint["address"] == "127.0.0.1"
    assert _listening(endpoint["port"]) == ["0100007F"]  # 127.0.0.1, and nothing else
