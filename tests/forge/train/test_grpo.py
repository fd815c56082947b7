"""GRPO math: group advantages, the clipped per-episode loss, KL estimators, row building."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from forge.train.batching import build_rows, collate, micro_batches, plan_micro_batches
from forge.train.grpo import (
    episode_token_weights,
    group_advantages,
    kl_penalty,
    policy_loss,
    truncated_is_weights,
)
from forge.types import Episode, Segment


def test_group_advantages_hand_computed() -> None:
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 4.0, 6.0, 8.0]]), eps=0.0)
    # group 0: mean 0.5, unbiased std sqrt(1/3)
    s0 = math.sqrt(1 / 3)
    assert torch.allclose(adv[0], torch.tensor([0.5, -0.5, -0.5, 0.5]) / s0)
    # group 1: mean 5, unbiased std sqrt(20/3)
    s1 = math.sqrt(20 / 3)
    assert torch.allclose(adv[1], torch.tensor([-3.0, -1.0, 1.0, 3.0]) / s1)
    centred = group_advantages(torch.tensor([[2.0, 4.0, 6.0, 8.0]]), normalize_std=False)
    assert torch.equal(centred[0], torch.tensor([-3.0, -1.0, 1.0, 3.0]))


def test_group_advantages_equal_rewards_are_exactly_zero() -> None:
    adv = group_advantages(torch.tensor([[0.1, 0.1, 0.1], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    assert torch.equal(adv, torch.zeros(3, 3))
    assert torch.equal(group_advantages(torch.tensor([[5.0]])), torch.zeros(1, 1))


def _loss(new, old, adv, mask, idx, **kw):
    return policy_loss(
        torch.tensor(new),
        torch.tensor(old),
        torch.tensor(adv),
        torch.tensor(mask),
        torch.tensor(idx),
        **kw,
    )


def test_policy_loss_at_ratio_one_is_minus_advantage() -> None:
    loss, m = _loss([[-1.0, -2.0]], [[-1.0, -2.0]], [2.0], [[1, 1]], [0])
    assert loss.item() == pytest.approx(-2.0)
    assert m["ratio_mean"].item() == pytest.approx(1.0)
    assert m["clip_frac"].item() == 0.0
    assert m["approx_kl"].item() == pytest.approx(0.0)


def test_policy_loss_clips_above_for_positive_advantage() -> None:
    # ratio e^1 > 1.2: the clipped term wins for A > 0, gradient 0
    new = torch.tensor([[0.0]], requires_grad=True)
    loss, m = policy_loss(
        new,
        torch.tensor([[-1.0]]),
        torch.tensor([1.0]),
        torch.ones(1, 1),
        torch.tensor([0]),
        clip_eps_high=0.2,
    )
    assert loss.item() == pytest.approx(-1.2)
    assert m["clip_frac"].item() == 1.0
    loss.backward()
    assert new.grad.abs().item() == 0.0
    # ratio below 1 - eps with A > 0 is not clipped (the unclipped term is the max)
    new = torch.tensor([[-1.0]], requires_grad=True)
    loss, m = policy_loss(
        new, torch.tensor([[0.0]]), torch.tensor([1.0]), torch.ones(1, 1), torch.tensor([0])
    )
    assert loss.item() == pytest.approx(-math.exp(-1.0))
    assert m["clip_frac"].item() == 0.0
    loss.backward()
    assert new.grad.item() == pytest.approx(-math.exp(-1.0))


def test_policy_loss_clips_below_for_negative_advantage() -> None:
    # ratio e^-1 < 0.8 with A < 0: clipped at 0.8, no gradient
    new = torch.tensor([[-1.0]], requires_grad=True)
    loss, m = policy_loss(
        new,
        torch.tensor([[0.0]]),
        torch.tensor([-1.0]),
        torch.ones(1, 1),
        torch.tensor([0]),
        clip_eps_low=0.2,
    )
    assert loss.item() == pytest.approx(0.8)
    assert m["clip_frac"].item() == 1.0
    loss.backward()
    assert new.grad.item() == 0.0
    # asymmetric clip: a high ratio with A < 0 is never clipped by eps_high ...
    loss, m = _loss([[0.5]], [[0.0]], [-1.0], [[1]], [0], clip_eps_high=0.28)
    assert loss.item() == pytest.approx(math.exp(0.5))
    # ... but dual clip caps it at -A * c
    loss, m = _loss([[2.0]], [[0.0]], [-1.0], [[1]], [0], clip_ratio_c=3.0)
    assert loss.item() == pytest.approx(3.0)
    assert m["clip_frac_dual"].item() == 1.0
    loss, _ = _loss([[2.0]], [[0.0]], [-1.0], [[1]], [0], clip_ratio_c=None)
    assert loss.item() == pytest.approx(math.exp(2.0))


def test_masked_tokens_contribute_nothing() -> None:
    new = torch.tensor([[-1.0, float("nan"), -3.0, 50.0]], requires_grad=True)
    old = torch.tensor([[-1.0, 0.0, -3.0, 0.0]])
    mask = torch.tensor([[1, 0, 1, 0]])
    loss, m = policy_loss(new, old, torch.tensor([1.5]), mask, torch.tensor([0]))
    assert loss.item() == pytest.approx(-1.5)
    assert m["tokens"].item() == 2
    loss.backward()
    assert new.grad[0, 1].item() == 0.0 and new.grad[0, 3].item() == 0.0
    assert torch.isfinite(new.grad).all()


def test_per_episode_averaging_gives_long_episodes_equal_weight() -> None:
    # episode 0: 1 sampled token with A=+1; episode 1: 10 sampled tokens with A=-1.
    new = torch.zeros(2, 10, requires_grad=True)
    mask = torch.zeros(2, 10)
    mask[0, 0] = 1
    mask[1, :] = 1
    adv = torch.tensor([1.0, -1.0])
    loss, _ = policy_loss(new, torch.zeros(2, 10), adv, mask, torch.tensor([0, 1]))
    assert loss.item() == pytest.approx(0.0, abs=1e-7)  # (-1 + 1) / 2; token-mean: 9/11
    loss.backward()
    # each episode's gradients sum to the same magnitude: 1/2 per episode
    assert new.grad[0].sum().item() == pytest.approx(-0.5)
    assert new.grad[1].sum().item() == pytest.approx(0.5)
    assert new.grad[1, 0].item() == pytest.approx(0.05)


def test_episode_spanning_two_rows_is_averaged_over_both() -> None:
    # episode 0 has rows 0 (2 tokens) and 1 (3 tokens); episode 1 is row 2 (1 token)
    ratio_lp = torch.tensor([[0.1, 0.2, 0, 0], [0.3, 0.4, 0.5, 0], [0.6, 0, 0, 0]])
    mask = (ratio_lp != 0).float()
    idx = torch.tensor([0, 0, 1])
    w = episode_token_weights(mask, idx)
    assert w.sum().item() == pytest.approx(1.0)
    assert torch.allclose(w[0, :2], torch.full((2,), 0.1))  # 1 / (2 episodes * 5 tokens)
    assert w[2, 0].item() == pytest.approx(0.5)
    adv = torch.tensor([1.0, 1.0, 1.0])
    loss, _ = policy_loss(ratio_lp, torch.zeros(3, 4), adv, mask, idx, clip_eps_high=10.0)
    ep0 = -torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5]).exp().mean()
    ep1 = -torch.tensor(0.6).exp()
    assert loss.item() == pytest.approx(((ep0 + ep1) / 2).item(), rel=1e-6)
    # the same episode as one row gives the same loss
    one_row = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5], [0.6, 0, 0, 0, 0]])
    loss2, _ = policy_loss(
        one_row,
        torch.zeros(2, 5),
        adv[:2],
        (one_row != 0).float(),
        torch.tensor([0, 1]),
        clip_eps_high=10.0,
    )
    assert loss2.item() == pytest.approx(loss.item(), rel=1e-6)


def test_split_weights_sum_to_full_batch_loss() -> None:
    g = torch.Generator().manual_seed(0)
    new, old = torch.randn(6, 9, generator=g) * 0.3, torch.randn(6, 9, generator=g) * 0.3
    mask = torch.rand(6, 9, generator=g) > 0.4
    idx = torch.tensor([0, 0, 1, 2, 2, 2])
    adv = torch.randn(6, generator=g)
    full, _ = policy_loss(new, old, adv, mask, idx)
    w = episode_token_weights(mask, idx)
    parts = [
        policy_loss(new[s], old[s], adv[s], mask[s], idx[s], weights=w[s])[0]
        for s in (slice(0, 2), slice(2, 4), slice(4, 6))
    ]
    assert sum(p.item() for p in parts) == pytest.approx(full.item(), rel=1e-5)


def test_kl_penalty_estimators() -> None:
    new, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -2.0])
    assert torch.allclose(kl_penalty(new, ref, "k1"), torch.tensor([0.5, 0.0]))
    assert torch.allclose(kl_penalty(new, ref, "k2"), torch.tensor([0.125, 0.0]))
    k3 = kl_penalty(new, ref, "k3")
    assert k3[0].item() == pytest.approx(math.exp(-0.5) + 0.5 - 1.0)
    assert k3[1].item() == 0.0
    assert (kl_penalty(torch.randn(100), torch.randn(100), "k3") >= 0).all()
    loss, m = policy_loss(
        new[None],
        new[None],
        torch.tensor([0.0]),
        torch.ones(1, 2),
        torch.tensor([0]),
        kl=kl_penalty(new, ref)[None],
        kl_coef=0.1,
    )
    assert loss.item() == pytest.approx(0.1 * k3.mean().item())
    assert m["kl"].item() == pytest.approx(k3.mean().item())


def _segment(prompt: int, sampled: list[float]) -> Segment:
    n = prompt + len(sampled)
    return Segment(
        tokens=list(range(1, n + 1)),
        loss_mask=[0] * prompt + [1] * len(sampled),
        logprobs=[0.0] * prompt + sampled,
        turn_indices=[0],
        policy_versions=[0],
        prompt_len=prompt,
    )


def _episode(i: int, segments: list[Segment]) -> Episode:
    return Episode(f"e{i}", "t", 0, "h", reward=0.0, status="ok", segments=segments)


def test_build_rows_shift_weights_and_skips() -> None:
    eps = [
        _episode(0, [_segment(3, [-0.1, -0.2]), _segment(2, [-0.3])]),
        _episode(1, [_segment(4, [])]),  # nothing sampled: left out
        _episode(2, [_segment(1, [-0.5] * 6)]),
    ]
    rows = build_rows(eps, [1.0, 2.0, -1.0])
    assert [r.episode for r in rows] == [0, 0, 2]
    assert rows[0].tokens.tolist() == [1, 2, 3, 4, 5]
    assert rows[0].loss_mask.tolist() == [False, False, True, True]
    assert rows[0].old_logprobs.tolist() == pytest.approx([0, 0, -0.1, -0.2])
    assert rows[0].weight == pytest.approx(1 / (2 * 3)) and rows[2].weight == pytest.approx(1 / 12)
    mb = collate(rows, pad_id=0)
    assert mb.input_ids.shape == (3, 6) and mb.weights.sum().item() == pytest.approx(1.0)
    assert mb.tokens == 5 + 3 + 7 and mb.sampled == 9
    assert mb.targets[1].tolist() == [2, 3, 0, 0, 0, 0]
    with pytest.raises(ValueError):
        build_rows([_episode(0, [Segment([1, 2], [0], [0.0, 0.0], [0], [0], 1)])], [1.0])


def test_micro_batch_plan_respects_token_bound() -> None:
    lengths = [10, 3, 7, 3, 25, 2]
    plan = plan_micro_batches(lengths, 20)
    assert sorted(i for g in plan for i in g) == list(range(6))
    assert plan[0] == [4]  # longer than the bound: alone
    for g in plan[1:]:
        assert len(g) * max(lengths[i] for i in g) <= 20
    rows = build_rows(
        [_episode(i, [_segment(n, [-0.1])]) for i in range(4) for n in (5,)], [1.0] * 4
    )
    assert len(micro_batches(rows, 10, 0)) == 2


def test_rows_carry_the_sampling_temperature_and_greedy_is_refused() -> None:
    hot = replace(_segment(2, [-0.1, -0.2]), temperature=0.7)
    rows = build_rows([_episode(0, [hot, _segment(3, [-0.3])])], [1.0])
    assert [r.temperature for r in rows] == [0.7, 1.0]
    mb = collate(rows, pad_id=0)
    assert mb.temperature.tolist() == pytest.approx([0.7, 1.0])
    assert mb.to("cpu").temperature.tolist() == pytest.approx([0.7, 1.0])
    greedy = replace(_segment(2, [-0.1]), temperature=0.0)
    with pytest.raises(ValueError, match="cannot be trained"):
        build_rows([_episode(3, [greedy])], [1.0])
    # a greedy segment with nothing sampled is left out before the check
    assert build_rows([_episode(4, [replace(_segment(2, []), temperature=0.0)])], [1.0]) == []


def test_truncated_is_weights_hand_computed() -> None:
    trainer = torch.tensor([[-1.0, -1.0, -1.0, 5.0]])
    engine = torch.tensor([[-1.5, -1.0, -3.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]]).bool()
    w, m = truncated_is_weights(trainer, engine, mask, cap=2.0)
    # ratios e^0.5 = 1.65, 1, e^2 = 7.39 -> capped at 2; the masked position gets 0
    assert w[0].tolist() == pytest.approx([math.exp(0.5), 1.0, 2.0, 0.0])
    assert m["tis_weight_mean"].item() == pytest.approx((math.exp(0.5) + 3.0) / 3)
    assert m["tis_capped_frac"].item() == pytest.approx(1 / 3)
    assert m["tokens"].item() == 3
    with pytest.raises(ValueError):
        truncated_is_weights(trainer, engine, mask, cap=0.0)


def test_policy_loss_is_weights_scale_each_tokens_surrogate() -> None:
    new = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = new.detach().clone()
    args = (torch.tensor([1.0]), torch.ones(1, 2), torch.tensor([0]))
    plain, _ = policy_loss(new, old, *args)
    plain.backward()
    g_plain = new.grad.clone()
    new.grad = None
    weighted, m = policy_loss(new, old, *args, is_weights=torch.tensor([[2.0, 0.5]]))
    weighted.backward()
    # at ratio 1 each token's loss is -A/2: weights 2 and 0.5 give -(2 + 0.5)/2
    assert plain.item() == pytest.approx(-1.0) and weighted.item() == pytest.approx(-1.25)
    assert torch.allclose(new.grad, g_plain * torch.tensor([[2.0, 0.5]]))
    assert m["ratio_mean"].item() == pytest.approx(1.0)
