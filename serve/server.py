"""``forge serve``: the Policy over plain HTTP (OpenAI chat and Responses, Anthropic messages).

For evaluation and direct use; harnesses in training talk to their HarnessPod proxy instead.
Binds 127.0.0.1 unless told otherwise; ``api_key`` makes every call present that key.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request

from forge.types import ChatRequest, Completion
from serve.http_app import build_app, protocol_routes, request_api_key
from serve.live import LiveCompletion, stream_policy
from serve.protocol.common import ProtocolError, WireOptions
from serve.protocol.images import ImageOptions
from serve.protocol.models import ModelCard


class PolicyFrontend:
    """A :class:`serve.http_app.Backend` that forwards every call to the Policy handle."""

    def __init__(
        self,
        policy: Any,
        model: str,
        api_key: str | None = None,
        script: dict[str, Any] | None = None,
    ) -> None:
        self.policy = policy
        self.model = model
        self.api_key = api_key
        self.script = script  # for the scripted engine: the solution every request plays
        self._described: dict[str, Any] | None = None  # the Policy's describe(), asked once

    async def authorize(self, request: Request) -> None:
        if self.api_key is None:
            return
        key = request_api_key(request)
        if key is None or not secrets.compare_digest(key, self.api_key):
            raise ProtocolError(401, "invalid API key")

    async def models(self, ctx: Any) -> list[ModelCard]:
        if self._described is None:  # an engine's context does not change in a run
            self._described = await self.policy.describe.remote()
        return [ModelCard(self.model, self._described["context_length"])]

    async def count_tokens(self, ctx: Any, chat: ChatRequest) -> int:
        self._check_model(chat)
        return len(await self.policy.tokenize_prompt.remote(chat))

    def _check_model(self, chat: ChatRequest) -> None:
        if chat.model and chat.model != self.model:
            raise ProtocolError(
                404,
                f"model: unknown model {chat.model!r}; this server serves {self.model!r}",
                "model",
            )

    async def refused(self, ctx: Any, err: ProtocolError) -> None:
        return None  # the client has the error; there is no attempt to record it on

    async def generate(
        self,
        ctx: Any,
        chat: ChatRequest,
        opts: WireOptions,
        raw_body: dict[str, Any],
        live: LiveCompletion | None = None,
    ) -> Completion:
        self._check_model(chat)
        chat.script = self.script
        if live is None:
            return await self.policy.generate.remote(chat)
        return await stream_policy(self.policy, chat, live)


def make_app(
    policy: Any,
    model: str,
    api_key: str | None = None,
    script: dict[str, Any] | None = None,
    max_body_bytes: int = 8 << 20,
    images: ImageOptions | None = None,
) -> Starlette:
    """The standalone server's app; ``images`` bounds request images (and may allow a local
    directory for ``file://`` image URLs)."""
    frontend = PolicyFrontend(policy, model, api_key, script)
    return build_app(protocol_routes("", frontend, max_body_bytes, images))


def run_server(app: Starlette, host: str = "127.0.0.1", port: int = 8000) -> None:
    uvicorn.run(app, host=host, port=port, log_level="warning")


class BackgroundServer:
    """Serve ``app`` from a thread (tests and benchmarks): ``with BackgroundServer(app) as url``."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        config = uvicorn.Config(
            app, host=host, port=0, log_level="warning", access_log=False, lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._server.serve()), daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> str:
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("server thread died on start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self.url

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
