"""OpenAI chat completions (``POST /v1/chat/completions``) <-> ChatRequest / Completion."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from forge.types import ChatRequest, Completion, Message, SamplingParams, Tool, ToolCall
from serve.protocol.common import (
    WireOptions,
    at,
    content_parts,
    expect_dict,
    expect_list,
    invalid,
    opt_bool,
    opt_int,
    opt_number,
    opt_schema,
    opt_stop,
    opt_str,
    req_str,
    text_content,
)
from serve.protocol.images import chat_image
from serve.protocol.sse import SSE_DONE, LastChunk, pieces, sse_data
from serve.protocol.structured import chat_schema

if TYPE_CHECKING:
    from serve.live import LiveCompletion

_ROLES = ("system", "developer", "user", "assistant", "tool")
_IMAGES = {"image_url": chat_image}  # image parts, in user and tool messages


def parse_request(body: dict[str, Any]) -> tuple[ChatRequest, WireOptions]:
    """Validate a chat-completions body; unknown extra fields are ignored."""
    model = req_str(body, "model", non_empty=True)
    raw_messages = expect_list(body.get("messages"), "messages", non_empty=True)
    messages = [_parse_message(m, at("messages", i)) for i, m in enumerate(raw_messages)]
    tools = _parse_tools(body.get("tools"))

    n = opt_int(body, "n", 1)
    if n is not None and n != 1:
        raise invalid("n", f"only n=1 is supported, got {n}")
    max_tokens = opt_int(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = opt_int(body, "max_tokens", 1)
    sampling = SamplingParams(stop=opt_stop(body, "stop"), seed=opt_int(body, "seed", -(2**63)))
    temperature = opt_number(body, "temperature", 0.0, 2.0)
    top_p = opt_number(body, "top_p", 0.0, 1.0)
    if temperature is not None:
        sampling.temperature = temperature
    if top_p is not None:
        sampling.top_p = top_p
    if max_tokens is not None:
        sampling.max_tokens = max_tokens
    sampling.json_schema = chat_schema(body)

    stream = bool(opt_bool(body, "stream"))
    include_usage = False
    if body.get("stream_options") is not None:
        stream_options = expect_dict(body["stream_options"], "stream_options")
        include_usage = bool(opt_bool(stream_options, "include_usage", "stream_options"))
    opts = WireOptions(
        protocol="chat",
        stream=stream,
        include_usage=include_usage,
        return_token_ids=bool(opt_bool(body, "return_token_ids")),
        model=model,
        tool_kinds={t.name: t.kind for t in tools},
        max_tokens_set=max_tokens is not None,
    )
    return ChatRequest(messages=messages, tools=tools, sampling=sampling, model=model), opts


def _parse_message(raw: Any, path: str) -> Message:
    msg = expect_dict(raw, path)
    role = msg.get("role")
    if role not in _ROLES:
        raise invalid(at(path, "role"), f"expected one of {', '.join(_ROLES)}, got {role!r}")
    content_path = at(path, "content")
    if role == "assistant":
        content = text_content(msg.get("content"), content_path, ("text",), allow_none=True)
        calls = _parse_tool_calls(msg.get("tool_calls"), at(path, "tool_calls"))
        return Message(role="assistant", content=content, tool_calls=calls)
    if "content" not in msg:
        raise invalid(content_path, "is required")
    images = _IMAGES if role in ("user", "tool") else None
    content, parts = content_parts(msg["content"], content_path, ("text",), images)
    if role == "tool":
        call_id = req_str(msg, "tool_call_id", path)
        name = opt_str(msg, "name", path)
        return Message("tool", content, tool_call_id=call_id, name=name, parts=parts)
    return Message(role="system" if role == "developer" else role, content=content, parts=parts)


def _parse_tool_calls(raw: Any, path: str) -> list[ToolCall]:
    if raw is None:
        return []
    calls = []
    for i, item in enumerate(expect_list(raw, path)):
        item_path = at(path, i)
        call = expect_dict(item, item_path)
        kind = call.get("type", "function")
        if kind != "function":
            raise invalid(at(item_path, "type"), f"expected 'function', got {kind!r}")
        fn_path = at(item_path, "function")
        fn = expect_dict(call.get("function"), fn_path)
        calls.append(
            ToolCall(
                id=req_str(call, "id", item_path),
                name=req_str(fn, "name", fn_path, non_empty=True),
                arguments=req_str(fn, "arguments", fn_path),
            )
        )
    return calls


def _parse_tools(raw: Any) -> list[Tool]:
    if raw is None:
        return []
    tools: list[Tool] = []
    seen: set[str] = set()
    for i, item in enumerate(expect_list(raw, "tools")):
        path = at("tools", i)
        spec = expect_dict(item, path)
        if spec.get("type") != "function":
            raise invalid(at(path, "type"), f"expected 'function', got {spec.get('type')!r}")
        fn_path = at(path, "function")
        fn = expect_dict(spec.get("function"), fn_path)
        name = req_str(fn, "name", fn_path, non_empty=True)
        if name in seen:
            raise invalid(at(fn_path, "name"), f"duplicate tool name {name!r}")
        seen.add(name)
        tools.append(
            Tool(
                name=name,
                description=opt_str(fn, "description", fn_path) or "",
                parameters=opt_schema(fn, "parameters", fn_path),
            )
        )
    return tools


# --------------------------------------------------------------------------------------------
# Rendering


def _finish_reason(c: Completion) -> str:
    if c.tool_calls and c.finish_reason == "stop":
        return "tool_calls"
    return c.finish_reason


def _usage(c: Completion) -> dict[str, int]:
    prompt, completion = len(c.prompt_ids), len(c.completion_ids)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def wire_call(call: ToolCall) -> dict[str, Any]:
    """One tool call as chat completions carries it."""
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def render_response(c: Completion, opts: WireOptions) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": c.content if (c.content or not c.tool_calls) else None,
    }
    if c.tool_calls:
        message["tool_calls"] = [wire_call(call) for call in c.tool_calls]
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": _finish_reason(c),
    }
    out: dict[str, Any] = {
        "id": f"chatcmpl-{opts.request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": opts.model,
        "choices": [choice],
        "usage": _usage(c),
    }
    if opts.return_token_ids:
        out["prompt_token_ids"] = list(c.prompt_ids)
        choice["token_ids"] = list(c.completion_ids)
    return out


async def render_stream(live: LiveCompletion, opts: WireOptions) -> AsyncIterator[bytes]:
    """The answer as chunks: the events that come together are written together (one
    ``bytes`` a wait), the last ones as a :class:`~serve.protocol.sse.LastChunk`."""
    created = int(time.time())
    base: dict[str, Any] = {
        "id": f"chatcmpl-{opts.request_id}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": opts.model,
    }

    def chunk(
        delta: dict[str, Any],
        finish: str | None = None,
        choice_extra: dict[str, Any] | None = None,
        top_extra: dict[str, Any] | None = None,
    ) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        out: dict[str, Any] = {**base, "choices": [{**choice, **(choice_extra or {})}]}
        if opts.include_usage:
            out["usage"] = None
        return sse_data({**out, **(top_extra or {})})

    first = {"prompt_token_ids": list(live.prompt_ids or [])} if opts.return_token_ids else None
    yield chunk({"role": "assistant", "content": ""}, top_extra=first)
    while True:  # one batch a wait, the last with the completion
        batch = await live.next_batch()
        out = [chunk({"content": piece}) for piece in batch]
        c = live.completion
        if c is None:
            if out:
                yield b"".join(out)
            continue
        for index, call in enumerate(c.tool_calls):
            head = {
                "index": index,
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            out.append(chunk({"tool_calls": [head]}))
            for piece in pieces(call.arguments):
                delta = {"index": index, "function": {"arguments": piece}}
                out.append(chunk({"tool_calls": [delta]}))
        last = {"token_ids": list(c.completion_ids)} if opts.return_token_ids else None
        out.append(chunk({}, _finish_reason(c), choice_extra=last))
        if opts.include_usage:
            out.append(sse_data({**base, "choices": [], "usage": _usage(c)}))
        yield LastChunk(b"".join([*out, SSE_DONE]))
        return
