"""actors.call_batch: a pod's Policy calls of one turn of its loop go as one Serve call."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from actors.call_batch import MAX_BATCH, GenerateBatcher
from forge.types import ChatRequest, Message
from serve.policy import LocalHandle, Policy


class Recorder:
    """A handle's two methods over a real (scripted) Policy, recording each Serve call."""

    def __init__(self, fail_call: bool = False) -> None:
        self.policy = Policy({"engine": {"name": "scripted", "model": "tiny", "mode": "noop"}})
        self.handle = LocalHandle(self.policy)
        self.sent: list[int] = []  # requests per call
        self.fail_call = fail_call
        recorder = self

        class One:
            @staticmethod
            def remote(chat: ChatRequest) -> Any:
                recorder.sent.append(1)
                return recorder.handle.generate.remote(chat)

        class Many:
            @staticmethod
            async def remote(chats: list[ChatRequest]) -> Any:
                recorder.sent.append(len(chats))
                if recorder.fail_call:
                    raise ConnectionError("replica died")
                return await recorder.handle.generate_many.remote(chats)

        self.batcher = GenerateBatcher(One, Many)


def _chat(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message("user", text)])


def test_calls_of_one_turn_share_a_serve_call_and_each_gets_its_own_answer() -> None:
    r = Recorder()

    async def go() -> tuple[list[Any], Any]:
        answers = await asyncio.gather(*(r.batcher.generate(_chat(f"q{i}")) for i in range(5)))
        alone = await r.batcher.generate(_chat("alone"))
        return answers, alone

    answers, alone = asyncio.run(go())
    assert r.sent == [5, 1]  # five at once in one call, then one alone as generate
    assert (r.batcher.calls, r.batcher.requests) == (2, 6)
    prompts = [a.prompt_ids for a in answers]
    assert len({tuple(p) for p in prompts}) == 5  # each answer is for its own request
    assert all(a.completion_ids for a in [*answers, alone])


def test_one_requests_error_is_its_own_and_a_failed_call_fails_each() -> None:
    r = Recorder()
    too_long = _chat("x" * 10_000)
    r.policy.engine.max_context = 2048  # the long prompt's admission fails, the others pass

    async def go() -> list[Any]:
        calls = [r.batcher.generate(c) for c in (_chat("a"), too_long, _chat("b"))]
        return await asyncio.gather(*calls, return_exceptions=True)

    first, second, third = asyncio.run(go())
    assert type(second).__name__ == "ContextLengthError"
    assert first.completion_ids and third.completion_ids
    failing = Recorder(fail_call=True)

    async def go_failing() -> list[Any]:
        calls = [failing.batcher.generate(_chat(t)) for t in "ab"]
        return await asyncio.gather(*calls, return_exceptions=True)

    assert [type(e) for e in asyncio.run(go_failing())] == [ConnectionError, ConnectionError]


@pytest.mark.parametrize("n", [MAX_BATCH + 3])
def test_a_batch_is_at_most_max_batch(n: int) -> None:
    r = Recorder()

    async def go() -> None:
        await asyncio.gather(*(r.batcher.generate(_chat(f"q{i}")) for i in range(n)))

    asyncio.run(go())
    assert r.sent == [MAX_BATCH, n - MAX_BATCH]
