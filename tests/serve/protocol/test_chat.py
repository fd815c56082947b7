"""OpenAI chat completions: strict parsing, rendering, and the official SDK against the app."""

from __future__ import annotations

import asyncio
import json

import pytest

from forge.types import Completion, ToolCall
from serve.live import LiveCompletion
from serve.protocol import chat
from serve.protocol.common import ProtocolError, WireOptions

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "exec",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]


def _body(**extra):
    return {"model": "policy", "messages": [{"role": "user", "content": "hi"}], **extra}


def _error(body) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        chat.parse_request(body)
    assert info.value.status == 400
    return info.value


def test_parse_full_request():
    body = {
        "model": "policy",
        "messages": [
            {"role": "developer", "content": "be brief"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "exec", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
        "tools": TOOLS,
        "temperature": 0.7,
        "top_p": 0.9,
        "max_completion_tokens": 99,
        "stop": "END",
        "seed": 5,
        "n": 1,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
        "logit_bias": {"1": 2},  # unknown fields are ignored
    }
    req, opts = chat.parse_request(body)
    roles = [m.role for m in req.messages]
    assert roles == ["system", "user", "assistant", "tool"]
    assert req.messages[1].content == "a\nb"
    assert req.messages[2].content == ""
    assert req.messages[2].tool_calls == [ToolCall("c1", "exec", "{}")]
    assert req.messages[3].tool_call_id == "c1"
    assert [t.name for t in req.tools] == ["exec"]
    assert req.tools[0].parameters["properties"]["cmd"] == {"type": "string"}
    s = req.sampling
    assert (s.temperature, s.top_p, s.max_tokens, s.stop, s.seed) == (0.7, 0.9, 99, ["END"], 5)
    assert opts.stream and opts.include_usage and opts.return_token_ids and opts.max_tokens_set
    assert opts.model == req.model == "policy"


def test_parse_defaults_and_max_tokens():
    req, opts = chat.parse_request(_body(max_tokens=7, stop=["a", "b"]))
    assert req.sampling.max_tokens == 7 and req.sampling.stop == ["a", "b"]
    assert not opts.stream and not opts.include_usage
    _, opts = chat.parse_request(_body())
    assert not opts.max_tokens_set


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model", "is required"),
        ({"model": 3, "messages": []}, "model", "expected a string"),
        ({"model": "m", "messages": []}, "messages", "must not be empty"),
        ({"model": "m", "messages": "hi"}, "messages", "expected an array"),
        (_body(messages=[{"role": "wizard", "content": "x"}]), "messages[0].role", "wizard"),
        (
            _body(
                messages=[
                    {"role": "user", "content": "a"},
                    {"role": "user", "content": "b"},
                    {"role": "user", "content": 5},
                ]
            ),
            "messages[2].content",
            "expected string or list of content parts",
        ),
        (
            _body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
            "messages[0].content[0].image_url.url",
            "required",
        ),
        (
            _body(messages=[{"role": "tool", "content": "x"}]),
            "messages[0].tool_call_id",
            "required",
        ),
        (
            _body(messages=[{"role": "assistant", "tool_calls": [{"id": "c", "function": {}}]}]),
            "messages[0].tool_calls[0].function.name",
            "required",
        ),
        (_body(n=2), "n", "only n=1"),
        (_body(temperature=5), "temperature", "between"),
        (_body(max_tokens=0), "max_tokens", "at least 1"),
        (_body(stop=[1]), "stop[0]", "expected a string"),
        (_body(stream="yes"), "stream", "boolean"),
        (_body(tools=[{"type": "retrieval"}]), "tools[0].type", "function"),
        (_body(tools=[{"type": "function", "function": {}}]), "tools[0].function.name", "required"),
    ],
)
def test_parse_errors_name_the_field(body, field, words):
    err = _error(body)
    assert err.field == field
    assert err.message.startswith(f"{field}: ")
    assert words in err.message


def _completion(**kw) -> Completion:
    base = dict(
        prompt_ids=[1, 2, 3],
        completion_ids=[7, 8],
        logprobs=[-0.1, -0.2],
        text="",
        content="",
        tool_calls=[],
        finish_reason="stop",
        policy_version=0,
    )
    return Completion(**{**base, **kw})


def test_render_response_with_token_ids():
    c = _completion(tool_calls=[ToolCall("call_9", "exec", '{"cmd": "ls"}')], finish_reason="stop")
    out = chat.render_response(c, WireOptions("chat", model="m", return_token_ids=True))
    choice = out["choices"][0]
    assert out["object"] == "chat.completion" and out["model"] == "m"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"][0]["function"] == {
        "name": "exec",
        "arguments": '{"cmd": "ls"}',
    }
    assert choice["finish_reason"] == "tool_calls"
    assert out["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert out["prompt_token_ids"] == [1, 2, 3] and choice["token_ids"] == [7, 8]


def render_all(chunks) -> list[bytes]:
    async def collect() -> list[bytes]:
        return [c async for c in chunks]

    return asyncio.run(collect())


def test_render_stream_shape():
    c = _completion(content="x" * 40, tool_calls=[ToolCall("c", "exec", "{}")])
    opts = WireOptions("chat", model="m", include_usage=True, return_token_ids=True)
    raw = b"".join(render_all(chat.render_stream(LiveCompletion.of(c), opts))).decode()
    events = [e for e in raw.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[0]["prompt_token_ids"] == [1, 2, 3]
    text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"])
    assert text == "x" * 40
    assert sum(1 for ch in chunks if ch["choices"] and ch["choices"][0]["delta"].get("content")) > 1
    final = chunks[-2]["choices"][0]
    assert final["finish_reason"] == "tool_calls" and final["token_ids"] == [7, 8]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 5


def test_sdk_non_stream_tool_call_then_answer(kit):
    backend = kit.FakeBackend()
    client = kit.openai_client(kit.make_app(backend))

    async def run():
        messages = [{"role": "user", "content": "list /tmp"}]
        first = await client.chat.completions.create(model="policy", messages=messages, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]
        assert first.choices[0].finish_reason == "tool_calls"
        assert call.function.name == "exec"
        assert json.loads(call.function.arguments)["cmd"] == "ls -la /tmp"
        assert first.usage.prompt_tokens == 5
        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "a.txt"},
        ]
        second = await client.chat.completions.create(
            model="policy", messages=messages, tools=TOOLS
        )
        assert second.choices[0].message.content == "done: a.txt"
        assert second.choices[0].finish_reason == "stop"

    asyncio.run(run())
    seen = backend.calls[1][1]
    assert [m.role for m in seen.messages] == ["user", "assistant", "tool"]
    assert seen.messages[1].tool_calls[0].name == "exec"


def test_sdk_stream_accumulates_tool_call_and_usage(kit):
    client = kit.openai_client(kit.make_app(kit.FakeBackend()))

    async def run():
        async with client.chat.completions.stream(
            model="policy",
            messages=[{"role": "user", "content": "go"}],
            tools=TOOLS,
            stream_options={"include_usage": True},
        ) as stream:
            async for _ in stream:
                pass
            final = await stream.get_final_completion()
        message = final.choices[0].message
        assert message.content == "Let me check."
        assert message.tool_calls[0].function.name == "exec"
        assert json.loads(message.tool_calls[0].function.arguments) == {
            "cmd": "ls -la /tmp",
            "timeout": 10,
        }
        assert final.choices[0].finish_reason == "tool_calls"
        assert final.usage is not None and final.usage.completion_tokens > 0

        raw = await client.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in raw]
        assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return text

    assert asyncio.run(run()).startswith("The answer is 42")


def test_sdk_return_token_ids(kit):
    client = kit.openai_client(kit.make_app(kit.FakeBackend()))

    async def run():
        out = await client.chat.completions.create(
            model="policy",
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"return_token_ids": True},
        )
        assert out.prompt_token_ids == [100, 101, 102, 103, 104]
        assert out.choices[0].token_ids[0] == 1

    asyncio.run(run())
