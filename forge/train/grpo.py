"""GRPO math as pure functions on tensors: group advantages, the clipped loss, KL estimators.

Conventions shared by every function here (design decisions 2 and 4):

- Tensors of per-token values have shape ``[rows, T]``; a *row* is one training sequence (a
  :class:`~forge.types.Segment`, right-padded), and ``value[r, t]`` belongs to the token that
  position ``t`` of row ``r`` predicts.
- ``mask[r, t]`` is 1 only on tokens the policy sampled; everything else (prompts, tool results,
  padding) contributes nothing, whatever its value (it may even be ``inf``/``nan``).
- An *episode* may span several rows (one per segment). ``episode_index[r]`` says which episode
  row ``r`` belongs to; the loss averages each episode's sampled tokens across all its rows, then
  averages episodes ("seq-mean-token-mean" in veRL's terms, with sequence = episode), so a long
  episode weighs as much as a short one.

The per-episode mean is written as a weighted token *sum*: token ``t`` of episode ``e`` has weight
``1 / (E * T_e)`` (``E`` episodes with sampled tokens, ``T_e`` sampled tokens of ``e``; see
:func:`episode_token_weights`). A sum is linear, so computing those weights once over the whole
batch and passing them (``weights=``) to every micro-batch makes the gradients accumulated over
micro-batches equal, up to float rounding, to the full-batch gradient, however rows are split.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

KLKind = Literal["k1", "k2", "k3"]
LOG_RATIO_CLAMP = 20.0  # |log ratio| bound before exp, as veRL does, so one token cannot overflow


def group_advantages(rewards: Tensor, eps: float = 1e-6, normalize_std: bool = True) -> Tensor:
    """GRPO outcome advantages: ``(r - mean_group) / (std_group + eps)`` for ``rewards[G, n]``.

    ``std_group`` is the *unbiased* sample standard deviation (Bessel's correction, ``n - 1``;
    ``torch.std``'s default), the definition veRL's ``compute_grpo_outcome_advantage`` uses, so the
    two agree. With ``normalize_std=False`` the advantage is only centred (Dr. GRPO).

    A group whose rewards are all equal gets exactly 0 (not ``tiny / eps``: a float mean of equal
    values can miss them by one ulp). A group of one attempt has no baseline and gets 0 too (veRL
    would return the raw reward there).
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards: expected [n_groups, n], got shape {tuple(rewards.shape)}")
    rewards = rewards.float()
    if rewards.shape[1] < 2:
        return torch.zeros_like(rewards)
    centred = rewards - rewards.mean(dim=-1, keepdim=True)
    adv = centred / (rewards.std(dim=-1, keepdim=True) + eps) if normalize_std else centred
    equal = (rewards == rewards[:, :1]).all(dim=-1, keepdim=True)
    return torch.where(equal, torch.zeros_like(adv), adv)


def episode_token_weights(
    mask: Tensor, episode_index: Tensor, num_episodes: int | None = None
) -> Tensor:
    """Per-token weights ``1 / (E * T_e)`` that turn a weighted sum into the per-episode mean.

    ``T_e`` counts the sampled tokens of episode ``e`` over all its rows; ``E`` counts episodes
    with at least one sampled token (others, like veRL's fully masked sequences, are left out).
    The weights sum to 1 when any token is sampled. ``num_episodes`` only sizes the count table.
    """
    maskf = mask.float()
    episode_index = episode_index.long()
    size = num_episodes if num_episodes is not None else int(episode_index.max()) + 1
    per_episode = torch.zeros(size, dtype=maskf.dtype, device=maskf.device)
    per_episode.index_add_(0, episode_index, maskf.sum(dim=-1))
    present = int((per_episode > 0).sum())
    if present == 0:
        return torch.zeros_like(maskf)
    row_tokens = per_episode[episode_index]
    row_weight = torch.where(row_tokens > 0, 1.0 / (row_tokens.clamp(min=1) * present), 0.0)
    return maskf * row_weight[:, None]


def kl_penalty(new_logprobs: Tensor, ref_logprobs: Tensor, kind: KLKind = "k3") -> Tensor:
    """Per-token estimate of KL(new || ref) from samples of the new policy (Schulman, 2020).

    ``k1 = log(new/ref)``; ``k2 = (log(new/ref))^2 / 2``; ``k3 = ref/new - log(ref/new) - 1``
    (non-negative, low variance; veRL's ``low_var_kl``, with its clamps: the log ratio to ±20 and
    the result to ±10).
    """
    log_ratio = new_logprobs - ref_logprobs
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return 0.5 * log_ratio.square()
    if kind == "k3":
        ref_over_new = (-log_ratio).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        return (ref_over_new.exp() - ref_over_new - 1.0).clamp(-10.0, 10.0)
    raise ValueError(f"kl kind {kind!r}: expected k1, k2 or k3")


def policy_loss(
    new_logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    episode_index: Tensor,
    clip_eps_low: float = 0.2,
    clip_eps_high: float = 0.2,
    kl: Tensor | None = None,
    kl_coef: float = 0.0,
    *,
    clip_ratio_c: float | None = 3.0,
    weights: Tensor | None = None,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate on sampled tokens, averaged per episode, plus ``kl_coef * kl``.

    Per token, with ``ratio = exp(new - old)`` and advantage ``A``:
    ``max(-A * ratio, -A * clip(ratio, 1 - clip_eps_low, 1 + clip_eps_high))``; for ``A < 0`` it is
    further capped at ``-A * clip_ratio_c`` (dual-clip PPO, veRL's default 3.0; ``None`` turns it
    off), which bounds the loss of a very stale token whose ratio exploded.

    ``advantages`` is ``[rows, T]`` or ``[rows]`` (one value per row). ``kl`` is a per-token
    penalty (see :func:`kl_penalty`), aggregated with the same per-episode weights. ``weights``
    (default: :func:`episode_token_weights` of this batch) lets a micro-batch use weights computed
    over the whole batch so accumulated gradients are exact. ``is_weights`` (detached, per token;
    see :func:`truncated_is_weights`) multiply each token's surrogate, as rollout correction does;
    the KL term is not reweighted.

    Returns the scalar loss and detached metrics. ``pg_loss`` and ``kl`` (when given) are weighted
    sums like the loss, so micro-batch values add up to the batch's. The others are means over
    this batch's sampled tokens: ``clip_frac`` (the clipped branch is active), ``clip_frac_dual``,
    ``approx_kl`` (k3 estimate of KL(old || new)), ``ppo_kl`` (k1, veRL's ``ppo_kl``),
    ``ratio_mean`` and ``ratio_max``; ``tokens`` is their count, for merging micro-batches.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(new_logprobs)
    maskb = mask.bool()
    if weights is None:
        weights = episode_token_weights(maskb, episode_index)
    zero = torch.zeros((), dtype=new_logprobs.dtype, device=new_logprobs.device)

    log_ratio = torch.where(maskb, new_logprobs - old_logprobs, zero)
    log_ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = log_ratio.exp()
    adv = torch.where(maskb, advantages.to(ratio.dtype), zero)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_eps_low, 1.0 + clip_eps_high)
    pg = torch.maximum(unclipped, clipped)
    dual = torch.zeros_like(maskb)
    if clip_ratio_c is not None:
        if clip_ratio_c <= 1.0:
            raise ValueError(f"clip_ratio_c must exceed 1 (got {clip_ratio_c})")
        cap = -adv * clip_ratio_c
        dual = (adv < 0) & (pg > cap)
        pg = torch.where(dual, cap, pg)
    if is_weights is not None:
        pg = pg * is_weights.detach().to(pg.dtype)
    pg = torch.where(maskb, pg, zero)
    pg_loss = (pg * weights).sum()
    loss = pg_loss
    kl_mean = None
    if kl is not None:
        kl = torch.where(maskb, kl, zero)
        kl_term = (kl * weights).sum()
        loss = loss + kl_coef * kl_term
        kl_mean = kl_term

    with torch.no_grad():
        n = maskb.sum()
        denom = n.clamp(min=1).to(ratio.dtype)

        def mean(x: Tensor) -> Tensor:
            return torch.where(maskb, x.to(ratio.dtype), zero).sum() / denom

        metrics = {
            "pg_loss": pg_loss.detach(),
            "clip_frac": mean(clipped > unclipped),
            "clip_frac_dual": mean(dual),
            "approx_kl": mean(ratio - 1.0 - log_ratio),
            "ppo_kl": mean(-log_ratio),
            "ratio_mean": mean(ratio),
            "ratio_max": torch.where(maskb, ratio, zero).max() if maskb.any() else zero + 1.0,
            "tokens": n.to(ratio.dtype),
        }
        if kl_mean is not None:
            metrics["kl"] = kl_mean.detach()
    return loss, metrics


def truncated_is_weights(
    trainer_logprobs: Tensor, engine_logprobs: Tensor, mask: Tensor, cap: float
) -> tuple[Tensor, dict[str, Tensor]]:
    """Token-level truncated importance sampling weights ``min(pi_trainer / pi_engine, cap)``.

    The rollout correction of veRL's ``rollout_corr`` (token-level TIS, Yao et al. 2025): the
    engine sampled from ``pi_engine`` (its own numerics: another kernel, bf16), the trainer's
    surrogate is built on ``pi_trainer`` (the trainer's log-probabilities of the same tokens
    before the update), and each token's loss is weighted by their ratio, truncated above at
    ``cap`` to bound the variance. Weights are detached and 0 off the mask; the log ratio is
    clamped to ``±LOG_RATIO_CLAMP`` before ``exp``. Metrics (means over sampled tokens):
    ``tis_weight_mean`` (after truncation) and ``tis_capped_frac`` (tokens whose ratio exceeded
    ``cap``); ``tokens`` counts them.
    """
    if not cap > 0:
        raise ValueError(f"tis cap must be positive (got {cap})")
    maskb = mask.bool()
    with torch.no_grad():
        log_ratio = (trainer_logprobs.detach() - engine_logprobs).float()
        log_ratio = torch.where(maskb, log_ratio, 0.0).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        ratio = log_ratio.exp()
        capped = maskb & (ratio > cap)
        weights = torch.where(maskb, ratio.clamp(max=cap), 0.0)
        denom = maskb.sum().clamp(min=1).float()
        metrics = {
            "tis_weight_mean": weights.sum() / denom,
            "tis_capped_frac": capped.float().sum() / denom,
            "tokens": maskb.sum().float(),
        }
    return weights, metrics
