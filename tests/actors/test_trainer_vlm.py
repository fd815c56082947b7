"""The Trainer on ``tiny-vl`` without Ray: an episode sampled with a screenshot by the real
Policy, logprobs recomputed from the stored bytes, weights into an engine, checkpoints that
load back as the engine's model with their image processor."""

from __future__ import annotations

import asyncio
import io
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from PIL import Image

from actors.trainer import Trainer
from forge.trajectory import assemble
from forge.types import (
    ChatRequest,
    Episode,
    Message,
    SamplingParams,
    TextPart,
    Turn,
    image_part,
)
from serve.engines.base import EngineRequest
from serve.engines.torch_engine import TorchEngine
from serve.policy import Policy


def _png(color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (300, 200), color).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def group() -> list[Episode]:
    policy = Policy({"engine": {"name": "torch", "model": "tiny-vl"}})
    episodes = []
    for k, color in enumerate([(250, 0, 0), (0, 250, 0)]):
        image = image_part(_png(color), "image/png", "messages[0].content[0]")
        message = Message("user", "Where?", parts=[image, TextPart("Where?")])
        sampling = SamplingParams(temperature=1.0, max_tokens=10, seed=k)
        c = asyncio.run(policy.generate(ChatRequest([message], sampling=sampling)))
        ids, lps = c.completion_ids, c.logprobs
        turn = Turn(f"e{k}", 0, 0, "chat", {}, c.prompt_ids, ids, lps, c.text, [], "stop", 0, 0, 0)
        turn.images = [image.sha256]
        segments, _ = assemble([turn])
        episode = Episode(f"e{k}", "t", 0, "react", float(k), "ok", turns=[turn], segments=segments)
        episode.images = {image.sha256: image}
        episodes.append(episode)
    return episodes


def test_first_step_matches_the_engine_and_weights_move(group: list[Episode]) -> None:
    trainer = Trainer({"lr": 1e-3}, model="tiny-vl")
    before = trainer.get_weights()
    metrics = trainer.train_step([group])
    assert metrics["updated"] == 1.0 and metrics["logprob_abs_diff_max"] < 1e-3
    after = trainer.get_weights()
    vision = [k for k in after if "visual" in k]
    assert vision and any(not torch.equal(before[k], after[k]) for k in vision)  # pixels trained


def test_episodes_without_their_pixels_are_refused(group: list[Episode]) -> None:
    trainer = Trainer({}, model="tiny-vl")
    blind = [replace(ep, images={}) for ep in group]
    with pytest.raises(ValueError, match="without their pixels"):
        trainer.train_step([blind])


def test_checkpoint_loads_back_as_the_engine_model(group, tmp_path: Path) -> None:
    trainer = Trainer({"lr": 1e-3}, model="tiny-vl")
    trainer.train_step([group])
    path = trainer.save_checkpoint(tmp_path / "ckpt")
    engine = TorchEngine(path)
    assert engine.takes_images and type(engine.model).__name__ == "Qwen2VLForConditionalGeneration"
    weights = trainer.get_weights()
    assert all(torch.equal(v, weights[k]) for k, v in engine.state_dict().items())
    synced = TorchEngine("tiny-vl", seed=7)
    synced.load_weights(weights)  # the weight sync path (strict state_dict)
    request = EngineRequest([64, 65], SamplingParams(temperature=0.0, max_tokens=4))
    (a,), (b,) = engine.generate_sync([request]), synced.generate_sync([request])
    assert a.completion_ids == b.completion_ids
    assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5
