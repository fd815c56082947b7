"""The wire protocols by name: each module parses its requests and renders its responses."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from forge.types import ChatRequest
from serve.protocol import anthropic, chat, responses
from serve.protocol.common import WireProtocol

MODULES: dict[WireProtocol, ModuleType] = {
    "chat": chat,
    "responses": responses,
    "anthropic": anthropic,
}


def parse_request(protocol: str, body: dict[str, Any]) -> ChatRequest:
    """A recorded request body of ``protocol`` as the Policy receives it."""
    module = MODULES.get(protocol)  # type: ignore[call-overload]
    if module is None:
        raise ValueError(f"unknown protocol {protocol!r}")
    return module.parse_request(body)[0]
