"""Anthropic Messages: what real clients send is accepted, and renders token-exact.

System messages inside ``messages`` (in place), ``cache_control`` anywhere, thinking blocks in
history, the fields the model cannot act on, and the beta client's ``?beta=true``.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from forge.observe.fidelity import wire_fidelity
from forge.trajectory import assemble
from forge.types import Episode, Turn
from serve.chat_template import render
from serve.policy import Policy
from serve.protocol import anthropic as proto
from serve.protocol.common import ProtocolError

BASH = {
    "name": "bash",
    "description": "Run a command.",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}
EPHEMERAL = {"type": "ephemeral"}


def base_body() -> dict[str, Any]:
    return {
        "model": "policy",
        "max_tokens": 64,
        "system": [{"type": "text", "text": "You are pi."}],
        "tools": [copy.deepcopy(BASH)],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "list files"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Sure."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "bash",
                        "input": {"command": "ls"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "a.txt"}],
                    },
                    {"type": "text", "text": "now read it"},
                ],
            },
        ],
    }


def prompt_of(body: dict[str, Any]) -> str:
    request, _ = proto.parse_request(body)
    return render(request.messages, request.tools)


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(body: dict[str, Any]) -> None:
        node: Any = body
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return apply


def _insert(path: tuple[Any, ...], index: int, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(body: dict[str, Any]) -> None:
        node: Any = body
        for key in path:
            node = node[key]
        node.insert(index, value)

    return apply


ASSISTANT = ("messages", 1, "content")
RESULT = ("messages", 2, "content", 0)

# Each change is accepted and leaves the prompt exactly as it was: none reaches the model.
UNSEEN = {
    "cache_control on a system block": _set(("system", 0, "cache_control"), EPHEMERAL),
    "cache_control with ttl on a text block": _set(
        ("messages", 0, "content", 0, "cache_control"), {"type": "ephemeral", "ttl": "1h"}
    ),
    "cache_control on a tool": _set(("tools", 0, "cache_control"), EPHEMERAL),
    "cache_control on a tool_use block": _set((*ASSISTANT, 1, "cache_control"), EPHEMERAL),
    "cache_control on a tool_result": _set((*RESULT, "cache_control"), EPHEMERAL),
    "cache_control inside a tool_result": _set((*RESULT, "content", 0, "cache_control"), EPHEMERAL),
    "cache_control at the top level": _set(("cache_control",), EPHEMERAL),
    "citations null": _set((*ASSISTANT, 0, "citations"), None),
    "is_error": _set((*RESULT, "is_error"), False),
    "thinking block": _insert(
        ASSISTANT, 0, {"type": "thinking", "thinking": "hm", "signature": "s"}
    ),
    "redacted_thinking block": _insert(ASSISTANT, 0, {"type": "redacted_thinking", "data": "x"}),
    "empty text block": _insert(("messages", 0, "content"), 0, {"type": "text", "text": ""}),
    "empty system block": _insert(("system",), 0, {"type": "text", "text": ""}),
    "empty system message": _insert(("messages",), 1, {"role": "system", "content": []}),
    "metadata": _set(("metadata",), {"user_id": "user_abc"}),
    "tool_choice auto": _set(("tool_choice",), {"type": "auto"}),
    "tool_choice any": _set(("tool_choice",), {"type": "any", "disable_parallel_tool_use": True}),
    "tool_choice tool": _set(("tool_choice",), {"type": "tool", "name": "bash"}),
    "tool_choice none": _set(("tool_choice",), {"type": "none"}),
    "top_k": _set(("top_k",), 40),
    "service_tier": _set(("service_tier",), "auto"),
    "container": _set(("container",), "container_011"),
    "mcp_servers": _set(
        ("mcp_servers",), [{"type": "url", "url": "https://mcp.example/sse", "name": "x"}]
    ),
    "thinking enabled": _set(("thinking",), {"type": "enabled", "budget_tokens": 1024}),
    "thinking adaptive": _set(("thinking",), {"type": "adaptive"}),
    "output_config": _set(("output_config",), {"effort": "low"}),
    "context_management": _set(("context_management",), {"edits": []}),
    "web_search server tool": _insert(
        ("tools",), 0, {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    ),
    "code_execution server tool": _insert(
        ("tools",), 1, {"type": "code_execution_20250825", "name": "code_execution"}
    ),
}


@pytest.mark.parametrize("change", list(UNSEEN))
def test_accepted_and_unseen_by_the_model(change: str) -> None:
    body = base_body()
    UNSEEN[change](body)
    assert body != base_body()
    assert prompt_of(body) == prompt_of(base_body())


def test_stop_sequences_and_top_k_reach_sampling_or_nothing() -> None:
    body = {**base_body(), "stop_sequences": ["END", ""], "top_k": 0, "temperature": 0.2}
    request, _ = proto.parse_request(body)
    assert request.sampling.stop == ["END", ""] and request.sampling.temperature == 0.2


def test_system_message_renders_in_place() -> None:
    body = base_body()
    env = [{"type": "text", "text": "<env>cwd: /w</env>", "cache_control": EPHEMERAL}]
    body["messages"].insert(1, {"role": "system", "content": env})
    body["messages"].append({"role": "system", "content": "Be brief now."})
    request, _ = proto.parse_request(body)
    roles = [m.role for m in request.messages]
    assert roles == ["system", "user", "system", "assistant", "tool", "user", "system"]
    text = render(request.messages, request.tools)
    turns = re.findall(r"<\|im_start\|>(\w+)\n", text)
    assert turns == ["system", "user", "system", "assistant", "user", "user", "system", "assistant"]
    assert (
        "<|im_start|>user\nlist files<|im_end|>\n"
        "<|im_start|>system\n<env>cwd: /w</env><|im_end|>\n"
        "<|im_start|>assistant\nSure.\n<tool_call>"
    ) in text
    assert text.endswith("<|im_start|>system\nBe brief now.<|im_end|>\n<|im_start|>assistant\n")
    assert text.count("# Tools") == 1  # the tools stay in the first system turn


def test_leading_system_message_without_top_level_system_is_the_system_turn() -> None:
    body = base_body()
    del body["system"]
    body["messages"].insert(0, {"role": "system", "content": [{"type": "text", "text": "Hi."}]})
    text = prompt_of(body)
    assert text.startswith("<|im_start|>system\nHi.\n\n# Tools")
    assert text.count("<|im_start|>system") == 1


def _move_cache_marker(messages: list[dict[str, Any]]) -> None:
    """What Claude-style clients do before each call: one marker, on the newest block."""
    for message in messages:
        if isinstance(message["content"], list):
            for block in message["content"]:
                block.pop("cache_control", None)
    last = messages[-1]
    if isinstance(last["content"], str):
        last["content"] = [{"type": "text", "text": last["content"]}]
    last["content"][-1]["cache_control"] = {"type": "ephemeral", "ttl": "5m"}


def test_a_claude_style_conversation_merges_token_exact_and_keeps_its_history() -> None:
    """Real Policy (scripted engine), real parser and renderer: an environment block as a system
    message every turn, the cache marker moved every turn; each prompt extends the last prompt
    plus its completion, one segment, no reset, and the history counts as kept."""
    policy = Policy({"engine": {"name": "scripted", "model": "tiny"}})
    script = {"steps": ["ls", "make test"], "answer": "all green"}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "run the tests"},
        {"role": "system", "content": "<env>turn 0</env>"},
    ]
    turns: list[Turn] = []

    async def play() -> None:
        for i in range(3):
            _move_cache_marker(messages)
            body = {
                "model": "policy",
                "max_tokens": 256,
                "system": [{"type": "text", "text": "You are pi.", "cache_control": EPHEMERAL}],
                "tools": [{**BASH, "cache_control": EPHEMERAL}],
                "messages": copy.deepcopy(messages),
            }
            chat, opts = proto.parse_request(body)
            chat.script = script
            c = await policy.generate(chat)
            calls = [{"id": k.id, "name": k.name, "arguments": k.arguments} for k in c.tool_calls]
            turns.append(
                Turn("e", 0, i, "anthropic", body, c.prompt_ids, c.completion_ids, c.logprobs,
                     c.text, calls, c.finish_reason, 0, 0.0, float(i))
            )  # fmt: skip
            reply = proto.render_response(c, opts)["content"]
            messages.append({"role": "assistant", "content": reply})
            results = [
                {"type": "tool_result", "tool_use_id": b["id"], "content": f"ok {i}"}
                for b in reply
                if b["type"] == "tool_use"
            ]
            messages.append({"role": "user", "content": results or "thanks"})
            messages.append({"role": "system", "content": [{"type": "text", "text": f"<env>{i}"}]})

    asyncio.run(play())
    assert [t.finish_reason for t in turns] == ["tool_calls", "tool_calls", "stop"]
    for prev, nxt in itertools.pairwise(turns):
        sequence = prev.prompt_ids + prev.completion_ids
        assert nxt.prompt_ids[: len(sequence)] == sequence
    last = policy.tokenizer.decode(turns[-1].prompt_ids)
    assert "<|im_start|>system\n<env>turn 0</env><|im_end|>\n<|im_start|>assistant\n" in last
    assert "</tool_response><|im_end|>\n<|im_start|>system\n<env>1<|im_end|>\n" in last
    segments, resets = assemble(turns)
    assert resets == {} and len(segments) == 1
    report = wire_fidelity([Episode("e", "t", 0, "h", 1.0, "ok", turns=turns)])
    assert report["history_kept"] == 1.0 and report["replies_kept"] == 1.0


REFUSED = {
    "server_tool_use block": (
        _insert(
            ASSISTANT, 0, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}
        ),
        "messages[1].content[0].type",
        "server tools",
    ),
    "web_search_tool_result block": (
        _insert(("messages", 2, "content"), 0, {"type": "web_search_tool_result", "content": []}),
        "messages[2].content[0].type",
        "server tools",
    ),
    "image in a system message": (
        _insert(("messages",), 0, {"role": "system", "content": [{"type": "image", "source": {}}]}),
        "messages[0].content[0].type",
        "not supported",
    ),
    "tool_use in a system message": (
        _insert(("messages",), 0, {"role": "system", "content": [{"type": "tool_use"}]}),
        "messages[0].content[0].type",
        "unsupported",
    ),
    "system content an object": (
        _insert(("messages",), 0, {"role": "system", "content": {"type": "text", "text": "x"}}),
        "messages[0].content",
        "expected string or list",
    ),
    "developer role": (
        _insert(("messages",), 0, {"role": "developer", "content": "x"}),
        "messages[0].role",
        "'developer'",
    ),
    "tool_choice unknown type": (
        _set(("tool_choice",), {"type": "required"}),
        "tool_choice.type",
        "'required'",
    ),
    "tool_choice tool without name": (
        _set(("tool_choice",), {"type": "tool"}),
        "tool_choice.name",
        "required",
    ),
    "tool_choice bad disable_parallel_tool_use": (
        _set(("tool_choice",), {"type": "any", "disable_parallel_tool_use": "yes"}),
        "tool_choice.disable_parallel_tool_use",
        "boolean",
    ),
    "top_k negative": (_set(("top_k",), -1), "top_k", "at least 0"),
    "top_k a string": (_set(("top_k",), "40"), "top_k", "integer"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_with_the_field_named(case: str) -> None:
    change, field, words = REFUSED[case]
    body = base_body()
    change(body)
    with pytest.raises(ProtocolError) as info:
        proto.parse_request(body)
    assert info.value.status == 400 and info.value.field == field
    assert info.value.message.startswith(f"{field}: ") and words in info.value.message


def _recording(app: Any, seen: list[dict[str, Any]]) -> Any:
    """The app, noting each HTTP request's path, query string and headers on its way in."""

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode(): v.decode() for k, v in scope["headers"]}
            seen.append({"path": scope["path"], "query": scope["query_string"], **headers})
        await app(scope, receive, send)

    return asgi


def test_sdk_beta_client_with_beta_query_and_header(kit: Any) -> None:
    backend = kit.FakeBackend()
    seen: list[dict[str, Any]] = []
    client = kit.anthropic_client(_recording(kit.make_app(backend), seen))
    messages: list[Any] = [
        {"role": "user", "content": [{"type": "text", "text": "list", "cache_control": EPHEMERAL}]},
        {"role": "system", "content": "<env>cwd: /w</env>"},
    ]

    async def run() -> tuple[Any, Any]:
        created = await client.beta.messages.create(
            model="policy",
            max_tokens=100,
            messages=messages,
            tools=[{**BASH, "cache_control": EPHEMERAL}],
            betas=["prompt-caching-2024-07-31", "interleaved-thinking-2025-05-14"],
            thinking={"type": "enabled", "budget_tokens": 1024},
            metadata={"user_id": "u"},
            extra_query={"beta": "true"},  # what the TypeScript SDK and older releases post
        )
        async with client.beta.messages.stream(
            model="policy", max_tokens=100, messages=messages, betas=["context-1m-2025-08-07"]
        ) as stream:
            final = await stream.get_final_message()
        return created, final

    created, final = asyncio.run(run())
    assert created.stop_reason == "tool_use" and created.content[1].input["timeout"] == 10
    assert final.stop_reason == "end_turn" and final.content[0].text == kit.LONG_TEXT
    assert [r["path"] for r in seen] == ["/v1/messages", "/v1/messages"]
    assert seen[0]["query"] == b"beta=true"
    assert "prompt-caching-2024-07-31" in seen[0]["anthropic-beta"]
    chat = backend.calls[0][1]
    assert [(m.role, m.content) for m in chat.messages] == [
        ("user", "list"),
        ("system", "<env>cwd: /w</env>"),
    ]


def test_raw_request_with_query_string_and_every_extra_field(kit: Any) -> None:
    backend = kit.FakeBackend()
    body = base_body()
    for change in UNSEEN.values():
        change(body)
    body["messages"].insert(1, {"role": "system", "content": "<env/>"})
    headers = {"x-api-key": kit.API_KEY, "anthropic-version": "2023-06-01"}
    headers["anthropic-beta"] = "prompt-caching-2024-07-31,fine-grained-tool-streaming-2025-05-14"

    async def run() -> Any:
        async with kit.http_client(kit.make_app(backend)) as http:
            return await http.post("/v1/messages?beta=true", json=body, headers=headers)

    response = asyncio.run(run())
    assert response.status_code == 200, response.text
    assert response.json()["type"] == "message"
    chat = backend.calls[0][1]
    assert [m.role for m in chat.messages] == [
        "system",
        "user",
        "system",
        "assistant",
        "tool",
        "user",
    ]
    assert json.loads(chat.messages[3].tool_calls[0].arguments) == {"command": "ls"}
