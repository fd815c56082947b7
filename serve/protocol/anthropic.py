"""Anthropic Messages (``POST /v1/messages``) <-> ChatRequest / Completion.

A user message holding ``tool_result`` blocks becomes one ``tool`` message per result (in
order), followed by a user message with its text blocks if it has any. ``tool_use`` inputs become
JSON argument text; ``thinking`` blocks are dropped; image and document blocks are refused.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from forge.types import ChatRequest, Completion, Message, SamplingParams, Tool, ToolCall
from serve.protocol.common import (
    WireOptions,
    at,
    expect_dict,
    expect_list,
    invalid,
    opt_bool,
    opt_int,
    opt_number,
    opt_str,
    parse_json_object,
    pieces,
    req_str,
    sse_event,
    text_content,
)

if TYPE_CHECKING:
    from serve.live import LiveCompletion

_IGNORED_BLOCKS = ("thinking", "redacted_thinking")
_MEDIA_BLOCKS = ("image", "document", "search_result", "container_upload")


def parse_request(body: dict[str, Any]) -> tuple[ChatRequest, WireOptions]:
    """Validate a Messages body; unknown extra fields are ignored."""
    model = req_str(body, "model", non_empty=True)
    max_tokens = opt_int(body, "max_tokens", 1)
    if max_tokens is None:
        raise invalid("max_tokens", "is required")
    messages: list[Message] = []
    if body.get("system") is not None:
        system = text_content(body["system"], "system", ("text",))
        if system:
            messages.append(Message(role="system", content=system))
    call_names: dict[str, str] = {}
    raw_messages = expect_list(body.get("messages"), "messages", non_empty=True)
    for i, raw in enumerate(raw_messages):
        messages.extend(_parse_message(raw, at("messages", i), call_names))
    tools = _parse_tools(body.get("tools"))

    sampling = SamplingParams(max_tokens=max_tokens)
    temperature = opt_number(body, "temperature", 0.0, 1.0)
    top_p = opt_number(body, "top_p", 0.0, 1.0)
    if temperature is not None:
        sampling.temperature = temperature
    if top_p is not None:
        sampling.top_p = top_p
    if body.get("stop_sequences") is not None:
        for j, stop in enumerate(expect_list(body["stop_sequences"], "stop_sequences")):
            if not isinstance(stop, str):
                raise invalid(at("stop_sequences", j), "expected a string")
            sampling.stop.append(stop)
    for key in ("tool_choice", "metadata"):
        if body.get(key) is not None:
            expect_dict(body[key], key)
    opts = WireOptions(
        protocol="anthropic",
        stream=bool(opt_bool(body, "stream")),
        return_token_ids=bool(opt_bool(body, "return_token_ids")),
        model=model,
        tool_kinds={t.name: t.kind for t in tools},
        max_tokens_set=True,
    )
    return ChatRequest(messages=messages, tools=tools, sampling=sampling, model=model), opts


def _blocks(content: Any, path: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise invalid(path, "expected string or list of content blocks")
    return [expect_dict(block, at(path, i)) for i, block in enumerate(content)]


def _parse_message(raw: Any, path: str, call_names: dict[str, str]) -> list[Message]:
    msg = expect_dict(raw, path)
    role = msg.get("role")
    if role not in ("user", "assistant"):
        raise invalid(at(path, "role"), f"expected 'user' or 'assistant', got {role!r}")
    if msg.get("content") is None:
        raise invalid(at(path, "content"), "is required")
    content_path = at(path, "content")
    blocks = _blocks(msg["content"], content_path)
    texts: list[str] = []
    calls: list[ToolCall] = []
    results: list[Message] = []
    for i, block in enumerate(blocks):
        block_path = at(content_path, i)
        kind = block.get("type")
        if kind == "text":
            texts.append(req_str(block, "text", block_path))
        elif kind == "tool_use" and role == "assistant":
            call_id = req_str(block, "id", block_path, non_empty=True)
            name = req_str(block, "name", block_path, non_empty=True)
            arguments = expect_dict(block.get("input"), at(block_path, "input"))
            calls.append(ToolCall(call_id, name, json.dumps(arguments, ensure_ascii=False)))
            call_names[call_id] = name
        elif kind == "tool_result" and role == "user":
            call_id = req_str(block, "tool_use_id", block_path, non_empty=True)
            opt_bool(block, "is_error", block_path)
            body = text_content(
                block.get("content"), at(block_path, "content"), ("text",), allow_none=True
            )
            results.append(
                Message(
                    role="tool", content=body, tool_call_id=call_id, name=call_names.get(call_id)
                )
            )
        elif kind in _IGNORED_BLOCKS:
            continue
        elif kind in _MEDIA_BLOCKS:
            raise invalid(at(block_path, "type"), f"{kind!r} blocks are not supported (text only)")
        else:
            raise invalid(
                at(block_path, "type"),
                f"unsupported content block type {kind!r} in a {role} message",
            )
    text = "\n".join(texts)
    if role == "assistant":
        return [Message(role="assistant", content=text, tool_calls=calls)]
    if results and not texts:
        return results
    return [*results, Message(role="user", content=text)]


def _parse_tools(raw: Any) -> list[Tool]:
    if raw is None:
        return []
    tools: list[Tool] = []
    seen: set[str] = set()
    for i, value in enumerate(expect_list(raw, "tools")):
        path = at("tools", i)
        spec = expect_dict(value, path)
        if spec.get("type") not in (None, "custom"):
            continue  # server tools (web_search_..., bash_..., text_editor_...) are not offered
        name = req_str(spec, "name", path, non_empty=True)
        if name in seen:
            raise invalid(at(path, "name"), f"duplicate tool name {name!r}")
        seen.add(name)
        schema = expect_dict(spec.get("input_schema"), at(path, "input_schema"))
        description = opt_str(spec, "description", path) or ""
        tools.append(Tool(name=name, description=description, parameters=schema))
    return tools


# --------------------------------------------------------------------------------------------
# Rendering


def _tool_use_id(call_id: str) -> str:
    return call_id if call_id.startswith("toolu_") else f"toolu_{call_id}"


def _stop_reason(c: Completion) -> str:
    if c.finish_reason == "length":
        return "max_tokens"
    if c.tool_calls:
        return "tool_use"
    return "end_turn"


def _input_json(arguments: str) -> tuple[dict[str, Any], str]:
    """A call's arguments as (object, JSON text); anything but a JSON object gives ``{}``."""
    value = parse_json_object(arguments)
    if value is None:
        return {}, "{}"
    return value, arguments


def _blocks_out(c: Completion) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if c.content:
        blocks.append({"type": "text", "text": c.content})
    for call in c.tool_calls:
        value, _ = _input_json(call.arguments)
        blocks.append(
            {"type": "tool_use", "id": _tool_use_id(call.id), "name": call.name, "input": value}
        )
    return blocks


def _message(
    opts: WireOptions, prompt_ids: list[int], content: list[dict[str, Any]], c: Completion | None
) -> dict:
    """The message object: starting (``c`` None) or finished."""
    out: dict[str, Any] = {
        "id": f"msg_{opts.request_id}",
        "type": "message",
        "role": "assistant",
        "model": opts.model,
        "content": content,
        "stop_reason": _stop_reason(c) if c else None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": len(prompt_ids),
            "output_tokens": len(c.completion_ids) if c else 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
    if opts.return_token_ids:
        out["prompt_token_ids"] = list(prompt_ids)
        if c:
            out["token_ids"] = list(c.completion_ids)
    return out


def render_response(c: Completion, opts: WireOptions) -> dict[str, Any]:
    return _message(opts, c.prompt_ids, _blocks_out(c), c)


async def render_stream(live: LiveCompletion, opts: WireOptions) -> AsyncIterator[bytes]:
    def event(kind: str, **fields: Any) -> bytes:
        return sse_event(kind, {"type": kind, **fields})

    yield event("message_start", message=_message(opts, live.prompt_ids or [], [], None))
    yield event("ping")
    opened = False  # the text block (index 0) opens with its first piece
    async for piece in live.content():
        if not opened:
            opened = True
            start = {"type": "text", "text": ""}
            yield event("content_block_start", index=0, content_block=start)
        yield event("content_block_delta", index=0, delta={"type": "text_delta", "text": piece})
    if opened:
        yield event("content_block_stop", index=0)
    index = 1 if opened else 0
    c = live.final()
    for call in c.tool_calls:
        _, text = _input_json(call.arguments)
        start = {"type": "tool_use", "id": _tool_use_id(call.id), "name": call.name, "input": {}}
        yield event("content_block_start", index=index, content_block=start)
        for piece in pieces(text):
            delta = {"type": "input_json_delta", "partial_json": piece}
            yield event("content_block_delta", index=index, delta=delta)
        yield event("content_block_stop", index=index)
        index += 1
    delta: dict[str, Any] = {"stop_reason": _stop_reason(c), "stop_sequence": None}
    usage = {"output_tokens": len(c.completion_ids)}
    extra = {"token_ids": list(c.completion_ids)} if opts.return_token_ids else {}
    yield event("message_delta", delta=delta, usage=usage, **extra)
    yield event("message_stop")
