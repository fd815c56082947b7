"""Images as model inputs: pixels, image tokens and multimodal positions, shared by the Policy,
the torch engine and the Trainer so that all three see exactly the same thing (DESIGN.md
decision 12).

The chat template puts one ``<|image_pad|>`` per image where it stands
(:data:`serve.chat_template.IMAGE_PLACEHOLDER`); :func:`expand_image_pads` turns each into as
many pads as the model's image processor gives that image (``grid_thw.prod() // merge**2``), so
a Completion's ``prompt_ids`` are exactly what the model consumed. :func:`check_image_pads` is
the reverse check on recorded ids: each run of pads must be exactly its image's count, else the
ids and the pixels disagree (the classic VLM-RL bug: training on pixels the policy never saw
at those positions), and the record is refused.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from forge.types import ImagePart
from serve.chat_template import IMAGE_PAD, VISION_TOKENS
from serve.engines.base import ImageInputError


@dataclass
class VisionInputs:
    """What an image processor made of a prompt's images, in order."""

    pixel_values: Tensor  # [patches, channels * temporal * patch * patch]
    image_grid_thw: Tensor  # [images, 3] long

    def counts(self, merge_size: int) -> list[int]:
        """Image tokens of each image: its patches over the ``merge_size``**2 merge."""
        return [int(g.prod()) // merge_size**2 for g in self.image_grid_thw]


def merge_size(processor: Any) -> int:
    return int(getattr(processor, "merge_size", None) or 2)


def pad_token_id(tokenizer: Any) -> int:
    pad = tokenizer.convert_tokens_to_ids(IMAGE_PAD)
    if not isinstance(pad, int) or pad == tokenizer.unk_token_id:
        raise ValueError(f"the tokenizer has no {IMAGE_PAD} token")
    return pad


def vision_token_ids(tokenizer: Any) -> list[int]:
    """Ids of the vision tokens the tokenizer knows: never sampled (the engine and the trainer
    both drop them from the distribution), since a sampled pad would have no pixels."""
    names = (*VISION_TOKENS, "<|video_pad|>")
    vocab = tokenizer.get_vocab()
    return sorted(vocab[n] for n in names if n in vocab)


def process_images(processor: Any, images: Sequence[ImagePart | bytes]) -> VisionInputs:
    """Run ``processor`` over the images' exact bytes (decoded to RGB)."""
    from PIL import Image

    pictures = []
    for image in images:
        data = image.data if isinstance(image, ImagePart) else image
        with Image.open(io.BytesIO(data)) as picture:
            pictures.append(picture.convert("RGB"))
    out = processor(images=pictures, return_tensors="pt")
    return VisionInputs(out["pixel_values"], out["image_grid_thw"].long())


def expand_image_pads(ids: list[int], counts: list[int], pad: int) -> list[int]:
    """``ids`` with the ``i``-th pad token repeated ``counts[i]`` times. Raises
    :class:`ImageInputError` when the prompt holds a different number of pads than images
    (the text itself held the pad token)."""
    found = sum(1 for t in ids if t == pad)
    if found != len(counts):
        raise ImageInputError(
            f"the prompt holds {found} image placeholders for {len(counts)} images "
            f"(is {IMAGE_PAD} typed in the text?)"
        )
    out: list[int] = []
    index = 0
    for t in ids:
        if t == pad:
            out.extend([pad] * counts[index])
            index += 1
        else:
            out.append(t)
    return out


def pad_runs(ids: Sequence[int], pad: int) -> list[int]:
    """Lengths of the runs of consecutive pad tokens in ``ids``, in order."""
    runs: list[int] = []
    previous = None
    for t in ids:
        if t == pad:
            if previous == pad:
                runs[-1] += 1
            else:
                runs.append(1)
        previous = t
    return runs


def check_image_pads(ids: Sequence[int], counts: list[int], pad: int) -> None:
    """Raise ``ValueError`` unless the pad runs in ``ids`` are exactly ``counts``: the recorded
    ids and the images' grids disagree."""
    runs = pad_runs(ids, pad)
    if runs != counts:
        raise ValueError(
            f"image tokens {runs} in the ids do not match the images' grids {counts}: the ids "
            "were not made from these images"
        )


def rope_positions(
    model: Any,
    input_ids: Tensor,
    vision: VisionInputs | None,
    attention_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Multimodal rope positions ``[3, B, L]`` of ``input_ids`` and each row's delta ``[B, 1]``
    (the offset a later token's position has from its index); plain positions without images."""
    b, n = input_ids.shape
    if vision is None:
        if attention_mask is None:
            base = torch.arange(n, device=input_ids.device).expand(b, n)
        else:
            base = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return base.unsqueeze(0).expand(3, b, n), torch.zeros((b, 1), dtype=torch.long)
    config = model.config
    mm = (input_ids == config.image_token_id).int()
    inner = model.model if hasattr(model.model, "get_rope_index") else model
    return inner.get_rope_index(
        input_ids,
        mm_token_type_ids=mm,
        image_grid_thw=vision.image_grid_thw.to(input_ids.device),
        attention_mask=attention_mask,
    )


def is_vision_model(model: Any) -> bool:
    return getattr(model.config, "vision_config", None) is not None
