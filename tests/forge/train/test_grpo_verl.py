"""forge.train.grpo against veRL's own functions on the same random tensors.

veRL is an optional reference: its wheel pins transformers<5.11 and pulls wandb, datasets,
tensorboard, so it is installed with ``pip install --no-deps verl==0.9.1`` next to the small
import-time dependencies of the ``verl`` extra. Without it these tests skip.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from forge.train.grpo import group_advantages, kl_penalty, policy_loss

try:
    from verl.trainer.ppo import core_algos
    from verl.workers.config import ActorConfig

    VERL_ERROR = ""
except Exception as e:  # ImportError, or a dependency failing at import
    VERL_ERROR = (
        f"veRL not importable ({type(e).__name__}: {e}); install the 'verl' extra and "
        "`pip install --no-deps verl==0.9.1`"
    )

pytestmark = pytest.mark.skipif(bool(VERL_ERROR), reason=VERL_ERROR)


def _random_batch(seed: int, rows: int = 12, width: int = 17) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    old = -torch.rand(rows, width, generator=g) * 3
    new = old + torch.randn(rows, width, generator=g) * 0.4  # ratios well outside [0.8, 1.2]
    adv = torch.randn(rows, generator=g)
    return {"mask": mask, "old": old, "new": new, "adv": adv}


@pytest.mark.parametrize("normalize", [True, False])
def test_group_advantages_match_verl(normalize: bool) -> None:
    g = torch.Generator().manual_seed(1)
    n_groups, n, width = 6, 5, 9
    rewards = torch.randint(0, 4, (n_groups, n), generator=g).float() / 3
    rewards[2] = 0.5  # an all-equal group
    mask = torch.ones(n_groups * n, width)
    token_rewards = torch.zeros(n_groups * n, width)
    token_rewards[:, -1] = rewards.flatten()
    index = np.repeat(np.array([f"task{i}" for i in range(n_groups)], dtype=object), n)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(
        token_rewards, mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=normalize
    )
    ours = group_advantages(rewards, eps=1e-6, normalize_std=normalize)
    assert torch.allclose(theirs[:, 0], ours.flatten(), atol=1e-6)


def _verl_loss(b: dict[str, torch.Tensor], low: float, high: float, mode: str):
    config = ActorConfig(
        strategy="fsdp",
        ppo_mini_batch_size=4,
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=1,
        clip_ratio=low,
        clip_ratio_low=low,
        clip_ratio_high=high,
        clip_ratio_c=3.0,
    )
    new = b["new"].clone().requires_grad_(True)
    adv = b["adv"][:, None] * b["mask"]
    loss, metrics = core_algos.compute_policy_loss_vanilla(
        b["old"], new, adv, b["mask"], loss_agg_mode=mode, config=config
    )
    loss.backward()
    return loss, metrics, new.grad


@pytest.mark.parametrize(("low", "high"), [(0.2, 0.2), (0.2, 0.28)])
def test_per_episode_loss_matches_verl_seq_mean_token_mean(low: float, high: float) -> None:
    b = _random_batch(2)
    theirs, their_m, their_grad = _verl_loss(b, low, high, "seq-mean-token-mean")
    new = b["new"].clone().requires_grad_(True)
    ours, m = policy_loss(
        new, b["old"], b["adv"], b["mask"], torch.arange(len(new)), low, high, clip_ratio_c=3.0
    )
    ours.backward()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-5, abs=1e-7)
    assert torch.allclose(new.grad, their_grad, atol=1e-6)
    assert m["clip_frac"].item() == pytest.approx(their_m["actor/pg_clipfrac"], abs=1e-6)
    assert m["ppo_kl"].item() == pytest.approx(their_m["actor/ppo_kl"], abs=1e-6)
    assert m["clip_frac_dual"].item() == pytest.approx(their_m["actor/pg_clipfrac_lower"], abs=1e-6)


def test_episode_split_over_rows_matches_verl_on_the_joined_row() -> None:
    """Each episode is one veRL sequence; here it is cut into two rows (two segments)."""
    b = _random_batch(3, rows=8, width=20)
    theirs, _, their_grad = _verl_loss(b, 0.2, 0.28, "seq-mean-token-mean")
    cut, width = 7, 20
    new = b["new"].clone().requires_grad_(True)

    def split(x: torch.Tensor) -> torch.Tensor:  # row r -> rows r (head) and R + r (tail)
        head = torch.nn.functional.pad(x[:, :cut], (0, width - cut))
        tail = torch.nn.functional.pad(x[:, cut:], (0, cut))
        return torch.cat([head, tail])

    mask, old, new_rows = split(b["mask"]), split(b["old"]), split(new)
    idx = torch.arange(len(new)).repeat(2)
    ours, _ = policy_loss(new_rows, old, b["adv"].repeat(2), mask, idx, 0.2, 0.28)
    ours.backward()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-5, abs=1e-7)
    assert torch.allclose(new.grad, their_grad, atol=1e-6)


@pytest.mark.parametrize(("ours", "theirs"), [("k1", "k1"), ("k2", "mse"), ("k3", "low_var_kl")])
def test_kl_penalty_matches_verl(ours: str, theirs: str) -> None:
    g = torch.Generator().manual_seed(4)
    new, ref = -torch.rand(50, generator=g) * 5, -torch.rand(50, generator=g) * 5
    assert torch.allclose(kl_penalty(new, ref, ours), core_algos.kl_penalty(new, ref, theirs))
