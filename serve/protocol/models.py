"""The models API (``GET /v1/models``, ``GET /v1/models/{id}``) in each wire's own form.

Agents ask it for the served model's context length before they decide when to compact, so
each form carries it where that wire's clients look:

- OpenAI (and vLLM, whose servers the agents' OpenAI-compatible code paths are written
  against): a list ``{"object": "list", "data": [model, ...]}`` of model objects ``{"id",
  "object": "model", "created", "owned_by", "root", "parent", "max_model_len"}``.
- Anthropic: a page ``{"data": [model, ...], "has_more", "first_id", "last_id"}`` of
  ``{"type": "model", "id", "display_name", "created_at", "max_input_tokens", "max_tokens",
  "lifecycle"}``.

The context length is None (``null``) where the server does not know it. Which wire a request
speaks is told by Anthropic's ``anthropic-version`` header, which its clients always send.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from serve.protocol.common import ProtocolError, WireProtocol

OWNER = "openforge"
EPOCH = "1970-01-01T00:00:00Z"  # Anthropic's created_at when the date is unknown


@dataclass(frozen=True)
class ModelCard:
    """One served model: its name and its context length (prompt plus completion, in tokens;
    None where unknown)."""

    id: str
    context_length: int | None = None


def wire_of(headers: Mapping[str, str]) -> WireProtocol:
    """The wire a models request speaks: ``anthropic`` when it carries ``anthropic-version``."""
    return "anthropic" if "anthropic-version" in headers else "chat"


def model_object(protocol: WireProtocol, card: ModelCard) -> dict[str, Any]:
    """One model in ``protocol``'s form."""
    if protocol == "anthropic":
        return {
            "type": "model",
            "id": card.id,
            "display_name": card.id,
            "created_at": EPOCH,
            "max_input_tokens": card.context_length,
            "max_tokens": card.context_length,
            "lifecycle": "active",
        }
    return {
        "id": card.id,
        "object": "model",
        "created": 0,
        "owned_by": OWNER,
        "root": card.id,
        "parent": None,
        "max_model_len": card.context_length,
    }


def model_list(protocol: WireProtocol, cards: list[ModelCard]) -> dict[str, Any]:
    """Every served model, as ``protocol`` lists them."""
    data = [model_object(protocol, card) for card in cards]
    if protocol == "anthropic":
        return {
            "data": data,
            "has_more": False,
            "first_id": cards[0].id if cards else None,
            "last_id": cards[-1].id if cards else None,
        }
    return {"object": "list", "data": data}


def find_model(cards: list[ModelCard], model_id: str) -> ModelCard:
    """The card named ``model_id``; a 404 naming the served ones otherwise."""
    for card in cards:
        if card.id == model_id:
            return card
    served = ", ".join(repr(card.id) for card in cards) or "none"
    raise ProtocolError(
        404, f"model: unknown model {model_id!r:.200}; this server serves {served}", "model"
    )
