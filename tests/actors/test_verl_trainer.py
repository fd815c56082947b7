"""The veRL backend (actors/verl_trainer.py) against the torch Trainer on the same batch: veRL's
own FSDP2 engine and PPO loss on 2 ranks over gloo on this CPU, real Ray actors. Same loss and
gradient norm, the engine's sampling log-probabilities recomputed, the weights published whole
(object store) and streamed from the shards (collective broadcast, received by a real
Receiver), and a checkpoint read back by one rank (resharded) and by the Policy's engine."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from actors.trainer import Trainer
from forge.config import TrainerConfig
from tests.actors.test_trainer import _episode
from tests.verl_engine import VERL_MISSING

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.skipif(bool(VERL_MISSING), reason=VERL_MISSING),
]
CONFIG = {"lr": 1e-3, "micro_batch_tokens": 256}
VERL = {**CONFIG, "backend": "verl", "verl": {"ranks": 2, "micro_batch_size": 2}}


@pytest.fixture(scope="module")
def groups():
    from serve.engines.torch_engine import TorchEngine

    engine = TorchEngine("tiny", seed=0)
    rewards = [[1.0, 0.0, 0.0, 1.0], [0.0, 0.25, 1.0, 0.5], [1.0, 1.0, 0.0, 0.5]]
    return [  # three turns each: two segments, a tool result masked inside the first
        [_episode(engine, f"g{g}e{i}", f"t{g}", r, seed=100 * g + 10 * i) for i, r in enumerate(rs)]
        for g, rs in enumerate(rewards)
    ]


@pytest.fixture(scope="module")
def verl_trainer(ray_cluster):
    from actors.verl_trainer import VerlTrainer

    trainer = VerlTrainer(VERL)
    yield trainer
    trainer.close()


def test_same_loss_and_gradient_norm_as_the_torch_backend(groups, verl_trainer):
    torch_trainer = Trainer(CONFIG)
    for step in range(2):
        ours = torch_trainer.train_step(groups)
        theirs = verl_trainer.train_step(groups)
        print(
            f"\n[verl] step {step + 1}: loss torch {ours['loss']:.8f} verl {theirs['loss']:.8f}; "
            f"grad norm torch {ours['grad_norm']:.6f} verl {theirs['grad_norm']:.6f}"
        )
        assert theirs["updated"] == 1.0 and theirs["version"] == step + 1
        assert math.isclose(theirs["grad_norm"], ours["grad_norm"], rel_tol=1e-4)
        assert math.isclose(theirs["loss"], ours["loss"], rel_tol=1e-3, abs_tol=1e-6)
        assert theirs["tokens_sampled"] == ours["tokens_sampled"]
        # before any update the trainer recomputes what the engine sampled with (fp32); after
        # one, both backends are off the sampling policy by the same amount
        if step == 0:
            assert theirs["logprob_abs_diff_max"] < 1e-4
        gap = ours["logprob_abs_diff_max"]
        assert math.isclose(theirs["logprob_abs_diff_max"], gap, rel_tol=1e-2, abs_tol=1e-4)
    assert ours["loss"] != 0.0  # the second step has moved off the old policy
    ours_w, theirs_w = torch_trainer.get_weights(), verl_trainer.get_weights()
    assert set(ours_w) == set(theirs_w)
    assert max(float((ours_w[k] - theirs_w[k]).abs().max()) for k in ours_w) < 1e-3


def test_weights_stream_from_the_shards_into_a_collective_broadcast(ray_cluster, verl_trainer):
    from serve.collective import Receiver

    @ray_cluster.remote(num_cpus=0.5)
    class Replica:
        def __init__(self) -> None:
            self.receiver = Receiver()

        def receive(self, message):
            return self.receiver.receive(message, 1)

    replica = Replica.remote()
    endpoint = verl_trainer.collective_endpoint()
    message = {
        **endpoint,
        "world_size": 2,
        "backend": "gloo",
        "bucket_bytes": 1 << 20,  # several buckets: streamed, not the whole model at once
        "timeout_s": 60.0,
    }
    receiving = replica.receive.remote(message)
    sent = verl_trainer.broadcast_weights(message)
    received = ray_cluster.get(receiving)
    whole = verl_trainer.get_weights()
    assert set(received) == set(whole)
    assert all(torch.equal(received[k], whole[k]) for k in whole)
    assert sent >= sum(t.numel() * t.element_size() for t in whole.values())


def test_a_checkpoint_loads_on_one_rank_and_into_the_policy(ray_cluster, verl_trainer, tmp_path):
    from actors.verl_trainer import VerlTrainer
    from serve.engines.torch_engine import TorchEngine

    path = Path(verl_trainer.save_checkpoint(tmp_path / "step_2"))
    assert (path / "verl").is_dir() and (path / "model.safetensors").exists()
    whole = verl_trainer.get_weights()
    one = VerlTrainer({**VERL, "verl": {"ranks": 1, "micro_batch_size": 2}})
    try:
        one.load_checkpoint(path)
        assert one.get_version() == verl_trainer.get_version()
        loaded = one.get_weights()
        assert all(torch.equal(loaded[k], whole[k]) for k in whole)
    finally:
        one.close()
    served = TorchEngine(str(path)).state_dict()
    assert all(torch.equal(served[k], whole[k]) for k in whole)


def test_what_the_verl_backend_does_not_do_is_refused():
    from actors.verl_trainer import VerlTrainer

    with pytest.raises(ValueError, match=r"trainer\.kl_coef"):
        VerlTrainer({**VERL, "kl_coef": 0.1})
    assert TrainerConfig.model_validate(VERL).verl.ranks == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (scripts/device)")
def test_same_gradient_norm_on_a_gpu_with_nccl(ray_cluster, groups):
    from actors.verl_trainer import VerlTrainer

    ours = Trainer({**CONFIG, "device": "cuda"}).train_step(groups)
    trainer = VerlTrainer({**VERL, "device": "cuda", "verl": {"ranks": 1, "micro_batch_size": 2}})
    try:
        theirs = trainer.train_step(groups)
    finally:
        trainer.close()
    assert math.isclose(theirs["grad_norm"], ours["grad_norm"], rel_tol=1e-3)
