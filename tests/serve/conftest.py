"""A fake Backend (a scripted model) and SDK clients wired to the app in process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
import uvicorn
from starlette.requests import Request

from forge.types import ChatRequest, Completion, ToolCall
from serve.http_app import build_app, protocol_routes, request_api_key
from serve.protocol.common import ProtocolError, WireOptions

API_KEY = "k"
LONG_TEXT = "The answer is 42, and here is a long enough sentence to be streamed in pieces."

Reply = Callable[[ChatRequest], tuple[str, list[ToolCall], str]]


def default_reply(chat: ChatRequest) -> tuple[str, list[ToolCall], str]:
    """Answer a tool result with text; otherwise call the first tool offered; else say hello."""
    last = chat.messages[-1]
    if last.role == "tool":
        return f"done: {last.content}", [], "stop"
    if chat.tools:
        tool = chat.tools[0]
        if tool.kind == "custom" or tool.kind.endswith(":custom"):
            args = {"input": "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"}
        else:
            args = {"cmd": "ls -la /tmp", "timeout": 10}
        call = ToolCall(id="call_1", name=tool.name, arguments=json.dumps(args))
        return "Let me check.", [call], "tool_calls"
    return LONG_TEXT, [], "stop"


class FakeBackend:
    """Authorises key ``k``; generates from ``reply``; records what it was asked."""

    def __init__(self, reply: Reply = default_reply, fail: Exception | None = None) -> None:
        self.reply = reply
        self.fail = fail
        self.calls: list[tuple[Any, ChatRequest, WireOptions, dict[str, Any]]] = []
        self.refusals: list[tuple[Any, int, str]] = []

    async def authorize(self, request: Request) -> Any:
        if request_api_key(request) != API_KEY:
            raise ProtocolError(401, "invalid or missing API key")
        return dict(request.path_params)

    async def count_tokens(self, ctx: Any, chat: ChatRequest) -> int:
        return 5 * len(chat.messages)  # what FakeBackend's prompts hold: 5 ids a message

    async def refused(self, ctx: Any, err: ProtocolError) -> None:
        self.refusals.append((ctx, err.status, err.message))

    async def generate(
        self,
        ctx: Any,
        chat: ChatRequest,
        opts: WireOptions,
        raw_body: dict[str, Any],
        live: Any = None,
    ) -> Completion:
        self.calls.append((ctx, chat, opts, raw_body))
        if self.fail is not None:
            raise self.fail
        content, calls, finish = self.reply(chat)
        text = content + "".join(c.arguments for c in calls)
        return Completion(
            prompt_ids=list(range(100, 100 + 5 * len(chat.messages))),
            completion_ids=list(range(1, 1 + max(1, len(text) // 4))),
            logprobs=[-0.5] * max(1, len(text) // 4),
            text=text,
            content=content,
            tool_calls=calls,
            finish_reason=finish,
            policy_version=3,
        )

    async def models(self, ctx: Any) -> list[str]:
        return ["policy"]


def make_app(backend: FakeBackend, prefix: str = "", max_body_bytes: int = 1 << 20) -> Any:
    return build_app(protocol_routes(prefix, backend, max_body_bytes))


def http_client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


def sdk_http_client(app: Any) -> Any:
    """An in-process client of the kind the installed SDKs take: recent releases of both
    official SDKs run on ``httpx2`` and refuse ``httpx`` objects; older ones take ``httpx``."""
    try:
        import httpx2
    except ImportError:
        return http_client(app)
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://test")


def openai_client(app: Any, prefix: str = "", key: str = API_KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"http://test{prefix}/v1",
        api_key=key,
        max_retries=0,
        http_client=sdk_http_client(app),
    )


def anthropic_client(app: Any, prefix: str = "", key: str = API_KEY) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=f"http://test{prefix}",
        api_key=key,
        max_retries=0,
        http_client=sdk_http_client(app),
    )


@contextlib.contextmanager
def uvicorn_server(app: Any, http: Any = "auto") -> Iterator[str]:
    """``app`` on a real uvicorn server on loopback (``http``: its protocol), from a thread;
    yields its URL."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, http=http, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the server thread died on start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class Kit:
    """The helpers above, handed to tests as the ``kit`` fixture (tests import no conftest)."""

    API_KEY = API_KEY
    LONG_TEXT = LONG_TEXT
    FakeBackend = FakeBackend
    make_app = staticmethod(make_app)
    http_client = staticmethod(http_client)
    openai_client = staticmethod(openai_client)
    anthropic_client = staticmethod(anthropic_client)
    uvicorn_server = staticmethod(uvicorn_server)


@pytest.fixture
def kit() -> type[Kit]:
    return Kit
