"""A streamed answer over a real uvicorn server: the events that come together arrive together,
the stream ends properly, and an answer counts as delivered only if the client stayed for it."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import httpx

from forge.types import Completion, ToolCall
from serve.http_app import build_app, protocol_routes
from serve.live import LiveCompletion

BODY = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


class HeldBackend:
    """Starts each answer at once, and finishes it when the test releases it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lives: list[LiveCompletion] = []

    async def authorize(self, request: Any) -> None:
        return None

    async def refused(self, ctx: Any, err: Any) -> None:
        return None

    async def generate(self, ctx, chat, opts, raw_body, live=None) -> Completion:
        assert live is not None
        self.lives.append(live)
        live.start([1, 2, 3])
        await asyncio.to_thread(self.release.wait, 30)
        text = "A long enough answer to be cut into several pieces of text."
        call = ToolCall("call_1", "shell", '{"command": "ls"}')
        return Completion([1, 2, 3], [7] * 9, [-0.1] * 9, text, text, [call], "tool_calls", 1)


def test_the_whole_answer_is_delivered_in_order(kit):
    backend = HeldBackend()
    app = build_app(protocol_routes("", backend))
    with (
        kit.uvicorn_server(app) as url,
        httpx.stream("POST", url + "/v1/chat/completions", json=BODY, timeout=30) as r,
    ):
        lines = r.iter_lines()
        first = next(line for line in lines if line)  # the head, while the answer is held
        backend.release.set()
        rest = [line for line in lines if line]
    assert json.loads(first[6:])["choices"][0]["delta"]["role"] == "assistant"
    chunks = [json.loads(line[6:]) for line in rest[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    text = "".join(d.get("content") or "" for d in deltas)
    assert text == "A long enough answer to be cut into several pieces of text." and len(deltas) > 4
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert rest[-1] == "data: [DONE]"
    assert backend.lives[0].delivered


def test_a_client_that_left_mid_stream_is_not_delivered_to(kit):
    backend = HeldBackend()
    with kit.uvicorn_server(build_app(protocol_routes("", backend))) as url:
        with httpx.stream("POST", url + "/v1/messages", json={**BODY, "max_tokens": 9}) as r:
            assert next(r.iter_lines()).startswith("event: message_start")
        live = backend.lives[0]
        threading.Event().wait(0.2)  # the server sees the client go; then the answer comes
        backend.release.set()
        for _ in range(300):  # the renderer takes the answer, and drops it
            if live.completion is not None:
                break
            threading.Event().wait(0.01)
        threading.Event().wait(0.1)
        follow = httpx.post(url + "/v1/chat/completions", json=BODY, timeout=30)
    assert follow.status_code == 200 and follow.text.endswith("data: [DONE]\n\n")  # the next
    assert not live.delivered and backend.lives[1].delivered
