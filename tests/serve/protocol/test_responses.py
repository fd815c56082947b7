"""OpenAI Responses API (Codex's wire): parsing, tool kinds round trip, SDK calls and streams."""

from __future__ import annotations

import asyncio
import json

import pytest

from forge.types import Completion, ToolCall
from serve.protocol import responses, responses_items
from serve.protocol.common import ProtocolError

EXEC = {
    "type": "function",
    "name": "exec_command",
    "description": "Run a command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    "strict": False,
}
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch hunk+ end"},
}
AGENTS = {
    "type": "namespace",
    "name": "agents",
    "description": "Sub-agents.",
    "tools": [
        {"type": "function", "name": "spawn", "parameters": {"type": "object", "properties": {}}},
        {"type": "custom", "name": "note"},
    ],
}


def codex_body(**extra):
    return {
        "model": "policy",
        "instructions": "You are Codex.",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "rules"}],
            },
            {"role": "user", "content": "fix the bug"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": None},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "ok"}],
            },
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "exec_command",
                "arguments": '{"cmd":"ls"}',
            },
            {
                "type": "custom_tool_call",
                "call_id": "c2",
                "name": "apply_patch",
                "input": "*** Begin",
            },
            {
                "type": "function_call",
                "call_id": "c3",
                "name": "spawn",
                "namespace": "agents",
                "arguments": "{}",
            },
            {"type": "function_call_output", "call_id": "c1", "output": "a.py"},
            {
                "type": "custom_tool_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "applied"}],
            },
            {"type": "function_call_output", "call_id": "c3", "output": "spawned"},
        ],
        "tools": [EXEC, APPLY_PATCH, AGENTS, {"type": "web_search"}, {"type": "tool_search"}],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "thread-1",
        **extra,
    }


def test_parse_codex_request():
    req, opts = responses.parse_request(codex_body())
    roles = [m.role for m in req.messages]
    assert roles == ["system", "system", "user", "assistant", "tool", "tool", "tool"]
    assert req.messages[0].content == "You are Codex." and req.messages[1].content == "rules"
    assistant = req.messages[3]
    assert assistant.content == "ok"
    assert [c.name for c in assistant.tool_calls] == [
        "exec_command",
        "apply_patch",
        "agents__spawn",
    ]
    assert json.loads(assistant.tool_calls[1].arguments) == {"input": "*** Begin"}
    assert [m.tool_call_id for m in req.messages[4:]] == ["c1", "c2", "c3"]
    assert [m.name for m in req.messages[4:]] == ["exec_command", "apply_patch", "agents__spawn"]
    assert req.messages[5].content == "applied"

    kinds = {t.name: t.kind for t in req.tools}
    assert kinds == {
        "exec_command": "function",
        "apply_patch": "custom",
        "agents__spawn": "namespace:agents",
        "agents__note": "namespace:agents:custom",
    }
    patch = next(t for t in req.tools if t.name == "apply_patch")
    assert patch.parameters["required"] == ["input"]
    assert "lark grammar" in patch.description and "begin_patch" in patch.description
    assert opts.stream and opts.tool_kinds == kinds and not opts.max_tokens_set
    assert opts.echo["parallel_tool_calls"] is False and len(opts.echo["tools"]) == 5


def test_parse_string_input_and_sampling():
    req, opts = responses.parse_request(
        {"model": "m", "input": "hello", "max_output_tokens": 64, "temperature": 0.2}
    )
    assert [(m.role, m.content) for m in req.messages] == [("user", "hello")]
    assert req.sampling.max_tokens == 64 and req.sampling.temperature == 0.2
    assert opts.max_tokens_set and not opts.stream


def test_grammar_is_truncated():
    big = {
        **APPLY_PATCH,
        "format": {"type": "grammar", "syntax": "lark", "definition": "x" * 99999},
    }
    req, _ = responses.parse_request({"model": "m", "input": "hi", "tools": [big]})
    assert len(req.tools[0].description) < responses_items.GRAMMAR_CHARS + 200
    assert "truncated" in req.tools[0].description


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"input": "x"}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": []}, "input"),
        ({"model": "m", "input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"model": "m", "input": [{"role": "user", "content": 1}]}, "input[0].content"),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "input[0].content[0].image_url",
        ),
        ({"model": "m", "input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id"),
        (
            {"model": "m", "input": [{"type": "function_call_output", "call_id": "c"}]},
            "input[0].output",
        ),
        ({"model": "m", "input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
        ({"model": "m", "input": "x", "tools": [EXEC, EXEC]}, "tools"),
        ({"model": "m", "input": "x", "max_output_tokens": -1}, "max_output_tokens"),
    ],
)
def test_parse_errors(body, field):
    with pytest.raises(ProtocolError) as info:
        responses.parse_request(body)
    assert info.value.status == 400 and info.value.field == field
    assert info.value.message.startswith(f"{field}: ")


def _reply_calling(*names):
    def reply(chat):
        tools = {t.name: t for t in chat.tools}
        calls = []
        for i, name in enumerate(names):
            if tools[name].kind.endswith("custom"):
                args = json.dumps({"input": f"patch {i}"})
            else:
                args = json.dumps({"cmd": f"echo {i}"})
            calls.append(ToolCall(f"call_{i}", name, args))
        return "Working on it.", calls, "tool_calls"

    return reply


def test_sdk_non_stream_maps_tool_kinds_back(kit):
    backend = kit.FakeBackend(_reply_calling("exec_command", "apply_patch", "agents__spawn"))
    client = kit.openai_client(kit.make_app(backend))

    async def run():
        return await client.responses.create(
            model="policy", input="fix it", tools=[EXEC, APPLY_PATCH, AGENTS]
        )

    out = asyncio.run(run())
    assert out.status == "completed" and out.output_text == "Working on it."
    message, fn, custom, ns = out.output
    assert message.type == "message" and message.content[0].text == "Working on it."
    assert fn.type == "function_call" and fn.name == "exec_command" and fn.call_id == "call_0"
    assert json.loads(fn.arguments) == {"cmd": "echo 0"}
    assert custom.type == "custom_tool_call" and custom.name == "apply_patch"
    assert custom.input == "patch 1" and custom.call_id == "call_1"
    assert ns.type == "function_call" and ns.name == "spawn" and ns.namespace == "agents"
    assert out.usage.input_tokens == 5 and out.usage.total_tokens > 5
    assert out.tools and out.parallel_tool_calls is True


def test_round_trip_of_rendered_items():
    """What the server renders, sent back verbatim as history, parses to the same calls."""
    body = {"model": "m", "input": "x", "tools": [EXEC, APPLY_PATCH, AGENTS]}
    _, opts = responses.parse_request(body)
    calls = [
        ToolCall("a", "exec_command", '{"cmd": "ls"}'),
        ToolCall("b", "apply_patch", json.dumps({"input": "*** Begin Patch"})),
        ToolCall("c", "agents__spawn", "{}"),
    ]
    c = Completion([1], [2], [0.0], "", "hi", calls, "tool_calls", 0)
    items = responses.render_response(c, opts)["output"]
    req, _ = responses.parse_request({**body, "input": items})
    assert req.messages[0].content == "hi"
    assert req.messages[0].tool_calls == calls


def test_custom_call_with_unparsable_arguments_keeps_raw_text():
    _, opts = responses.parse_request({"model": "m", "input": "x", "tools": [APPLY_PATCH]})
    c = Completion([1], [2], [0.0], "", "", [ToolCall("a", "apply_patch", "not json")], "stop", 0)
    item = responses.render_response(c, opts)["output"][0]
    assert item["type"] == "custom_tool_call" and item["input"] == "not json"


def test_sdk_stream_events(kit):
    backend = kit.FakeBackend(_reply_calling("exec_command", "apply_patch"))
    client = kit.openai_client(kit.make_app(backend))

    async def run():
        stream = await client.responses.create(
            model="policy", input="go", tools=[EXEC, APPLY_PATCH], stream=True
        )
        return [event async for event in stream]

    events = asyncio.run(run())
    types = [e.type for e in events]
    assert types[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for kind in (
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
    ):
        assert kind in types, kind
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Working on it."
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(args) == {"cmd": "echo 0"}
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.type for i in done] == ["message", "function_call", "custom_tool_call"]
    final = events[-1].response
    assert final.status == "completed" and final.output[2].input == "patch 1"


def test_sdk_stream_helper_final_response_and_token_ids(kit):
    client = kit.openai_client(kit.make_app(kit.FakeBackend()))

    async def run():
        async with client.responses.stream(
            model="policy", input="hi", extra_body={"return_token_ids": True}
        ) as stream:
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
            final = await stream.get_final_response()
        return deltas, final

    deltas, final = asyncio.run(run())
    assert len(deltas) > 1 and "".join(deltas) == kit.LONG_TEXT
    assert final.output_text == kit.LONG_TEXT
    assert final.prompt_token_ids == [100, 101, 102, 103, 104] and final.token_ids[0] == 1


def test_length_is_incomplete_but_stream_ends_completed(kit):
    backend = kit.FakeBackend(lambda chat: ("partial", [], "length"))
    client = kit.openai_client(kit.make_app(backend))

    async def run():
        plain = await client.responses.create(model="policy", input="hi", max_output_tokens=16)
        stream = await client.responses.create(model="policy", input="hi", stream=True)
        events = [e async for e in stream]
        return plain, events

    plain, events = asyncio.run(run())
    assert plain.status == "incomplete" and plain.incomplete_details.reason == "max_output_tokens"
    assert events[-1].type == "response.completed"
    assert events[-1].response.status == "incomplete"
