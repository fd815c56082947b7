"""Screenshots end to end: a real Serve Policy on ``tiny-vl``, a real HarnessPod proxy, the
ReplayBuffer's files and the Trainer's recomputed logprobs (DESIGN.md decision 12)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from dataclasses import replace

import httpx
import pytest
import torch
from PIL import Image
from ray import serve

from actors.harness_pod import HarnessPod
from actors.replay_buffer import ReplayBuffer
from actors.trainer import Trainer
from forge.config import PolicyConfig
from forge.episode_images import image_file, load_images
from forge.train.batching import build_rows, micro_batches
from forge.trajectory import assemble
from forge.types import Episode, Turn
from serve.models import load_model_and_processor
from serve.policy import deploy_policy
from serve.vision import merge_size, pad_runs, pad_token_id, process_images

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def screenshot(color: tuple[int, int, int], size: tuple[int, int] = (640, 480)) -> bytes:
    picture = Image.new("RGB", size, color)
    picture.paste((255, 255, 255), (20, 20, 100, 60))  # a "button"
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


FIRST, SECOND = screenshot((20, 90, 200)), screenshot((200, 40, 40), (160, 120))
B64_FIRST, B64_SECOND = (base64.b64encode(x).decode() for x in (FIRST, SECOND))
SHA_FIRST, SHA_SECOND = (hashlib.sha256(x).hexdigest() for x in (FIRST, SECOND))


@pytest.fixture(scope="module")
def attempt(recorded) -> Episode:
    return recorded[0]


@pytest.fixture(scope="module")
def recorded(ray_cluster) -> tuple[Episode, list[Turn]]:
    """One attempt of two calls through the proxy: a user turn with a screenshot, then the same
    history plus the answer and a tool result holding a second screenshot."""
    config = PolicyConfig(engine={"name": "torch", "model": "tiny-vl"}, num_cpus=0.25)
    handle = deploy_policy(config, "pod-images")
    pod = ray_cluster.remote(HarnessPod).options(num_cpus=0.25).remote(handle, model="tiny-vl")
    url = ray_cluster.get(pod.start.remote())
    info = ray_cluster.get(pod.open_attempt.remote("ep-img", 0, temperature=1.0))
    endpoint = f"{url}{info['path']}/v1/chat/completions"
    headers = {"Authorization": f"Bearer {info['api_key']}"}
    tools = [{"type": "function", "function": {"name": "screenshot", "parameters": {}}}]
    messages: list[dict] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Click the button."},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{B64_FIRST}"}},
            ],
        }
    ]
    body = {"model": "tiny-vl", "messages": messages, "max_tokens": 12, "seed": 1, "tools": tools}
    first = httpx.post(endpoint, json=body, headers=headers, timeout=120)
    assert first.status_code == 200, first.text
    answer = first.json()["choices"][0]["message"]
    messages.append({"role": "assistant", "content": answer["content"] or ""})
    call = {"id": "c1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}
    messages[-1]["tool_calls"] = [call]
    url_second = f"data:image/png;base64,{B64_SECOND}"
    messages.append(
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": [{"type": "image_url", "image_url": {"url": url_second}}],
        }
    )
    second = httpx.post(endpoint, json={**body, "seed": 2}, headers=headers, timeout=120)
    assert second.status_code == 200, second.text
    state = ray_cluster.get(pod.close_attempt.remote("ep-img", 0))
    anthropic_turns = _anthropic_call(ray_cluster, pod, url)
    ray_cluster.get(pod.stop.remote())
    ray_cluster.kill(pod)  # free their CPU share for the later tests of the shared cluster
    serve.delete("pod-images")
    segments, _ = assemble(state.turns)
    episode = Episode("ep-img", "t", 0, "react", 1.0, "ok", turns=state.turns, segments=segments)
    episode.images = dict(state.images)
    return episode, anthropic_turns


def _anthropic_call(ray, pod, url: str) -> list[Turn]:
    """One Messages call whose tool result holds a screenshot (Anthropic's base64 source)."""
    info = ray.get(pod.open_attempt.remote("ep-anth", 0))
    source = {"type": "base64", "media_type": "image/png", "data": B64_SECOND}
    body = {
        "model": "tiny-vl",
        "max_tokens": 4,
        "messages": [
            {"role": "user", "content": "Take a screenshot."},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "image", "source": source}],
                    }
                ],
            },
        ],
    }
    headers = {"x-api-key": info["api_key"], "anthropic-version": "2023-06-01"}
    answer = httpx.post(f"{url}{info['path']}/v1/messages", json=body, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    return ray.get(pod.close_attempt.remote("ep-anth", 0)).turns


def test_anthropic_tool_result_images_are_recorded_by_reference(recorded) -> None:
    (turn,) = recorded[1]
    block = turn.request["messages"][2]["content"][0]["content"][0]
    assert block["source"]["data"] == {"sha256": SHA_SECOND, "mime": "image/png"}
    assert turn.images == [SHA_SECOND] and B64_SECOND[:100] not in json.dumps(turn.to_dict())
    _, tok, _ = load_model_and_processor("tiny-vl")
    assert pad_runs(turn.prompt_ids, pad_token_id(tok)) == [24]  # the 160x120 screenshot


def test_recorded_requests_hold_references_not_base64(attempt: Episode) -> None:
    first, second = attempt.turns
    text = json.dumps([t.to_dict() for t in attempt.turns])
    assert B64_FIRST[:200] not in text and B64_SECOND[:200] not in text
    url = first.request["messages"][0]["content"][1]["image_url"]["url"]
    assert url == {"sha256": SHA_FIRST, "mime": "image/png"}
    assert first.images == [SHA_FIRST] and second.images == [SHA_FIRST, SHA_SECOND]
    assert set(attempt.images) == {SHA_FIRST, SHA_SECOND}
    assert "images" not in attempt.to_dict()


def test_image_tokens_match_the_processor_grid(attempt: Episode) -> None:
    _, tok, processor = load_model_and_processor("tiny-vl")
    grid = process_images(processor, [FIRST, SECOND])
    counts = grid.counts(merge_size(processor))
    assert counts == [54, 24]  # 640x480 -> 12 x 18 patches merged 2x2; 160x120 -> 8 x 12
    pad = pad_token_id(tok)
    first, second = attempt.turns
    assert pad_runs(first.prompt_ids, pad) == counts[:1]
    assert pad_runs(second.prompt_ids, pad) == counts
    assert second.prompt_ids[: len(first.prompt_ids)] == first.prompt_ids  # exact prefix
    # each turn's sequence (a random model's answer rarely ends where the next prompt goes on)
    assert sorted(i for s in attempt.segments for i in s.turn_indices) == [0, 1]


def test_trainer_recomputes_the_engine_logprobs_with_pixels(attempt: Episode) -> None:
    trainer = Trainer({"lr": 1e-4}, model="tiny-vl")
    rows = build_rows([attempt], [1.0], images=True)
    (mb,) = micro_batches(rows, 4096, trainer.tokenizer.pad_token_id)
    from forge.train.logprobs import token_logprobs

    with torch.no_grad():
        mine, _ = token_logprobs(trainer.model, mb, False, trainer._vision(mb), trainer.banned)
    gap = (mine - mb.old_logprobs).abs()[mb.mask]
    assert mb.sampled == sum(len(t.completion_ids) for t in attempt.turns)
    assert float(gap.max()) < 1e-3, float(gap.max())
    # without the pixels the same ids give other logprobs: the images are really read
    with torch.no_grad():
        blind, _ = token_logprobs(trainer.model, mb, False, None, trainer.banned)
    assert float((blind - mb.old_logprobs).abs()[mb.mask].max()) > 1e-2
    loser = replace(attempt, episode_id="ep-img-2", reward=0.0)
    metrics = trainer.train_step([[attempt, loser]])
    assert metrics["updated"] == 1.0 and metrics["logprob_abs_diff_max"] < 1e-3


def test_a_mismatched_grid_is_refused(attempt: Episode) -> None:
    """The classic VLM-RL bug: ids recorded for one image, pixels of another size."""
    trainer = Trainer({}, model="tiny-vl")
    swapped = replace(attempt, images={**attempt.images})
    swapped.images[SHA_SECOND] = replace(attempt.images[SHA_SECOND], data=FIRST)
    (mb,) = micro_batches(build_rows([swapped], [1.0], images=True), 4096, 0)
    with pytest.raises(ValueError, match="do not match the images' grids"):
        trainer._vision(mb)


def test_replay_buffer_writes_each_image_once_before_the_episode(attempt, tmp_path) -> None:
    buffer = ReplayBuffer(str(tmp_path))
    twin = replace(attempt, episode_id="ep-img-2")
    buffer.put([attempt, twin], "g1")
    buffer.put([replace(attempt, episode_id="ep-img-3")], "g2")
    folder = tmp_path / "episodes"
    files = sorted(p.name for p in (folder / "images").iterdir())
    assert files == sorted([f"{SHA_FIRST}.png", f"{SHA_SECOND}.png"])
    assert image_file(folder, SHA_FIRST, "image/png").read_bytes() == FIRST
    assert buffer.stats()["images_written"] == 2
    lines = (folder / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 3 and all(B64_FIRST[:100] not in line for line in lines)
    record = json.loads(lines[0])
    turns = [Turn(**t) for t in record["turns"]]
    back = load_images(folder, Episode("ep-img", "t", 0, "react", 1.0, "ok", turns=turns))
    assert back.images[SHA_SECOND].data == SECOND
    buffer.close()
