"""Training rows (:mod:`forge.train.batching`) in veRL's batch layout, split over its
data-parallel ranks.

veRL's actor takes a prompt left-padded to ``P`` and a response right-padded to ``R`` per row:
``prompts``, ``responses``, ``input_ids`` (the two side by side), ``attention_mask``,
``position_ids`` (restarting at 0 in each row), ``response_mask`` (the tokens trained),
``old_log_probs`` and ``advantages`` over the response. A row here is one segment: its prompt is
everything before its first sampled token, its response the rest, tool results and other
unsampled tokens inside it masked out. The recorded token ids are used as they are (token in,
token out), each row's sampling temperature goes with it.

With ``episode_weights`` (``loss_agg_mode: episode-mean``) the advantages carry each token's
weight ``1 / (E * T_e)``: under veRL's ``token-sum`` aggregation, which sums token losses over
the global batch, that is the torch backend's loss exactly (the surrogate is linear in the
advantage, clipping decided by its sign).

Rows are dealt to ranks longest first, round robin, and each rank's share is padded with empty
rows (one pad token of prompt and of response, nothing trained) to the same number of rows, a
multiple of the micro-batch size: every rank then runs the same number of forward and backward
passes, which FSDP's collectives need.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from forge.train.batching import Row


@dataclass
class VerlRow:
    """One row split where veRL wants it."""

    prompt: Tensor  # [p] long
    response: Tensor  # [r] long
    mask: Tensor  # [r] bool: trained
    old_logprobs: Tensor  # [r] float32 (0 where not trained)
    advantage: Tensor  # [r] float32
    temperature: float


def split_row(row: Row, episode_weights: bool) -> VerlRow:
    """Prompt up to the first sampled token, response from it on (the row's shifted mask and
    logprobs line up with ``tokens[1:]``)."""
    first = int(torch.nonzero(row.loss_mask)[0])  # target index: token first + 1
    mask = row.loss_mask[first:]
    scale = row.weight if episode_weights else 1.0
    return VerlRow(
        prompt=row.tokens[: first + 1],
        response=row.tokens[first + 1 :],
        mask=mask,
        old_logprobs=row.old_logprobs[first:],
        advantage=torch.where(mask, row.advantage * scale, 0.0).float(),
        temperature=row.temperature,
    )


def _pad_row(pad_id: int) -> VerlRow:
    one = torch.tensor([pad_id])
    zero = torch.zeros(1)
    return VerlRow(one, one, torch.zeros(1, dtype=torch.bool), zero, zero, 1.0)


def collate(rows: Sequence[VerlRow], pad_id: int) -> dict[str, Tensor]:
    """The tensors of one rank's batch (``temperature``: one per row)."""
    p = max(int(r.prompt.numel()) for r in rows)
    n = max(int(r.response.numel()) for r in rows)
    b = len(rows)
    prompts = torch.full((b, p), pad_id, dtype=torch.long)
    responses = torch.full((b, n), pad_id, dtype=torch.long)
    attention = torch.zeros((b, p + n), dtype=torch.long)
    mask = torch.zeros((b, n), dtype=torch.long)
    old = torch.zeros((b, n), dtype=torch.float32)
    adv = torch.zeros((b, n), dtype=torch.float32)
    for i, r in enumerate(rows):
        lp, lr = int(r.prompt.numel()), int(r.response.numel())
        prompts[i, p - lp :] = r.prompt
        responses[i, :lr] = r.response
        attention[i, p - lp : p + lr] = 1
        mask[i, :lr] = r.mask.long()
        old[i, :lr] = r.old_logprobs
        adv[i, :lr] = r.advantage
    return {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention,
        "position_ids": torch.clamp(attention.cumsum(-1) - 1, min=0),
        "response_mask": mask,
        "old_log_probs": old,
        "advantages": adv,
        "temperature": torch.tensor([r.temperature for r in rows], dtype=torch.float32),
    }


def shard(
    rows: Sequence[Row], ranks: int, micro_batch_size: int, pad_id: int, episode_weights: bool
) -> tuple[list[dict[str, Tensor]], list[list[int]]]:
    """Each rank's batch, and which of ``rows`` it holds (in its order; padding rows are not
    listed: they come after)."""
    order = sorted(range(len(rows)), key=lambda i: -rows[i].length)
    owned: list[list[int]] = [order[r::ranks] for r in range(ranks)]
    per_rank = max(1, max(len(o) for o in owned))
    per_rank = -(-per_rank // micro_batch_size) * micro_batch_size
    batches = []
    for idx in owned:
        split = [split_row(rows[i], episode_weights) for i in idx]
        split += [_pad_row(pad_id)] * (per_rank - len(split))
        batches.append(collate(split, pad_id))
    return batches, owned
