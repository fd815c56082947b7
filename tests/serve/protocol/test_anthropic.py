"""Anthropic Messages: parsing, rendering, and the official SDK (create, stream) on the app."""

from __future__ import annotations

import asyncio
import json

import anthropic
import pytest

from forge.types import Completion, ToolCall
from serve.protocol import anthropic as proto
from serve.protocol.common import ProtocolError, WireOptions

BASH = {
    "name": "bash",
    "description": "Run a command.",
    "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}


def test_parse_conversation_with_tools():
    body = {
        "model": "policy",
        "max_tokens": 300,
        "system": [{"type": "text", "text": "You are pi."}, {"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": "list files"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Sure."},
                    {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"cmd": "pwd"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "/w"}],
                        "is_error": True,
                    },
                    {"type": "text", "text": "now read it"},
                ],
            },
        ],
        "tools": [BASH, {"type": "web_search_20250305", "name": "web_search"}],
        "temperature": 0.5,
        "top_p": 0.8,
        "top_k": 5,
        "stop_sequences": ["STOP"],
        "tool_choice": {"type": "auto"},
        "metadata": {"user_id": "u"},
        "stream": True,
    }
    req, opts = proto.parse_request(body)
    assert [m.role for m in req.messages] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert req.messages[0].content == "You are pi.\nBe brief."
    assistant = req.messages[2]
    assert assistant.content == "Sure."
    assert [json.loads(c.arguments) for c in assistant.tool_calls] == [
        {"cmd": "ls"},
        {"cmd": "pwd"},
    ]
    assert [(m.tool_call_id, m.content, m.name) for m in req.messages[3:5]] == [
        ("toolu_1", "a.txt", "bash"),
        ("toolu_2", "/w", "bash"),
    ]
    assert req.messages[5].content == "now read it"
    assert [t.name for t in req.tools] == ["bash"]
    s = req.sampling
    assert (s.max_tokens, s.temperature, s.top_p, s.stop) == (300, 0.5, 0.8, ["STOP"])
    assert opts.stream and opts.protocol == "anthropic" and opts.max_tokens_set


def test_tool_results_only_yield_no_empty_user_message():
    req, _ = proto.parse_request(
        {
            "model": "m",
            "max_tokens": 5,
            "messages": [
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
            ],
        }
    )
    assert [(m.role, m.content) for m in req.messages] == [("tool", "")]


def _msgs(*content):
    return [{"role": "user", "content": list(content)}]


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"max_tokens": 5, "messages": _msgs()}, "model", "required"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens", "required"),
        ({"model": "m", "max_tokens": 5, "messages": []}, "messages", "empty"),
        (
            {"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]},
            "messages[0].role",
            "'tool'",
        ),
        (
            {"model": "m", "max_tokens": 5, "messages": _msgs({"type": "image", "source": {}})},
            "messages[0].content[0].source.type",
            "expected 'base64'",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": _msgs(
                    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]}
                ),
            },
            "messages[0].content[0].content[0].source",
            "expected an object",
        ),
        (
            {"model": "m", "max_tokens": 5, "messages": _msgs({"type": "tool_use", "id": "x"})},
            "messages[0].content[0].type",
            "user message",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}],
                    }
                ],
            },
            "messages[0].content[0].input",
            "expected an object",
        ),
        (
            {"model": "m", "max_tokens": 5, "messages": _msgs(), "temperature": 1.5},
            "temperature",
            "between 0 and 1",
        ),
        (
            {"model": "m", "max_tokens": 5, "messages": _msgs(), "tools": [{"name": "f"}]},
            "tools[0].input_schema",
            "expected an object",
        ),
    ],
)
def test_parse_errors(body, field, words):
    with pytest.raises(ProtocolError) as info:
        proto.parse_request(body)
    assert info.value.status == 400 and info.value.field == field
    assert info.value.message.startswith(f"{field}: ") and words in info.value.message


def test_render_response_defensive_about_bad_arguments():
    calls = [ToolCall("call_1", "bash", "not json"), ToolCall("toolu_2", "bash", '{"cmd": "ls"}')]
    c = Completion([1, 2], [3], [0.0], "", "", calls, "tool_calls", 0)
    out = proto.render_response(c, WireOptions("anthropic", model="m"))
    assert out["content"] == [
        {"type": "tool_use", "id": "toolu_call_1", "name": "bash", "input": {}},
        {"type": "tool_use", "id": "toolu_2", "name": "bash", "input": {"cmd": "ls"}},
    ]
    assert out["stop_reason"] == "tool_use" and out["usage"]["input_tokens"] == 2
    c.finish_reason, c.tool_calls, c.content = "length", [], "cut"
    assert proto.render_response(c, WireOptions("anthropic"))["stop_reason"] == "max_tokens"


def test_sdk_create_tool_use_then_answer(kit):
    backend = kit.FakeBackend()
    client = kit.anthropic_client(kit.make_app(backend))

    async def run():
        messages = [{"role": "user", "content": "list"}]
        first = await client.messages.create(
            model="policy", max_tokens=100, messages=messages, tools=[BASH], system="be brief"
        )
        assert first.stop_reason == "tool_use"
        text, tool = first.content
        assert text.type == "text" and text.text == "Let me check."
        assert tool.type == "tool_use" and tool.name == "bash" and tool.id.startswith("toolu_")
        assert tool.input == {"cmd": "ls -la /tmp", "timeout": 10}
        messages += [
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in first.content],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "a.txt"}],
            },
        ]
        second = await client.messages.create(
            model="policy", max_tokens=100, messages=messages, tools=[BASH]
        )
        assert second.stop_reason == "end_turn" and second.content[0].text == "done: a.txt"

    asyncio.run(run())
    assert [m.role for m in backend.calls[1][1].messages] == ["user", "assistant", "tool"]


def test_sdk_stream_final_message_has_parsed_tool_input(kit):
    client = kit.anthropic_client(kit.make_app(kit.FakeBackend()))

    async def run():
        async with client.messages.stream(
            model="policy",
            max_tokens=100,
            messages=[{"role": "user", "content": "go"}],
            tools=[BASH],
        ) as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_message()
        return kinds, final

    kinds, final = asyncio.run(run())
    assert kinds[0] == "message_start" and "content_block_delta" in kinds
    assert final.stop_reason == "tool_use"
    assert final.content[0].text == "Let me check."
    assert final.content[1].type == "tool_use"
    assert final.content[1].input == {"cmd": "ls -la /tmp", "timeout": 10}
    assert final.usage.input_tokens == 5 and final.usage.output_tokens > 0


def test_sdk_stream_text(kit):
    client = kit.anthropic_client(kit.make_app(kit.FakeBackend()))

    async def run():
        async with client.messages.stream(
            model="policy", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            pieces = [text async for text in stream.text_stream]
            return pieces, await stream.get_final_message()

    pieces, final = asyncio.run(run())
    assert len(pieces) > 1 and "".join(pieces) == kit.LONG_TEXT
    assert final.stop_reason == "end_turn" and final.content[0].text == kit.LONG_TEXT


def test_sdk_sees_anthropic_error_format(kit):
    client = kit.anthropic_client(kit.make_app(kit.FakeBackend()))

    async def run():
        await client.messages.create(
            model="policy",
            max_tokens=10,
            messages=[{"role": "user", "content": [{"type": "image", "source": {}}]}],
        )

    with pytest.raises(anthropic.BadRequestError) as info:
        asyncio.run(run())
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert "messages[0].content[0].source.type" in info.value.body["error"]["message"]
