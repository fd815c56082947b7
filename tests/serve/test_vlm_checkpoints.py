"""Hugging Face vision-language checkpoints by path: Qwen2.5-VL- and Qwen3-VL-shaped models
(transformers' own classes, random weights, ``tiny-vl``'s tokenizer and image processor) saved
to a folder, served by the torch engine with a screenshot, and recomputed by the Trainer on the
same pixels: the logprobs agree, and without the pixels they do not."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from actors.trainer import Trainer
from forge.train.batching import build_rows, micro_batches
from forge.train.logprobs import token_logprobs
from forge.types import (
    ChatRequest,
    Episode,
    Message,
    SamplingParams,
    Segment,
    TextPart,
    Turn,
    image_part,
)
from serve.models import VISION_SPECIALS, build_tiny_vl
from serve.policy import Policy
from serve.vision import merge_size, pad_runs, pad_token_id, process_images

TEXT = {"hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
        "bos_token_id": None}  # fmt: skip
VISION = {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4,
          "out_hidden_size": 128, "patch_size": 14, "spatial_merge_size": 2,
          "temporal_patch_size": 2}  # fmt: skip


def _save(kind: str, out: Path) -> Path:
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
    )

    _, tok, processor = build_tiny_vl()
    start, pad, end, video = tok.convert_tokens_to_ids(VISION_SPECIALS)
    text = {**TEXT, "vocab_size": len(tok), "eos_token_id": tok.eos_token_id,
            "pad_token_id": tok.pad_token_id}  # fmt: skip
    rope = {"rope_type": "default", "mrope_section": [4, 6, 6]}
    if kind == "qwen2.5-vl":
        config_cls, model_cls = Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
        text["rope_parameters"] = rope
        vision = {**VISION, "window_size": 56, "fullatt_block_indexes": [1]}
    else:
        config_cls, model_cls = Qwen3VLConfig, Qwen3VLForConditionalGeneration
        text.update(rope_parameters={**rope, "mrope_interleaved": True}, head_dim=32)
        vision = {**VISION, "num_position_embeddings": 256, "deepstack_visual_indexes": [0]}
    config = config_cls(
        text_config=text,
        vision_config=vision,
        image_token_id=pad,
        video_token_id=video,
        vision_start_token_id=start,
        vision_end_token_id=end,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = model_cls(config)
    for part in (model, tok, processor):
        part.save_pretrained(out)
    return out


def _screenshot() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (640, 480), (30, 120, 200)).save(out, format="PNG")
    return out.getvalue()


def _episode(policy: Policy, png: bytes) -> Episode:
    """One turn sampled at temperature 1 with the screenshot, as an episode of one segment."""
    image = image_part(png, "image/png", "messages[0].content[1]")
    message = Message("user", "What is shown?", parts=[TextPart("What is shown?"), image])
    for seed in range(20):  # random weights may sample the end token first: take a longer one
        chat = ChatRequest([message], sampling=SamplingParams(max_tokens=8, seed=seed))
        c = asyncio.run(policy.generate(chat))
        if len(c.completion_ids) >= 4:
            break
    turn = Turn("e", 0, 0, "chat", {}, c.prompt_ids, c.completion_ids, c.logprobs, c.text, [],
                "length", 0, 0.0, 0.0, images=[image.sha256])  # fmt: skip
    n = len(c.prompt_ids)
    segment = Segment(
        tokens=c.prompt_ids + c.completion_ids,
        loss_mask=[0] * n + [1] * len(c.completion_ids),
        logprobs=[0.0] * n + c.logprobs,
        turn_indices=[0],
        policy_versions=[0],
        prompt_len=n,
    )
    return Episode("e", "t", 0, "test", 1.0, "ok", turns=[turn], segments=[segment],
                   images={image.sha256: image})  # fmt: skip


@pytest.mark.parametrize("kind", ["qwen2.5-vl", "qwen3-vl"])
def test_a_vlm_checkpoint_by_path_trains_on_what_it_served(kind: str, tmp_path: Path) -> None:
    path = str(_save(kind, tmp_path / kind))
    policy = Policy({"engine": {"name": "torch", "model": path}})
    png = _screenshot()
    episode = _episode(policy, png)
    turn = episode.turns[0]
    trainer: Any = Trainer({"lr": 1e-4}, model=path)
    counts = process_images(trainer.image_processor, [png]).counts(
        merge_size(trainer.image_processor)
    )
    assert pad_runs(turn.prompt_ids, pad_token_id(trainer.tokenizer)) == counts  # [54] here
    (mb,) = micro_batches(build_rows([episode], [1.0], images=True), 4096, 0)
    with torch.no_grad():
        mine, _ = token_logprobs(trainer.model, mb, False, trainer._vision(mb), trainer.banned)
        blind, _ = token_logprobs(trainer.model, mb, False, None, trainer.banned)
    gap = float((mine - mb.old_logprobs).abs()[mb.mask].max())
    assert gap < 1e-3  # measured: 4.8e-7 for both
    # without the pixels the same ids give other logprobs (measured: 0.42 and 0.20)
    assert float((blind - mb.old_logprobs).abs()[mb.mask].max()) > 1e-2
