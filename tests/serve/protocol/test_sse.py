"""The events' JSON (serve.protocol.sse): one line for any reader, strict, the same encoder."""

from __future__ import annotations

import json

import pytest

from serve.protocol.sse import LastChunk, dumps, pieces, sse_event


def test_an_event_is_one_line_whatever_the_text():
    text = "a\nb\u2028c\u2029d\x85e é"
    line = dumps({"text": text})
    assert "\n" not in line and "\u2028" not in line and "\x85" not in line
    assert json.loads(line) == {"text": text} and "é" in line  # non-ASCII kept as is


def test_no_number_json_cannot_read():
    with pytest.raises(ValueError):
        dumps({"x": float("nan")})


def test_events_and_their_last_chunk_are_bytes():
    event = sse_event("ping", {"type": "ping"})
    assert event == b'event: ping\ndata: {"type":"ping"}\n\n'
    last = LastChunk(event + event)
    assert isinstance(last, bytes) and last == event * 2
    assert pieces("x" * 33, 16) == ["x" * 16, "x" * 16, "x"] and pieces("") == []
