"""The torch engine on ``tiny-vl``: images read at their tokens, text-only requests, stop
strings, seeded sampling, vision tokens never sampled, weights swapped."""

from __future__ import annotations

import asyncio
import io

import pytest
from PIL import Image

from forge.types import ChatRequest, Completion, Message, SamplingParams, TextPart, image_part
from serve.engines.base import EngineRequest
from serve.engines.torch_engine import TorchEngine
from serve.policy import Policy
from serve.vision import pad_runs, pad_token_id, vision_token_ids


def _png(color: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (640, 480), color).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy({"engine": {"name": "torch", "model": "tiny-vl"}})


def _ask(policy: Policy, png: bytes | None, **sampling: object) -> Completion:
    parts: list = [TextPart("What is on the screen?")]
    if png is not None:
        parts.append(image_part(png, "image/png", "messages[0].content[1]"))
    message = Message("user", "What is on the screen?", parts=parts if png else None)
    chat = ChatRequest([message], sampling=SamplingParams(**sampling))  # type: ignore[arg-type]
    return asyncio.run(policy.generate(chat))


def test_images_are_read_at_their_tokens(policy: Policy) -> None:
    blue = _ask(policy, _png((0, 0, 255)), max_tokens=6, seed=5)
    again = _ask(policy, _png((0, 0, 255)), max_tokens=6, seed=5)
    red = _ask(policy, _png((255, 0, 0)), max_tokens=6, seed=5)
    assert pad_runs(blue.prompt_ids, pad_token_id(policy.tokenizer)) == [54]
    assert blue.completion_ids == again.completion_ids and blue.logprobs == again.logprobs
    assert red.prompt_ids == blue.prompt_ids  # same ids, other pixels ...
    assert red.logprobs[0] != blue.logprobs[0]  # ... other distribution


def test_text_only_requests_and_stop_strings(policy: Policy) -> None:
    free = _ask(policy, None, max_tokens=24, seed=3)
    assert len(free.completion_ids) >= 1 and all(lp <= 0 for lp in free.logprobs)
    text = free.text
    stop = next((c for c in text[2:] if c.isascii() and c.isalnum()), None)
    if stop is None:
        pytest.skip("the sampled text has no ascii letter to stop at")
    cut = _ask(policy, None, max_tokens=24, seed=3, stop=[stop])
    assert cut.finish_reason == "stop" and len(cut.completion_ids) < len(free.completion_ids)
    assert cut.completion_ids == free.completion_ids[: len(cut.completion_ids)]


def test_vision_tokens_are_never_sampled(policy: Policy) -> None:
    engine = policy.engine
    banned = set(vision_token_ids(engine.tokenizer))
    assert len(banned) == 4
    prompt = engine.tokenizer("hi", add_special_tokens=False).input_ids
    (out,) = engine.generate_sync(
        [EngineRequest(prompt, SamplingParams(temperature=5.0, max_tokens=150, seed=0))]
    )
    assert len(out.completion_ids) > 50 and not banned & set(out.completion_ids)


def test_weights_swap_into_another_vlm_engine(policy: Policy) -> None:
    other = TorchEngine("tiny-vl", seed=1)
    request = EngineRequest([64, 65, 66], SamplingParams(temperature=0.0, max_tokens=5))
    (mine,) = policy.engine.generate_sync([request])
    assert other.generate_sync([request])[0].logprobs != mine.logprobs
    other.load_weights(policy.engine.state_dict())
    assert other.generate_sync([request])[0] == mine
