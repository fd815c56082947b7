"""Admission: one request too long for the model's context fails alone, with a
ContextLengthError (a 400 over HTTP), and the rest of its batch is served; a batch that fails
in the engine is rerun request by request, so only the request at fault fails."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import httpx
import pytest

from forge.config import PolicyConfig
from forge.types import ChatRequest, Completion, Message, SamplingParams
from serve.engines.base import ContextLengthError, EngineOutput, EngineRequest, admit
from serve.live import LiveCompletion, stream_policy
from serve.policy import LocalHandle, Policy, deploy_policy
from serve.server import BackgroundServer, make_app


def chat(text: str, max_tokens: int = 4) -> ChatRequest:
    return ChatRequest(
        messages=[Message("user", text)],
        sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens),
    )


def test_admit_clamps_max_tokens_and_refuses_a_prompt_without_room() -> None:
    assert admit(100, 50, 1000) == 50
    assert admit(900, 512, 1000) == 100  # only max_tokens overflows: clamped
    assert admit(999, 512, 1000) == 1
    assert admit(10**6, 512, None) == 512
    with pytest.raises(ContextLengthError) as info:
        admit(1000, 512, 1000)
    e = info.value
    assert (e.prompt_tokens, e.max_tokens, e.limit) == (1000, 512, 1000)
    assert str(e) == (
        "messages: prompt is 1000 tokens; with max_tokens 512 it exceeds the model's context "
        "of 1000"
    )
    again = pickle.loads(pickle.dumps(e))  # crosses Ray with its attributes
    assert isinstance(again, ContextLengthError) and again.limit == 1000 and str(again) == str(e)


def scripted(limit: int, **config: Any) -> Policy:
    policy = Policy({"engine": {"name": "scripted", "model": "tiny"}, **config})
    policy.engine.max_context = limit  # the oracle has none; give it a small model's
    return policy


def test_policy_refuses_a_long_prompt_and_clamps_a_large_max_tokens() -> None:
    policy = scripted(300)
    fits = chat("a" * 230, max_tokens=10_000)  # about 290 tokens: room for a few more
    too_long = chat("a" * 400)

    async def run() -> tuple[Completion, BaseException]:
        out = await policy.generate(fits)
        try:
            await policy.generate(too_long)
        except ContextLengthError as e:
            return out, e
        raise AssertionError("the long prompt was admitted")

    out, err = asyncio.run(run())
    assert 0 < len(out.completion_ids) == 300 - len(out.prompt_ids)
    assert out.finish_reason == "length"  # the oracle's answer is cut at the room left
    assert fits.sampling.max_tokens == 10_000  # the caller's request is left as it was
    assert isinstance(err, ContextLengthError) and err.limit == 300 and err.prompt_tokens > 400


class FailsOnMarker:
    """An engine double that fails any batch holding a prompt with ``marker`` in it."""

    max_context = None

    def __init__(self, tokenizer: Any, marker: str) -> None:
        self.tokenizer = tokenizer
        self.marker = marker
        self.batches: list[int] = []

    async def generate(self, requests: list[EngineRequest]) -> list[EngineOutput]:
        self.batches.append(len(requests))
        for r in requests:
            if self.marker in self.tokenizer.decode(r.prompt_ids):
                raise RuntimeError("engine failed on one request")
        return [EngineOutput([self.tokenizer.eos_token_id], [-0.1], "stop") for _ in requests]

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}


def test_a_batch_that_fails_in_the_engine_fails_only_its_bad_request() -> None:
    policy = Policy({"engine": {"name": "scripted"}, "max_batch_size": 8, "batch_wait_ms": 200})
    engine = FailsOnMarker(policy.tokenizer, "POISON")
    policy.engine = engine
    handle = LocalHandle(policy)

    async def run() -> list[Any]:
        texts = ["one", "POISON", "two", "three"]
        calls = [handle.generate.remote(chat(t)) for t in texts]
        return list(await asyncio.gather(*calls, return_exceptions=True))

    results = asyncio.run(run())
    assert isinstance(results[1], RuntimeError)
    assert all(isinstance(r, Completion) for i, r in enumerate(results) if i != 1)
    assert engine.batches == [4, 1, 1, 1, 1]  # the batch, then each request alone
    assert policy.stats["batch_retries"] == 1


# --- over Ray Serve, with the torch engine and the tiny model (context 8192) --------------------

LONG = "x" * 9000  # the tiny model's byte tokenizer: more tokens than its 8192 positions


@pytest.fixture(scope="module")
def torch_policy(ray_cluster: Any) -> Any:
    from ray import serve

    config = PolicyConfig(
        engine={"name": "torch", "model": "tiny"},
        num_cpus=0.25,
        max_batch_size=8,
        batch_wait_ms=300,  # the concurrent requests below share a batch
    )
    yield deploy_policy(config, app_name="admission-test")
    serve.delete("admission-test")


@pytest.mark.ray
def test_over_serve_the_long_request_fails_alone_for_generate_and_stream(torch_policy) -> None:
    async def run() -> tuple[list[Any], BaseException | None, Completion]:
        requests = [chat("hello"), chat(LONG), chat("how are you"), chat("bye")]
        results = await asyncio.gather(
            *(torch_policy.generate.remote(r) for r in requests), return_exceptions=True
        )
        stream_error = None
        try:
            await stream_policy(torch_policy, chat(LONG), LiveCompletion())
        except Exception as e:
            stream_error = e
        streamed = await stream_policy(torch_policy, chat("fine"), LiveCompletion())
        return list(results), stream_error, streamed

    results, stream_error, streamed = asyncio.run(run())
    for i in (0, 2, 3):
        assert isinstance(results[i], Completion), results[i]
        assert len(results[i].completion_ids) > 0
    for err in (results[1], stream_error):
        # Ray's RayTaskError wrapper is still a ContextLengthError, with its attributes.
        assert isinstance(err, ContextLengthError), type(err)
        assert err.limit == 8192 and err.prompt_tokens > 9000 and err.max_tokens == 4
        assert str(err.args[0]).startswith(f"messages: prompt is {err.prompt_tokens} tokens")
    assert isinstance(streamed, Completion)


@pytest.mark.ray
def test_over_http_the_long_request_is_a_400_naming_the_field(torch_policy) -> None:
    messages = [{"role": "user", "content": LONG}]
    bodies = {
        "/v1/chat/completions": {"model": "tiny", "messages": messages, "max_tokens": 4},
        "/v1/responses": {"model": "tiny", "input": LONG, "stream": True},
        "/v1/messages": {"model": "tiny", "messages": messages, "max_tokens": 4},
    }
    ok = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

    async def run(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            posts = [client.post(path, json=body) for path, body in bodies.items()]
            posts.append(client.post("/v1/chat/completions", json=ok))
            return list(await asyncio.gather(*posts))

    with BackgroundServer(make_app(torch_policy, "tiny")) as url:
        chat_r, responses_r, messages_r, ok_r = asyncio.run(run(url))
    assert ok_r.status_code == 200, ok_r.text
    assert chat_r.status_code == 400 and chat_r.json()["error"]["param"] == "messages"
    assert chat_r.json()["error"]["message"].startswith("messages: prompt is ")
    assert "exceeds the model's context of 8192" in chat_r.json()["error"]["message"]
    assert responses_r.status_code == 400  # a streamed request: refused before it streams
    assert responses_r.json()["error"]["message"].startswith("input: prompt is ")
    assert messages_r.status_code == 400
    assert messages_r.json()["error"]["type"] == "invalid_request_error"
    assert messages_r.json()["error"]["message"].startswith("messages: prompt is ")
