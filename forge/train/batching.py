"""Training rows from episodes: segments -> right-padded tensors, masks, episode index, weights.

Token in, token out (design decision 2): a row is a :class:`~forge.types.Segment`'s own token ids,
never a re-tokenisation. A row of ``L`` tokens gives ``L - 1`` positions: position ``t`` reads
``tokens[: t + 1]`` and predicts ``tokens[t + 1]``, so targets, loss mask and the recorded sampling
logprobs are the segment's shifted by one (a token at index 0 has no context and is never
trained; the engine never samples one there).

Every row carries its episode's advantage and the per-token loss weight ``1 / (E * T_e)`` (see
:func:`forge.train.grpo.episode_token_weights`), computed here once over the *whole* batch, so any
split of the rows into micro-batches accumulates exactly the full-batch gradient.

Every row also carries its segment's sampling temperature: the trainer divides the logits by it
before the log-softmax, so its log-probabilities are those of the distribution the engine sampled
from. A segment sampled greedily (temperature 0, as evaluation does) has no such distribution and
is refused with a ``ValueError``: greedy episodes are for evaluation, not for training.

A row also carries its segment's images (the pixels of the episode's screenshots, in prompt
order), which a vision-language trainer runs through its image processor again.

Micro-batches are bounded by padded size (rows x longest row <= ``micro_batch_tokens``): rows
are sorted longest first and packed greedily, which keeps padding small; a row longer than the
bound forms a micro-batch of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from forge.types import Episode, ImagePart


@dataclass
class Row:
    """One segment, shifted for next-token prediction (all tensors have ``len(tokens) - 1``)."""

    tokens: Tensor  # [L] long: the segment's token ids
    loss_mask: Tensor  # [L-1] bool: target token was sampled
    old_logprobs: Tensor  # [L-1] float: sampling logprob of the target (0 where not sampled)
    advantage: float
    episode: int  # index into the batch's episodes
    weight: float  # loss weight of each sampled token: 1 / (E * T_e)
    temperature: float = 1.0  # the segment's sampling temperature (> 0)
    images: list[ImagePart] = field(default_factory=list)  # the segment's images, in order

    @property
    def length(self) -> int:
        return int(self.tokens.numel())

    @property
    def sampled(self) -> int:
        return int(self.loss_mask.sum())


@dataclass
class MicroBatch:
    """Right-padded ``[B, T]`` tensors for one forward/backward pass."""

    input_ids: Tensor  # long; pad positions hold pad_id (never attended by real tokens)
    targets: Tensor  # long; the token each position predicts
    mask: Tensor  # bool; 1 where the target was sampled
    old_logprobs: Tensor  # float32
    advantages: Tensor  # float32, the row's episode advantage on every position
    weights: Tensor  # float32, per-token loss weights (0 off the mask)
    episode_index: Tensor  # [B] long
    temperature: Tensor  # [B] float32, each row's sampling temperature
    tokens: int  # real (unpadded) tokens in the rows
    sampled: int  # tokens with mask 1
    lengths: list[int] = field(default_factory=list)  # each row's positions (length - 1)
    images: list[list[ImagePart]] = field(default_factory=list)  # each row's images, in order

    def to(self, device: torch.device | str) -> MicroBatch:
        move = {
            k: getattr(self, k).to(device)
            for k in ("input_ids", "targets", "mask", "old_logprobs", "advantages", "weights")
        }
        return MicroBatch(
            **move,
            episode_index=self.episode_index.to(device),
            temperature=self.temperature.to(device),
            tokens=self.tokens,
            sampled=self.sampled,
            lengths=self.lengths,
            images=self.images,
        )


def segment_images(ep: Episode, turn_indices: Sequence[int]) -> list[ImagePart]:
    """The images of a segment's sequence, in order: those of its last turn's prompt (which
    holds every earlier turn's prompt as its prefix). Raises ``ValueError`` when the episode
    lacks the pixels of one."""
    if not turn_indices or not ep.turns:
        return []
    turn = ep.turns[turn_indices[-1]]
    missing = [sha for sha in turn.images if sha not in ep.images]
    if missing:
        raise ValueError(
            f"episode {ep.episode_id}: turn {turn.index} has images without their pixels "
            f"({', '.join(s[:12] for s in missing)}); load them with forge.episode_images"
        )
    return [ep.images[sha] for sha in turn.images]


def build_rows(
    episodes: Sequence[Episode], advantages: Sequence[float], images: bool = False
) -> list[Row]:
    """One row per segment that has a sampled token, with its episode's advantage and weight.

    Episodes with no sampled token at all are left out (they cannot carry a gradient) and do not
    count in ``E``. With ``images`` (a vision-language trainer), each row carries its segment's
    images (:func:`segment_images`). Raises ``ValueError`` on a segment whose fields disagree
    in length, and on a trainable segment sampled at temperature <= 0 (greedy: no distribution
    to train).
    """
    if len(episodes) != len(advantages):
        raise ValueError(f"{len(episodes)} episodes but {len(advantages)} advantages")
    staged: list[tuple[int, list[tuple[Tensor, Tensor, Tensor, float, list[ImagePart]]]]] = []
    for ep_i, ep in enumerate(episodes):
        parts = []
        for seg in ep.segments:
            n = len(seg.tokens)
            if len(seg.loss_mask) != n or len(seg.logprobs) != n:
                raise ValueError(
                    f"episode {ep.episode_id}: segment has {n} tokens, {len(seg.loss_mask)} mask "
                    f"entries and {len(seg.logprobs)} logprobs"
                )
            if n < 2:
                continue
            mask = torch.tensor(seg.loss_mask[1:], dtype=torch.bool)
            if not bool(mask.any()):
                continue
            if not seg.temperature > 0:
                raise ValueError(
                    f"episode {ep.episode_id}: a segment sampled at temperature "
                    f"{seg.temperature} (greedy) cannot be trained; sample with temperature > 0"
                )
            tokens = torch.tensor(seg.tokens, dtype=torch.long)
            old = torch.tensor(seg.logprobs[1:], dtype=torch.float32)
            pixels = segment_images(ep, seg.turn_indices) if images else []
            parts.append(
                (tokens, mask, torch.where(mask, old, 0.0), float(seg.temperature), pixels)
            )
        if parts:
            staged.append((ep_i, parts))
    n_eps = len(staged)
    rows: list[Row] = []
    for ep_i, parts in staged:
        t_e = sum(int(p[1].sum()) for p in parts)
        weight = 1.0 / (n_eps * t_e)
        for tokens, mask, old, temp, pixels in parts:
            rows.append(Row(tokens, mask, old, float(advantages[ep_i]), ep_i, weight, temp, pixels))
    return rows


def plan_micro_batches(lengths: Sequence[int], micro_batch_tokens: int) -> list[list[int]]:
    """Group row indices, longest first, so ``len(group) * longest <= micro_batch_tokens``."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    for i in order:
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= micro_batch_tokens:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def collate(rows: Sequence[Row], pad_id: int) -> MicroBatch:
    """Right-pad rows into one :class:`MicroBatch` (positions = row length - 1)."""
    width = max(r.length for r in rows) - 1
    b = len(rows)
    input_ids = torch.full((b, width), pad_id, dtype=torch.long)
    targets = torch.full((b, width), pad_id, dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.bool)
    old = torch.zeros((b, width), dtype=torch.float32)
    adv = torch.zeros((b, width), dtype=torch.float32)
    weights = torch.zeros((b, width), dtype=torch.float32)
    for i, r in enumerate(rows):
        n = r.length - 1
        input_ids[i, :n] = r.tokens[:-1]
        targets[i, :n] = r.tokens[1:]
        mask[i, :n] = r.loss_mask
        old[i, :n] = r.old_logprobs
        adv[i, :n] = r.advantage
        weights[i, :n] = r.loss_mask.float() * r.weight
    return MicroBatch(
        input_ids=input_ids,
        targets=targets,
        mask=mask,
        old_logprobs=old,
        advantages=adv,
        weights=weights,
        episode_index=torch.tensor([r.episode for r in rows], dtype=torch.long),
        temperature=torch.tensor([r.temperature for r in rows], dtype=torch.float32),
        tokens=sum(r.length for r in rows),
        sampled=sum(r.sampled for r in rows),
        lengths=[r.length - 1 for r in rows],
        images=[list(r.images) for r in rows],
    )


def micro_batches(rows: Sequence[Row], micro_batch_tokens: int, pad_id: int) -> list[MicroBatch]:
    """Split ``rows`` into padded micro-batches bounded by ``micro_batch_tokens``."""
    plan = plan_micro_batches([r.length - 1 for r in rows], micro_batch_tokens)
    return [collate([rows[i] for i in group], pad_id) for group in plan]
