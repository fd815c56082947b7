"""``forge serve``: the Policy over plain HTTP (OpenAI chat and Responses, Anthropic messages).

For evaluation and direct use; harnesses in training talk to their HarnessPod proxy instead.
Binds 127.0.0.1 unless told otherwise; ``api_key`` makes every call present that key.
"""

from __future__ import annotations

import secrets
from typing import Any

import uvicorn
from starlette.requests import Request

from forge.types import ChatRequest, Completion
from serve.http_app import build_app, protocol_routes, request_api_key
from serve.protocol.common import ProtocolError, WireOptions


class PolicyFrontend:
    """A :class:`serve.http_app.Backend` that forwards every call to the Policy handle."""

    def __init__(self, policy: Any, model: str, api_key: str | None = None) -> None:
        self.policy = policy
        self.model = model
        self.api_key = api_key

    async def authorize(self, request: Request) -> None:
        if self.api_key is None:
            return
        key = request_api_key(request)
        if key is None or not secrets.compare_digest(key, self.api_key):
            raise ProtocolError(401, "invalid API key", error_type="auth_error")

    async def models(self, ctx: Any) -> list[str]:
        return [self.model]

    async def generate(
        self, ctx: Any, chat: ChatRequest, opts: WireOptions, raw_body: dict[str, Any]
    ) -> Completion:
        if chat.model and chat.model != self.model:
            raise ProtocolError(
                404, f"model: unknown model {chat.model!r}; this server serves {self.model!r}",
                "model",
            )
        return await self.policy.generate.remote(chat)


def make_app(policy: Any, model: str, api_key: str | None = None, max_body_bytes: int = 8 << 20):
    return build_app(protocol_routes("", PolicyFrontend(policy, model, api_key), max_body_bytes))


def run_server(
    policy: Any, model: str, host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None
) -> None:
    uvicorn.run(make_app(policy, model, api_key), host=host, port=port, log_level="warning")
