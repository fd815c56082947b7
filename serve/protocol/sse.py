"""Server-sent events as the protocols write them: compact one-line JSON, events batched into
``bytes`` by the renderers, the last batch marked so the server ends the response with it."""

from __future__ import annotations

import json
from typing import Any

# Stream text and tool arguments in pieces of about this many characters.
PIECE_CHARS = 16

# Characters JSON leaves raw that some line readers take for line breaks: escaped in events.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})
# One encoder for every event (json.dumps with options builds a new one per call).
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def dumps(obj: Any) -> str:
    """Compact JSON for one event's data: one line for any reader."""
    text = _ENCODER.encode(obj)
    if "\x85" in text or "\u2028" in text or "\u2029" in text:  # rare: scanning is cheaper
        return text.translate(_LINE_BREAKS)
    return text


def sse_data(obj: Any) -> bytes:
    """One ``data:`` event (OpenAI chat style)."""
    return f"data: {dumps(obj)}\n\n".encode()


def sse_event(event: str, obj: Any) -> bytes:
    """One named event (Responses and Anthropic style)."""
    return f"event: {event}\ndata: {dumps(obj)}\n\n".encode()


SSE_DONE = b"data: [DONE]\n\n"


class LastChunk(bytes):
    """The last bytes of an event stream: a renderer yields its final events as one of these,
    and the server sends them with the end of the response (one write, not two)."""


def pieces(text: str, size: int = PIECE_CHARS) -> list[str]:
    """``text`` cut into pieces of ``size`` characters (none for empty text)."""
    return [text[i : i + size] for i in range(0, len(text), size)]
