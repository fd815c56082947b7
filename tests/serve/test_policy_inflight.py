"""Weight updates while requests stream (a continuous engine, in process): each token records
the version of the weights that sampled it, and the update does not wait for the requests in
flight when the engine keeps them (vLLM's ``inflight: keep``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from forge.types import ChatRequest, Completion, Message, SamplingParams
from serve.engines.base import EngineOutput, EngineRequest
from serve.policy import Policy

SWAP_S = 0.3  # how long the double's weight load takes
TOKEN_S = 0.01  # one token's decode step


class PausingEngine:
    """A model double that decodes one token per step and, like vLLM, pauses its requests for a
    weight load: frozen in place (``keep``), drained first (``wait``) or aborted (``abort``)."""

    continuous = True

    def __init__(self, tokenizer: Any, inflight: str, tokens: int = 60) -> None:
        self.tokenizer, self.inflight, self.tokens = tokenizer, inflight, tokens
        self.running = asyncio.Event()
        self.running.set()
        self.aborted = 0
        self.weights = 0  # which load its tokens come from
        self.produced = 0  # tokens decoded so far

    async def generate(self, requests: list[EngineRequest]) -> list[EngineOutput]:
        raise AssertionError("a continuous engine streams here")

    async def stream(self, request: EngineRequest):
        token = self.tokenizer("a", add_special_tokens=False).input_ids[0]
        start = self.aborted
        for i in range(self.tokens):
            await self.running.wait()
            if self.aborted != start:
                raise RuntimeError("aborted by a weight update")
            await asyncio.sleep(TOKEN_S)
            self.produced += 1
            yield EngineOutput(
                [token], [-float(self.weights)], "length" if i == self.tokens - 1 else None
            )

    async def swap_weights(self, state: dict[str, Any]) -> None:
        self.running.clear()
        if self.inflight == "abort":
            self.aborted += 1
        await asyncio.sleep(SWAP_S)
        self.weights += 1
        self.running.set()


def policy_with(inflight: str) -> Policy:
    policy = Policy({"engine": {"name": "scripted", "model": "tiny"}})
    policy.engine = PausingEngine(policy.tokenizer, inflight)
    policy.continuous = True
    return policy


CHAT = ChatRequest(messages=[Message("user", "Go.")], sampling=SamplingParams(max_tokens=60))


async def stream_across_an_update(policy: Policy, streamed: bool = True) -> tuple[Completion, bool]:
    """One request (streamed, or a plain ``generate``), with a weight update a third of the way
    in: its completion, and whether it was still going when the update was done (the update
    did not wait for it)."""

    async def call() -> Completion:
        if not streamed:
            return await policy.generate(CHAT)
        events = [e async for e in policy.generate_stream(CHAT)]
        assert sum(kind == "text" for kind, _ in events) > 1  # streamed as sampled
        return events[-1][1]

    request = asyncio.create_task(call())
    while policy.engine.produced < 20:
        await asyncio.sleep(0.001)
    await policy.update_weights({}, 1)
    overlapped = not request.done()
    return await request, overlapped


@pytest.mark.parametrize("streamed", [True, False])
def test_kept_requests_record_each_tokens_version_across_the_update(streamed: bool) -> None:
    """The update does not wait for the request (the stall it causes is its own length:
    scripts/bench/weight_pause.py), and the request's tokens say which weights made them."""
    policy = policy_with("keep")
    out, overlapped = asyncio.run(stream_across_an_update(policy, streamed))
    assert overlapped
    versions = out.token_versions
    assert len(versions) == len(out.completion_ids) == 60
    first_new = versions.index(1)
    assert 20 <= first_new < 60  # the update came mid-stream ...
    assert versions == [0] * first_new + [1] * (60 - first_new)  # ... and split it once
    assert out.policy_version == 0  # the turn's: its oldest token's
    # the new weights' tokens are the ones after the update (the double's logprob says which)
    assert [-lp for lp in out.logprobs] == [float(v) for v in versions]


def test_waiting_for_in_flight_requests_holds_the_update_until_they_end() -> None:
    """The contrast: ``wait`` lets the stream finish on the old weights (one version
    throughout), and the update is done only after the stream."""
    policy = policy_with("wait")
    out, overlapped = asyncio.run(stream_across_an_update(policy))
    assert not overlapped
    assert out.token_versions == [0] * 60
    assert policy.version == 1


def test_an_aborting_engine_fails_the_request() -> None:
    policy = policy_with("abort")
    with pytest.raises(RuntimeError, match="aborted"):
        asyncio.run(stream_across_an_update(policy))


def test_a_batched_engine_gives_every_token_the_batchs_version() -> None:
    policy = Policy({"engine": {"name": "scripted", "model": "tiny"}})
    chat = ChatRequest(
        messages=[Message("user", "Write a.txt.")],
        script={"steps": ["echo hi > a.txt"], "answer": "done"},
    )
    out = asyncio.run(policy.generate(chat))
    assert out.token_versions == [0] * len(out.completion_ids) and out.completion_ids
