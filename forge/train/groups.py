"""A GRPO step's bookkeeping outside the model, for both trainers (:mod:`actors.trainer`,
:mod:`actors.verl_trainer`): the batch a step takes from its groups (which episodes, their
advantages, the batch's reward, advantage and staleness metrics) and the step's metrics from
its micro-batches' totals."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from forge.config import TrainerConfig
from forge.observe.fidelity import wire_fidelity
from forge.train.batching import MicroBatch
from forge.train.grpo import group_advantages
from forge.train.logprobs import GapStats
from forge.types import Episode
from rewards.judge import judge_usage

SUMMED = ("loss", "pg_loss", "kl")  # micro-batch shares that add up to the batch value


def grpo_batch(
    groups: list[list[Episode]], version: int, cfg: TrainerConfig
) -> tuple[list[Episode], list[float], dict[str, Any]]:
    """The episodes to train on (groups whose advantages are not all 0), their advantages as
    ``cfg`` says (``advantage``: group-relative, ``normalize_adv_std``, or the reward itself;
    negative ones times ``negative_advantage_scale``), and the batch's reward, advantage and
    staleness metrics (``version``: the weights being updated). Raises ``ValueError`` on a
    failed episode."""
    episodes: list[Episode] = []
    advantages: list[float] = []
    rewards: list[float] = []
    skipped = 0
    for group in groups:
        bad = [e.episode_id for e in group if e.status != "ok"]
        if bad:
            raise ValueError(f"train_step takes ok episodes only; got failed ones: {bad}")
        r = torch.tensor([[e.reward for e in group]], dtype=torch.float32)
        rewards.extend(r[0].tolist())
        if cfg.advantage == "reward":
            adv = r[0]
        else:
            adv = group_advantages(r, normalize_std=cfg.normalize_adv_std)[0]
        if not bool(adv.any()):
            skipped += 1
            continue
        episodes.extend(group)
        advantages.extend(torch.where(adv < 0, adv * cfg.negative_advantage_scale, adv).tolist())
    versions = [t.policy_version for g in groups for e in g for t in e.turns]
    adv_t = torch.tensor(advantages or [0.0])
    rew_t = torch.tensor(rewards or [0.0])
    stats = {
        "reward_mean": float(rew_t.mean()),
        "reward_std": float(rew_t.std()) if len(rewards) > 1 else 0.0,
        "advantage_mean": float(adv_t.mean()),
        "advantage_std": float(adv_t.std()) if len(advantages) > 1 else 0.0,
        "advantage_abs_mean": float(adv_t.abs().mean()),
        "advantage_max": float(adv_t.max()),
        "advantage_min": float(adv_t.min()),
        "episodes": float(len(episodes)),
        "episodes_in": float(sum(len(g) for g in groups)),
        "groups": float(len(groups)),
        "skipped_groups": float(skipped),
        "pass_rate": sum(r >= 1.0 for r in rewards) / max(1, len(rewards)),
        # how many versions behind the weights being updated the oldest sampled token is
        "staleness_max": float(version - min(versions)) if versions else 0.0,
        "by_harness": by_harness(groups),
        **judge_stats(groups),
    }
    return episodes, advantages, stats


def judge_stats(groups: list[list[Episode]]) -> dict[str, float]:
    """The judges' calls behind the batch's rewards: ``judge_calls``, ``judge_cached`` (of
    them, answered from the cache), ``judge_s`` (their seconds, summed over episodes that
    verify at once, so it can exceed the step's wall time) and ``judge_share`` (of the
    episodes' own time, the share spent waiting on the judge); none without a judge."""
    episodes = [e for g in groups for e in g]
    used = [judge_usage(e.verifier_outputs) for e in episodes]
    calls = sum(u[0] for u in used)
    if not calls:
        return {}
    seconds = sum(u[2] for u in used)
    return {
        "judge_calls": float(calls),
        "judge_cached": float(sum(u[1] for u in used)),
        "judge_s": seconds,
        "judge_share": seconds / max(sum(e.duration_s for e in episodes), 1e-9),
    }


def by_harness(groups: list[list[Episode]]) -> dict[str, dict[str, float]]:
    """The batch's groups split by the harness they played in (each group is in one):
    ``groups``, ``episodes``, ``reward_mean``, ``pass_rate``, ``turns_mean``,
    ``tokens_sampled`` and ``truncated`` per harness; episode-weighted, so they add up to the
    batch's. With several harnesses, ``wire``: each one's token-fidelity shares."""
    split: dict[str, list[Episode]] = {}
    counts: dict[str, int] = {}
    for group in groups:
        if group:
            name = group[0].provenance.get("harness") or group[0].harness  # as the run names it
            split.setdefault(name, []).extend(group)
            counts[name] = counts.get(name, 0) + 1
    out = {}
    for name, eps in split.items():
        n = len(eps)
        out[name] = {
            "groups": float(counts[name]),
            "episodes": float(n),
            "reward_mean": sum(e.reward for e in eps) / n,
            "pass_rate": sum(e.reward >= 1.0 for e in eps) / n,
            "turns_mean": sum(len(e.turns) for e in eps) / n,
            "tokens_sampled": float(sum(len(t.completion_ids) for e in eps for t in e.turns)),
            "truncated": float(sum(1 for e in eps if e.truncated)),
        }
        if len(split) > 1:  # a mix: what each harness does on the wire (forge/observe/fidelity.py)
            wire = wire_fidelity(eps)
            out[name]["wire"] = {k: float(v) for k, v in wire.items() if v is not None}
    return out


def step_metrics(
    totals: dict[str, Any],
    grad_norms: list[Tensor],
    gap: GapStats,
    batches: list[MicroBatch],
    stats: dict[str, Any],
    version: int,
    step: int,
) -> dict[str, Any]:
    """A step's metrics: ``stats`` (the batch's), the micro-batches' ``totals`` per token (or
    per epoch for the :data:`SUMMED` ones), token counts, the mean gradient norm, the
    trainer-engine logprob gap, and the ``version`` and ``step`` after it."""
    epochs = max(len(grad_norms), 1)  # epochs run (a non-finite one ends the step)
    tokens = float(totals.get("tokens", 0.0)) or 1.0
    out: dict[str, Any] = dict(stats)
    for k, v in totals.items():
        if k == "ratio_max":
            out[k] = float(v)
        elif k != "tokens":
            out[k] = float(v) / (epochs if k in SUMMED else tokens)
    for k in ("loss", "pg_loss", "clip_frac", "approx_kl", "ratio_mean", "entropy"):
        out.setdefault(k, 0.0)
    sampled = sum(b.sampled for b in batches)
    out["tokens_sampled"] = float(sampled)
    out["tokens_total"] = float(sum(b.tokens for b in batches))
    out["micro_batches"] = float(len(batches))
    out["grad_norm"] = float(torch.stack(grad_norms).mean()) if grad_norms else 0.0
    out.update(gap.metrics())
    out["version"] = float(version)
    out["step"] = float(step)
    return out
