"""The trainer's log-probabilities of sampled tokens, and their gap to the engine's.

:func:`token_logprobs` computes, for each sampled position of a micro-batch, the log-probability
of the target token under the *tempered* distribution ``softmax(logits / T)``, with ``T`` the
temperature the engine sampled the row with (:attr:`forge.train.batching.MicroBatch.temperature`).
That is the distribution the engine sampled from and recorded logprobs of, so the ratio
``pi_new / pi_old`` of the PPO surrogate compares like with like at any temperature. The engine
also truncates by ``top_p`` when asked; the HarnessPod forces ``top_p = 1`` on training calls, so
the temperature is the whole of the sampling distribution the trainer must reproduce.

:class:`GapStats` accumulates, over a step's micro-batches and before the update, how far the
trainer's log-probabilities are from the engine's on the sampled tokens:

- ``logprob_abs_diff_mean`` / ``logprob_abs_diff_max``: mean and max ``|trainer - engine|``;
- ``logprob_kl``: the k3 estimate of KL(engine || trainer) from the engine's samples,
  ``mean(r - 1 - log r)`` with ``r = pi_trainer / pi_engine`` (non-negative, low variance);
- ``logprob_kl_k1``: the k1 estimate ``mean(engine - trainer)`` (unbiased, may be negative).

With the same weights, kernels and precision both are ~0 (float rounding only); a gap is
numerics (bf16 engine, other kernels) or a mismatch in what was sampled from (temperature).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from forge.train.batching import MicroBatch
from forge.train.grpo import LOG_RATIO_CLAMP
from serve.vision import (
    VisionInputs,
    check_image_pads,
    is_vision_model,
    merge_size,
    pad_token_id,
    process_images,
    rope_positions,
)

_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def token_logprobs(
    model: Any,
    mb: MicroBatch,
    with_entropy: bool = False,
    vision: VisionInputs | None = None,
    banned: list[int] | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Logprobs ``[B, T]`` of the targets at sampled positions (0 elsewhere), in float32, under
    each row's tempered distribution; with ``with_entropy``, also the mean entropy of those
    tempered distributions over the sampled positions (no gradient).

    Logits are computed only where the loss needs them (the output head applied to the selected
    hidden states), unless the model transforms its logits after the head (soft capping,
    scaling), in which case the full forward is used. A vision-language model reads the
    micro-batch's pixels (``vision``: its rows' images, in row order) at their image tokens,
    with multimodal rope positions, as the engine did; ``banned`` ids (the vision tokens, which
    the engine never samples) are dropped from the distribution as the engine drops them.
    """
    sel = mb.mask
    head = model.get_output_embeddings()
    if is_vision_model(model):
        logits = head(_vision_hidden(model, mb, vision)[sel]).float()
    elif head is not None and not any(getattr(model.config, k, None) for k in _LOGIT_TRANSFORMS):
        hidden = model.get_decoder()(input_ids=mb.input_ids, use_cache=False).last_hidden_state
        logits = head(hidden[sel]).float()
    else:
        logits = model(input_ids=mb.input_ids, use_cache=False).logits[sel].float()
    if banned:
        logits[:, banned] = float("-inf")
    temps = mb.temperature.to(logits.device, torch.float32)[:, None].expand(sel.shape)[sel]
    logits = logits / temps[:, None]
    lse = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(-1, mb.targets[sel].unsqueeze(-1)).squeeze(-1) - lse
    out = torch.zeros(sel.shape, dtype=picked.dtype, device=picked.device)
    out = out.masked_scatter(sel, picked)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            probs = torch.softmax(logits, dim=-1)
            weighted = torch.where(probs > 0, probs * logits, 0.0)  # banned ids: 0 * -inf
            entropy = (lse - weighted.sum(-1)).mean() if picked.numel() else lse.sum()
    return out, entropy


def _vision_hidden(model: Any, mb: MicroBatch, vision: VisionInputs | None) -> Tensor:
    """Last hidden states ``[B, T, H]`` of a vision-language model over right-padded rows."""
    width = mb.input_ids.shape[1]
    lengths = torch.tensor(mb.lengths or [width] * mb.input_ids.shape[0])
    attention = (torch.arange(width)[None, :] < lengths[:, None]).long().to(mb.input_ids.device)
    positions, _ = rope_positions(model, mb.input_ids, vision, attention)
    extra: dict[str, Any] = {}
    if vision is not None:
        extra = {
            "pixel_values": vision.pixel_values.to(mb.input_ids.device, model.dtype),
            "image_grid_thw": vision.image_grid_thw.to(mb.input_ids.device),
        }
    out = model.model(
        input_ids=mb.input_ids,
        attention_mask=attention,
        position_ids=positions,
        use_cache=False,
        **extra,
    )
    return out.last_hidden_state


class GapStats:
    """Engine-vs-trainer log-probability gap on sampled tokens, summed over micro-batches."""

    def __init__(self, device: torch.device | str = "cpu") -> None:
        zero = torch.zeros((), device=device)
        self.abs_max, self.abs_sum, self.k1_sum, self.k3_sum = zero, zero, zero, zero
        self.tokens = 0

    @torch.no_grad()
    def add(self, trainer: Tensor, engine: Tensor, mask: Tensor) -> None:
        """Add one micro-batch: ``trainer`` and ``engine`` logprobs ``[B, T]``, ``mask`` bool."""
        diff = torch.where(mask, trainer.detach().float() - engine.float(), 0.0)
        self.abs_max = torch.maximum(self.abs_max, diff.abs().max())
        self.abs_sum = self.abs_sum + diff.abs().sum()
        self.k1_sum = self.k1_sum - diff.sum()
        log_r = diff.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        self.k3_sum = self.k3_sum + torch.where(mask, log_r.exp() - 1.0 - log_r, 0.0).sum()
        self.tokens += int(mask.sum())

    def metrics(self) -> dict[str, float]:
        n = max(self.tokens, 1)
        return {
            "logprob_abs_diff_max": float(self.abs_max),
            "logprob_abs_diff_mean": float(self.abs_sum) / n,
            "logprob_kl": float(self.k3_sum) / n,
            "logprob_kl_k1": float(self.k1_sum) / n,
        }


def micro_batch_vision(image_processor: Any, tokenizer: Any, mb: MicroBatch) -> VisionInputs | None:
    """The micro-batch's pixels, from its rows' images by the model's image processor (as
    the Policy made them; None for a text model); refuses rows whose image tokens do not match
    their images' grids (ids and pixels that disagree would train on what the policy never
    saw)."""
    if image_processor is None:
        return None
    images = [image for row in mb.images for image in row]
    vision = process_images(image_processor, images) if images else None
    counts = vision.counts(merge_size(image_processor)) if vision is not None else []
    pad, start = pad_token_id(tokenizer), 0
    for i, row in enumerate(mb.images):
        ids = mb.input_ids[i, : mb.lengths[i]].tolist()
        check_image_pads(ids, counts[start : start + len(row)], pad)
        start += len(row)
    return vision
