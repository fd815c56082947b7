"""serve.live: what may be streamed before the end, the Policy's stream, and SSE on the wire
while the answer is still being generated."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import httpx
import pytest

from forge.types import ChatRequest, Completion, Message, SamplingParams, Tool, ToolCall
from serve.engines.base import EngineOutput, EngineRequest
from serve.http_app import build_app, protocol_routes
from serve.live import LiveCompletion, safe_content, stream_policy
from serve.policy import LocalHandle, Policy
from serve.server import BackgroundServer

SHELL = Tool(name="shell", description="Run.", parameters={"type": "object", "properties": {}})


@pytest.mark.parametrize(
    ("text", "tools", "safe"),
    [
        ("Hello wor", False, "Hello wor"),
        ("  Hello", False, "  Hello"),
        ("caf\ufffd", False, "caf"),  # a character still half sampled
        ("Hello wor", True, "Hello wor"),
        ("Hello ", True, "Hello"),  # trailing space: stripped if a call follows
        ("Hello <tool", True, "Hello"),  # maybe a tool call starting
        ('Sure.\n<tool_call>\n{"name"', True, "Sure."),
        ('Sure. <tool_call>{"name": "x"}</tool_call> and more', True, "Sure."),
        ("  Hello", True, ""),  # leading space: kept or stripped, unknown until the end
    ],
)
def test_safe_content_is_what_the_final_content_surely_starts_with(text, tools, safe):
    assert safe_content(text, tools) == safe


def _completion(content: str, prompt: list[int] | None = None) -> Completion:
    return Completion(
        prompt_ids=prompt or [1, 2],
        completion_ids=[5, 6, 7],
        logprobs=[-0.1] * 3,
        text=content,
        content=content,
        tool_calls=[],
        finish_reason="stop",
        policy_version=0,
    )


def _drain(live: LiveCompletion) -> list[str]:
    async def go() -> list[str]:
        await live.started()
        return [p async for p in live.content()]

    return asyncio.run(go())


def test_live_streams_deltas_then_the_rest_of_the_final_content():
    async def go() -> tuple[list[str], Completion]:
        live = LiveCompletion()
        live.start([1, 2])
        live.text("Hel")
        live.text("lo")
        live.finish(_completion("Hello, world"))
        return [p async for p in live.content()], live.final()

    got, final = asyncio.run(go())
    assert got[:2] == ["Hel", "lo"] and "".join(got) == "Hello, world"
    assert final.content == "Hello, world"
    assert "".join(_drain(LiveCompletion.of(_completion("x" * 40)))) == "x" * 40


def test_a_batch_is_everything_that_has_come_and_the_last_one_brings_the_completion():
    async def go() -> list[tuple[list[str], bool]]:
        live = LiveCompletion()
        live.start([1, 2])
        live.text("He")
        live.text("llo")
        batches = [(await live.next_batch(), live.completion is not None)]
        waiting = asyncio.ensure_future(live.next_batch())  # nothing has come: it waits
        await asyncio.sleep(0)
        assert not waiting.done()
        live.text(",")
        batches.append((await waiting, live.completion is not None))
        live.text(" wo")
        live.finish(_completion("Hello, world and the rest of it"))
        batches.append((await live.next_batch(), live.completion is not None))
        return batches

    (first, done1), (second, done2), (last, done3) = asyncio.run(go())
    assert (first, second) == (["He", "llo"], [","]) and not done1 and not done2
    assert last[0] == " wo" and "".join(last) == " world and the rest of it" and done3


def test_live_refuses_streamed_text_the_final_content_does_not_start_with():
    async def go() -> None:
        live = LiveCompletion()
        live.text("Hello")
        live.finish(_completion("Goodbye"))
        [p async for p in live.content()]

    with pytest.raises(RuntimeError, match="not a prefix"):
        asyncio.run(go())


def test_a_failure_before_the_prompt_is_raised_by_started():
    async def go() -> None:
        live = LiveCompletion()
        live.fail(ValueError("turn limit"))
        await live.started()

    with pytest.raises(ValueError, match="turn limit"):
        asyncio.run(go())


class StreamingTextEngine:
    """A model double that streams one fixed text token by token, like vLLM's engine."""

    continuous = True

    def __init__(self, tokenizer: Any, text: str) -> None:
        self.tokenizer = tokenizer
        self.ids = [*tokenizer(text, add_special_tokens=False).input_ids, tokenizer.eos_token_id]

    async def generate(self, requests: list[EngineRequest]) -> list[EngineOutput]:
        return [EngineOutput(list(self.ids), [-0.5] * len(self.ids), "stop") for _ in requests]

    async def stream(self, request: EngineRequest):
        for i, token in enumerate(self.ids):
            await asyncio.sleep(0)
            last = i == len(self.ids) - 1
            yield EngineOutput([token], [-0.5], "stop" if last else None)


@pytest.mark.parametrize(
    "text",
    [
        "Plain prose, streamed as it is sampled: caf\u00e9 \u2615.",
        'Let me look.\n<tool_call>\n{"name": "shell", "arguments": {}}\n</tool_call>',
    ],
)
def test_the_policy_streams_content_as_sampled_and_ends_with_generates_completion(text):
    policy = Policy({"engine": {"name": "scripted", "model": "tiny"}})
    policy.engine = StreamingTextEngine(policy.tokenizer, text)
    policy.continuous = True
    chat = ChatRequest(
        messages=[Message("user", "Go.")], tools=[SHELL], sampling=SamplingParams(max_tokens=99)
    )

    async def go() -> tuple[list[tuple[str, Any]], Completion, Completion, list[str]]:
        events = [e async for e in policy.generate_stream(chat)]
        live = LiveCompletion()
        streamed = await stream_policy(LocalHandle(policy), chat, live)
        live.finish(streamed)
        return events, streamed, await policy.generate(chat), [p async for p in live.content()]

    events, streamed, whole, pieces = asyncio.run(go())
    kinds = [k for k, _ in events]
    assert kinds[0] == "prompt" and kinds[-1] == "done" and kinds.count("text") > 5
    assert events[0][1] == whole.prompt_ids
    deltas = "".join(v for k, v in events if k == "text")
    assert whole.content.startswith(deltas) and "tool_call" not in deltas
    assert len(deltas) >= len(whole.content) - 1  # all but what the parser might take
    for got in (events[-1][1], streamed):
        assert got.completion_ids == whole.completion_ids and got.content == whole.content
        assert [c.name for c in got.tool_calls] == [c.name for c in whole.tool_calls]
    assert "".join(pieces) == whole.content


class GatedBackend:
    """Streams "Hello" and then waits until the client has seen it before finishing: a server
    that buffered the stream would leave the client waiting, and this backend would fail."""

    def __init__(self) -> None:
        self.seen = threading.Event()
        self.waited: bool | None = None

    async def authorize(self, request: Any) -> None:
        return None

    async def models(self, ctx: Any) -> list[str]:
        return ["m"]

    async def refused(self, ctx, err) -> None:
        return None

    async def generate(self, ctx, chat, opts, raw_body, live=None) -> Completion:
        assert live is not None
        live.start([1, 2, 3])
        live.text("Hello")
        self.waited = await asyncio.to_thread(self.seen.wait, 30)
        if not self.waited:
            raise RuntimeError("the client never saw the first delta")
        return Completion(
            prompt_ids=[1, 2, 3],
            completion_ids=[9] * 4,
            logprobs=[-0.1] * 4,
            text="Hello, world",
            content="Hello, world",
            tool_calls=[ToolCall("call_1", "shell", '{"command": "ls"}')],
            finish_reason="tool_calls",
            policy_version=2,
        )


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/responses", {"input": "hi"}),
        ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}),
    ],
)
def test_sse_reaches_the_client_while_the_answer_is_generated(path, body):
    backend = GatedBackend()
    app = build_app(protocol_routes("", backend))
    with BackgroundServer(app) as url, httpx.Client(timeout=60) as client:
        received = ""
        request = {"model": "m", "stream": True, **body}
        with client.stream("POST", url + path, json=request) as response:
            assert response.status_code == 200
            for chunk in response.iter_text():
                received += chunk
                if "Hello" in received:
                    backend.seen.set()
    assert backend.waited is True
    datas = [line[6:] for line in received.splitlines() if line.startswith("data: {")]
    text = json.dumps([json.loads(d) for d in datas])
    assert ", world" in text and "shell" in text  # the rest and the call, after the gate
