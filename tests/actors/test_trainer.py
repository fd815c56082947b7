"""Trainer on episodes sampled from the tiny model by the real TorchEngine (real old logprobs)."""

from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from actors.replay_buffer import unbox
from actors.trainer import Trainer
from forge.config import TrainerConfig
from forge.train.groups import grpo_batch
from forge.trajectory import assemble
from forge.types import Episode, SamplingParams, Segment, Turn
from serve.engines.base import EngineRequest
from serve.engines.torch_engine import TorchEngine
from serve.models import load_model

SEED = 0


@pytest.fixture(scope="module")
def engine() -> TorchEngine:
    return TorchEngine("tiny", seed=SEED)


def _turn(
    engine: TorchEngine, ep: str, index: int, prompt: list[int], seed: int, temp: float = 1.0
) -> Turn:
    params = SamplingParams(temperature=temp, max_tokens=12, seed=seed)
    out = engine.generate_sync([EngineRequest(prompt, params)])[0]
    return Turn(
        ep,
        0,
        index,
        "chat",
        {},
        prompt,
        out.completion_ids,
        out.logprobs,
        "",
        [],
        out.finish_reason,
        0,
        0.0,
        0.0,
        temperature=temp,
    )


def _episode(
    engine: TorchEngine, name: str, task: str, reward: float, seed: int, temp: float = 1.0
) -> Episode:
    """Three turns: the second extends the first (tool result masked in between); the third
    starts a new context, so the episode has two segments."""
    enc = engine.tokenizer.encode
    t0 = _turn(engine, name, 0, enc(f"<task {task}> do it:"), seed, temp)
    t1 = _turn(
        engine, name, 1, t0.prompt_ids + t0.completion_ids + enc(" tool says ok."), seed + 1, temp
    )
    t2 = _turn(engine, name, 2, enc(f"summary of {task}:"), seed + 2, temp)
    segments, _ = assemble([t0, t1, t2])
    assert len(segments) == 2
    return Episode(
        name, task, 0, "react", reward=reward, status="ok", turns=[t0, t1, t2], segments=segments
    )


@pytest.fixture(scope="module")
def groups(engine: TorchEngine) -> list[list[Episode]]:
    rewards = [[1.0, 0.0, 0.0, 1.0], [0.0, 0.25, 1.0, 0.5]]
    return [
        [_episode(engine, f"g{g}e{i}", f"t{g}", r, seed=100 * g + 10 * i) for i, r in enumerate(rs)]
        for g, rs in enumerate(rewards)
    ]


def test_first_step_recomputes_the_sampling_logprobs(groups: list[list[Episode]]) -> None:
    trainer = Trainer({}, seed=SEED)
    m = trainer.train_step(groups)
    assert m["logprob_abs_diff_max"] < 1e-4
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert m["clip_frac"] == 0.0
    assert m["episodes"] == 8 and m["groups"] == 2 and m["skipped_groups"] == 0
    assert m["version"] == 1 and trainer.get_version() == 1 and m["updated"] == 1
    sampled = sum(sum(s.loss_mask) for g in groups for e in g for s in e.segments)
    assert m["tokens_sampled"] == sampled
    assert m["tokens_total"] == sum(len(s.tokens) for g in groups for e in g for s in e.segments)
    for key in (
        "loss",
        "reward_mean",
        "advantage_std",
        "approx_kl",
        "grad_norm",
        "entropy",
        "step_time_s",
        "tokens_per_s",
    ):
        assert key in m
    assert m["reward_mean"] == pytest.approx(0.46875)


def test_positively_advantaged_completions_gain_logprob(groups: list[list[Episode]]) -> None:
    trainer = Trainer({"lr": 1e-3}, seed=SEED)
    episodes = [e for g in groups for e in g]
    before = trainer.episode_logprobs(episodes)
    losses = [trainer.train_step(groups)["loss"] for _ in range(4)]
    after = trainer.episode_logprobs(episodes)
    assert losses[-1] < losses[0]
    means = {id(e): sum(x.reward for x in g) / len(g) for g in groups for e in g}
    for e, b, a in zip(episodes, before, after, strict=True):
        if e.reward > means[id(e)]:
            assert a > b, e.episode_id
        elif e.reward < means[id(e)]:
            assert a < b, e.episode_id


def test_micro_batch_accumulation_equals_one_big_batch(groups: list[list[Episode]]) -> None:
    small = Trainer({"micro_batch_tokens": 48}, seed=SEED)
    big = Trainer({"micro_batch_tokens": 1_000_000}, seed=SEED)
    grads: dict[str, dict[str, torch.Tensor]] = {}
    for name, t in (("small", small), ("big", big)):
        params = dict(t.model.named_parameters())

        def grab(opt, args, kwargs, name=name, params=params) -> None:
            grads[name] = {k: p.grad.clone() for k, p in params.items()}

        t.optimizer.register_step_pre_hook(grab)
    ms, mb = small.train_step(groups), big.train_step(groups)
    assert ms["micro_batches"] > 4 and mb["micro_batches"] == 1
    assert ms["loss"] == pytest.approx(mb["loss"], abs=1e-6)
    assert ms["grad_norm"] == pytest.approx(mb["grad_norm"], rel=1e-5)
    for k, g in grads["big"].items():  # the accumulated gradient is the full-batch gradient
        scale = float(g.abs().max())
        assert torch.allclose(grads["small"][k], g, rtol=1e-4, atol=1e-5 * scale), k
    # and so is the update; Adam's first step is ~lr * g / |g|, which magnifies float rounding
    # on the few entries whose gradient is ~1e-8, hence a tolerance of 5% of lr there
    start = Trainer({}, seed=SEED).get_weights()
    ws, wb = small.get_weights(), big.get_weights()
    for k in ws:
        assert torch.allclose(ws[k] - start[k], wb[k] - start[k], atol=5e-5), k


def test_zero_advantage_groups_are_skipped(groups: list[list[Episode]]) -> None:
    flat = [replace(e, reward=1.0) for e in groups[0]]
    trainer = Trainer({}, seed=SEED)
    before = trainer.get_weights()
    m = trainer.train_step([flat])
    assert m["skipped_groups"] == 1 and m["updated"] == 0 and m["episodes"] == 0
    assert trainer.version == 0
    assert all(torch.equal(before[k], v) for k, v in trainer.get_weights().items())
    m = trainer.train_step([flat, groups[1]])
    assert m["skipped_groups"] == 1 and m["episodes"] == 4 and trainer.version == 1


def test_negative_advantage_scale_reinforces_only_the_better_attempts(
    groups: list[list[Episode]],
) -> None:
    trainer = Trainer({"lr": 1e-3, "negative_advantage_scale": 0.0}, seed=SEED)
    episodes = [e for g in groups for e in g]
    before = trainer.episode_logprobs(episodes)
    m = trainer.train_step(groups)
    assert m["advantage_min"] == 0.0 and m["advantage_max"] > 0 and m["episodes"] == 8
    after = trainer.episode_logprobs(episodes)
    best = {id(e): max(x.reward for x in g) for g in groups for e in g}
    for e, b, a in zip(episodes, before, after, strict=True):
        if e.reward == best[id(e)]:
            assert a > b, e.episode_id
    half = Trainer({"negative_advantage_scale": 0.5}, seed=SEED).train_step(groups)
    full = Trainer({}, seed=SEED).train_step(groups)
    assert half["advantage_min"] == pytest.approx(full["advantage_min"] / 2)
    assert half["advantage_max"] == pytest.approx(full["advantage_max"])
    with pytest.raises(ValueError, match="negative_advantage_scale"):
        TrainerConfig(negative_advantage_scale=1.5)


def test_reward_advantage_reinforces_every_passing_attempt(
    groups: list[list[Episode]],
) -> None:
    passing = [replace(e, reward=1.0) for e in groups[0]]  # a group GRPO would skip
    failing = [replace(e, reward=0.0) for e in groups[1]]
    episodes, advantages, stats = grpo_batch(
        [passing, groups[1], failing], 0, TrainerConfig(advantage="reward")
    )
    assert [e.episode_id for e in episodes] == [e.episode_id for e in passing + groups[1]]
    assert advantages == [1.0] * 4 + [e.reward for e in groups[1]]  # the reward, no baseline
    assert stats["skipped_groups"] == 1  # only the all-zero one
    trainer = Trainer({"lr": 1e-3, "advantage": "reward"}, seed=SEED)
    before = trainer.episode_logprobs(passing)
    assert trainer.train_step([passing, failing])["updated"] == 1
    assert all(a > b for a, b in zip(trainer.episode_logprobs(passing), before, strict=True))


def test_mini_batches_are_one_update_each(groups: list[list[Episode]]) -> None:
    trainer = Trainer({"lr": 1e-3, "ppo_mini_batches": 2}, seed=SEED)
    m = trainer.train_step(groups)
    state = trainer.optimizer.state[next(iter(trainer.model.parameters()))]
    assert int(state["step"]) == 2  # two optimizer steps, one version
    assert trainer.version == 1 and m["updated"] == 1 and m["episodes"] == 8
    assert m["ratio_max"] > 1.0  # the second mini-batch was sampled by the weights before
    assert m["logprob_abs_diff_max"] < 1e-4  # the gap is read before any update
    one = Trainer({"lr": 1e-3}, seed=SEED)
    one.train_step(groups)
    assert int(one.optimizer.state[next(iter(one.model.parameters()))]["step"]) == 1
    for bad in ({"backend": "verl"}, {"rollout_correction": "tis"}):
        with pytest.raises(ValueError, match="ppo_mini_batches"):
            TrainerConfig(ppo_mini_batches=2, **bad)


def test_warmup_ramps_the_learning_rate_over_updates(
    groups: list[list[Episode]], tmp_path: Path
) -> None:
    trainer = Trainer({"lr": 1e-3, "warmup_updates": 4, "ppo_mini_batches": 2}, seed=SEED)
    before = {k: v.clone() for k, v in trainer.get_weights().items()}
    assert trainer.train_step(groups)["lr"] == pytest.approx(2.5e-4 * 2)  # updates 1 and 2 of 4
    moved = max((v - before[k]).abs().max().item() for k, v in trainer.get_weights().items())
    assert 0 < moved < 1e-3  # AdamW's first steps move a weight by about lr: here a quarter
    trainer.save_checkpoint(tmp_path / "ckpt")
    resumed = Trainer({"lr": 1e-3, "warmup_updates": 4, "ppo_mini_batches": 2}, seed=SEED)
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert resumed.train_step(groups)["lr"] == pytest.approx(1e-3)  # updates 3 and 4
    assert Trainer({"lr": 1e-3}, seed=SEED).train_step(groups)["lr"] == 1e-3
    with pytest.raises(ValueError, match="warmup_updates"):
        TrainerConfig(warmup_updates=4, backend="verl")


def test_failed_episodes_are_refused(groups: list[list[Episode]]) -> None:
    bad = [replace(groups[0][0], status="failed"), *groups[0][1:]]
    with pytest.raises(ValueError, match="ok episodes only"):
        Trainer({}, seed=SEED).train_step([bad])


def test_kl_to_reference_and_ppo_epochs(groups: list[list[Episode]]) -> None:
    trainer = Trainer({"kl_coef": 0.1, "ppo_epochs": 3}, seed=SEED)
    m = trainer.train_step(groups)
    assert trainer.version == 1 and trainer.step == 1
    assert m["kl"] > 0  # epochs 2 and 3 ran on moved weights
    assert m["clip_frac"] > 0 or m["ratio_max"] > 1.0


def test_get_weights_returns_copies(groups: list[list[Episode]]) -> None:
    trainer = Trainer({}, seed=SEED)
    weights = trainer.get_weights()
    live = trainer.model.state_dict()
    for k, v in weights.items():
        assert v.device.type == "cpu" and not v.requires_grad
        assert v.untyped_storage().data_ptr() != live[k].untyped_storage().data_ptr()
    snapshot = {k: v.clone() for k, v in weights.items()}
    trainer.train_step(groups)
    assert all(torch.equal(snapshot[k], weights[k]) for k in weights)
    name = next(iter(weights))
    weights[name].add_(1.0)
    assert not torch.equal(weights[name], trainer.model.state_dict()[name])


def test_checkpoint_round_trip(groups: list[list[Episode]], tmp_path: Path) -> None:
    trainer = Trainer({"lr": 5e-4}, seed=SEED)
    trainer.train_step(groups)
    path = trainer.save_checkpoint(tmp_path / "ckpt")
    assert Path(path) == tmp_path / "ckpt"
    state = json.loads((tmp_path / "ckpt" / "trainer_state.json").read_text())
    assert state["step"] == 1 and state["version"] == 1 and state["config"]["lr"] == 5e-4
    assert (tmp_path / "ckpt" / "optimizer.pt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temp dirs left over

    # `forge serve --model DIR` loads it
    model, tok = load_model(path)
    weights = trainer.get_weights()
    for k, v in model.state_dict().items():
        assert torch.equal(v, weights[k]), k
    assert tok.encode("hi <tool_call>") == trainer.tokenizer.encode("hi <tool_call>")

    restored = Trainer({"lr": 5e-4}, seed=SEED + 1)
    restored.load_checkpoint(path)
    assert restored.step == 1 and restored.version == 1
    # the optimizer state came back too: the next step is identical
    trainer.train_step(groups)
    restored.train_step(groups)
    a, b = trainer.get_weights(), restored.get_weights()
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    trainer.save_checkpoint(path)  # overwriting an existing checkpoint works
    assert json.loads((Path(path) / "trainer_state.json").read_text())["step"] == 2


def test_config_validation() -> None:
    assert Trainer(TrainerConfig(lr=2e-3)).config.lr == 2e-3
    with pytest.raises(ValueError):
        Trainer({"learning_rate": 1e-3})


def test_weights_load_into_a_policy_engine(groups: list[list[Episode]]) -> None:
    trainer = Trainer({}, seed=SEED)
    trainer.train_step(groups)
    engine = TorchEngine("tiny", seed=SEED + 1)
    engine.load_weights(trainer.get_weights())  # strict: same keys and shapes
    for k, v in engine.state_dict().items():
        assert torch.equal(v, trainer.model.state_dict()[k]), k


@pytest.mark.ray
def test_train_on_takes_replay_buffer_boxes(ray_cluster, groups: list[list[Episode]]) -> None:
    """A sample's groups share one object (``[ref, i]``); a ``[ref]`` box is one group."""
    trainer = Trainer({}, seed=SEED)
    shared = ray_cluster.put(groups)
    assert unbox([[shared, 1], [shared, 0]]) == [groups[1], groups[0]]
    assert unbox([[ray_cluster.put(g)] for g in groups]) == groups
    m = trainer.train_on([[shared, i] for i in range(len(groups))])
    assert m["groups"] == 2 and m["episodes"] == 8 and trainer.version == 1
    assert trainer.train_on([])["updated"] == 0


def _bits(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous().view(torch.uint8).clone() for k, v in weights.items()}


def _opt_bits(trainer: Trainer) -> list[torch.Tensor]:
    state = trainer.optimizer.state_dict()["state"]
    return [
        v.detach().reshape(-1).contiguous().view(torch.uint8).clone()
        for s in state.values()
        for v in s.values()
    ]


def _nan_reward(trainer: Trainer, groups: list[list[Episode]]) -> list[list[Episode]]:
    # a verifier's NaN reward: the group's advantages, then the loss, are NaN
    return [[replace(groups[0][0], reward=float("nan")), *groups[0][1:]], groups[1]]


def _inf_gradient(trainer: Trainer, groups: list[list[Episode]]) -> list[list[Episode]]:
    # a finite loss whose gradient overflows on one parameter (a torch grad hook)
    param = next(trainer.model.parameters())
    param.register_hook(lambda g: g * float("inf"))
    return groups


@pytest.mark.parametrize("poison", [_nan_reward, _inf_gradient])
def test_nonfinite_step_is_skipped(groups, poison, caplog: pytest.LogCaptureFixture) -> None:
    trainer = Trainer({}, seed=SEED)
    trainer.train_step(groups)  # the optimizer has state to keep
    weights, opt = _bits(trainer.get_weights()), _opt_bits(trainer)
    bad = poison(trainer, groups)
    with caplog.at_level(logging.WARNING, logger="actors.trainer"):
        m = trainer.train_step(bad)
    assert m["nonfinite_skipped"] == 1 and m["nonfinite_skipped_total"] == 1
    assert m["updated"] == 0 and m["version"] == 1 and trainer.get_version() == 1
    assert trainer.step == 1
    assert not (math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]))
    after = _bits(trainer.get_weights())
    assert all(torch.equal(weights[k], after[k]) for k in weights)  # bit for bit
    assert all(torch.equal(a, b) for a, b in zip(opt, _opt_bits(trainer), strict=True))
    assert all(p.grad is None for p in trainer.model.parameters())
    assert "non-finite" in caplog.text and "skipped" in caplog.text
    if poison is _nan_reward:  # the trainer recovers on the next clean batch
        m = trainer.train_step(groups)
        assert m["updated"] == 1 and trainer.get_version() == 2
        assert m["nonfinite_skipped"] == 0 and m["nonfinite_skipped_total"] == 1


def _nan_logprob_in_the_second_mini_batch(
    trainer: Trainer, groups: list[list[Episode]]
) -> list[list[Episode]]:
    # an engine's NaN sampling logprob on episode 1, which mini-batch 2 takes (episodes[1::2])
    ep = groups[0][1]
    seg = ep.segments[0]
    i = seg.loss_mask.index(1)
    bad = replace(seg, logprobs=[*seg.logprobs[:i], float("nan"), *seg.logprobs[i + 1 :]])
    poisoned = replace(ep, segments=[bad, *ep.segments[1:]])
    return [[groups[0][0], poisoned, *groups[0][2:]], groups[1]]


def _inf_gradient_after_the_first_update(
    trainer: Trainer, groups: list[list[Episode]]
) -> list[list[Episode]]:
    # the first update of the step is clean; every gradient after it overflows on one parameter
    param = next(trainer.model.parameters())
    start = int(trainer.optimizer.state[param]["step"])
    param.register_hook(
        lambda g: g * float("inf") if int(trainer.optimizer.state[param]["step"]) > start else g
    )
    return groups


@pytest.mark.parametrize(
    ("config", "poison"),
    [
        ({"ppo_mini_batches": 2}, _nan_logprob_in_the_second_mini_batch),
        ({"ppo_mini_batches": 2}, _inf_gradient_after_the_first_update),
        ({"ppo_epochs": 2}, _inf_gradient_after_the_first_update),
    ],
    ids=["nan-logprob-mini-batch-2", "inf-grad-mini-batch-2", "inf-grad-epoch-2"],
)
def test_a_later_nonfinite_update_undoes_the_whole_step(
    groups, config, poison, caplog: pytest.LogCaptureFixture
) -> None:
    """Several updates in one step (mini-batches, epochs): the first applies, a later one is not
    finite; the step is skipped as a whole, the first update undone, bit for bit."""
    trainer = Trainer({"lr": 1e-3, **config}, seed=SEED)
    trainer.train_step(groups)  # the optimizer has state to keep
    weights, opt = _bits(trainer.get_weights()), _opt_bits(trainer)
    bad = poison(trainer, groups)
    with caplog.at_level(logging.WARNING, logger="actors.trainer"):
        m = trainer.train_step(bad)
    assert m["nonfinite_skipped"] == 1 and m["updated"] == 0
    assert m["version"] == 1 and trainer.get_version() == 1 and trainer.step == 1
    after = _bits(trainer.get_weights())
    assert all(torch.equal(weights[k], after[k]) for k in weights)  # the first update undone
    assert all(torch.equal(a, b) for a, b in zip(opt, _opt_bits(trainer), strict=True))
    assert all(p.grad is None for p in trainer.model.parameters())
    assert "update 2 of 2" in caplog.text and "1 earlier update(s) of it undone" in caplog.text
    if poison is _nan_logprob_in_the_second_mini_batch:  # it trains on as if the step never ran
        m = trainer.train_step(groups)
        assert m["updated"] == 1 and trainer.get_version() == 2


@pytest.fixture(scope="module")
def hot_groups(engine: TorchEngine) -> list[list[Episode]]:
    rewards = [1.0, 0.0, 0.0, 1.0]
    return [
        [_episode(engine, f"h{i}", "hot", r, 500 + 10 * i, temp=0.7) for i, r in enumerate(rewards)]
    ]


def _segments(groups: list[list[Episode]], **change) -> list[list[Episode]]:
    def seg(s: Segment) -> Segment:
        fields = {k: (f(s) if callable(f) else f) for k, f in change.items()}
        return replace(s, **fields)

    return [[replace(e, segments=[seg(s) for s in e.segments]) for e in g] for g in groups]


def _shift(groups: list[list[Episode]], delta: float) -> list[list[Episode]]:
    """The engine's recorded logprobs moved by ``delta`` on every sampled token."""
    return _segments(
        groups,
        logprobs=lambda s: [lp + delta * m for lp, m in zip(s.logprobs, s.loss_mask, strict=True)],
    )


def test_logprobs_use_the_sampling_temperature(hot_groups: list[list[Episode]]) -> None:
    assert {s.temperature for g in hot_groups for e in g for s in e.segments} == {0.7}
    m = Trainer({}, seed=SEED).train_step(hot_groups)
    assert m["logprob_abs_diff_max"] < 1e-4 and m["logprob_abs_diff_mean"] < 1e-5
    assert 0 <= m["logprob_kl"] < 1e-8 and abs(m["logprob_kl_k1"]) < 1e-5
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and m["clip_frac"] == 0.0
    # read at temperature 1, the same tokens are far from the distribution sampled from, and
    # the entropy (of the tempered distribution) is higher
    wrong = Trainer({}, seed=SEED).train_step(_segments(hot_groups, temperature=1.0))
    assert wrong["logprob_abs_diff_mean"] > 100 * m["logprob_abs_diff_mean"] + 0.01
    assert wrong["logprob_kl"] > 1e-4
    assert wrong["entropy"] > m["entropy"]


def test_gap_metrics_report_an_engine_offset(groups: list[list[Episode]]) -> None:
    m = Trainer({}, seed=SEED).train_step(_shift(groups, 0.1))
    assert m["logprob_abs_diff_mean"] == pytest.approx(0.1, abs=1e-4)
    assert m["logprob_abs_diff_max"] == pytest.approx(0.1, abs=1e-4)
    assert m["logprob_kl_k1"] == pytest.approx(0.1, abs=1e-4)  # mean(engine - trainer)
    assert m["logprob_kl"] == pytest.approx(math.exp(-0.1) - 1 + 0.1, rel=1e-2)  # k3


def test_tis_weights_the_loss_by_the_capped_engine_gap(groups: list[list[Episode]]) -> None:
    tis = {"rollout_correction": "tis", "tis_cap": 2.0}
    base = Trainer({}, seed=SEED).train_step(groups)
    # with off, an engine that found its tokens less likely moves the PPO ratio itself
    off = Trainer({}, seed=SEED).train_step(_shift(groups, -0.5))
    assert off["ratio_mean"] == pytest.approx(math.exp(0.5), rel=1e-3) and off["clip_frac"] > 0
    assert "tis_weight_mean" not in off
    # with tis the ratio is the trainer's own (1 before the update) and each token's loss is
    # weighted by exp(0.5) < cap: the gradient scales by it
    m = Trainer(tis, seed=SEED).train_step(_shift(groups, -0.5))
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-6) and m["clip_frac"] == 0.0
    assert m["tis_weight_mean"] == pytest.approx(math.exp(0.5), rel=1e-4)
    assert m["tis_capped_frac"] == 0.0
    assert m["grad_norm"] == pytest.approx(math.exp(0.5) * base["grad_norm"], rel=1e-3)
    # beyond the cap (ratio e > 2) every weight is the cap
    m = Trainer(tis, seed=SEED).train_step(_shift(groups, -1.0))
    assert m["tis_capped_frac"] == 1.0 and m["tis_weight_mean"] == pytest.approx(2.0)
    assert m["grad_norm"] == pytest.approx(2.0 * base["grad_norm"], rel=1e-3)
    # without a gap, tis is off: the same update (up to rounding, which Adam's first step
    # ~lr * g / |g| magnifies on entries whose gradient is ~1e-8; see the micro-batch test)
    a, b = Trainer(tis, seed=SEED), Trainer({}, seed=SEED)
    assert a.train_step(groups)["tis_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    b.train_step(groups)
    wa, wb = a.get_weights(), b.get_weights()
    assert all(torch.allclose(wa[k], wb[k], atol=5e-5) for k in wa)


def test_tis_with_ppo_epochs_keeps_the_first_epochs_old_logprobs(groups) -> None:
    trainer = Trainer({"rollout_correction": "tis", "ppo_epochs": 3}, seed=SEED)
    m = trainer.train_step(_shift(groups, -0.5))
    assert trainer.version == 1 and m["updated"] == 1
    assert m["ratio_max"] > 1.0  # epochs 2 and 3 compare moved weights to the stored ones
    assert m["tis_weight_mean"] == pytest.approx(math.exp(0.5), rel=1e-4)


def test_checkpoint_carries_rng_states(tmp_path: Path) -> None:
    trainer = Trainer({}, seed=SEED)
    torch.manual_seed(123)
    random.seed(123)
    np.random.seed(123)
    path = trainer.save_checkpoint(tmp_path / "ckpt")
    expected = (torch.rand(4), random.random(), np.random.rand(3))
    torch.manual_seed(999)
    random.seed(999)
    np.random.seed(999)
    Trainer({}, seed=SEED + 1).load_checkpoint(path)
    got = (torch.rand(4), random.random(), np.random.rand(3))
    assert torch.equal(got[0], expected[0])
    assert got[1] == expected[1]
    assert np.array_equal(got[2], expected[2])
