"""Anthropic Messages (``POST /v1/messages``, also ``?beta=true``) <-> ChatRequest / Completion.

What a request may hold, and how it reaches the chat template:

- ``system`` (a string or text blocks) is the first system turn. A ``role: "system"`` message
  inside ``messages`` (some agents put their environment block there, mid-conversation) is a
  system turn *in place*, rendered like any other message, so a conversation that keeps it
  stays a token-exact prefix of the next one (an empty one is left out, as an empty
  ``system`` is).
- Text blocks join with newlines; empty ones are left out (they carry nothing).
- A user message holding ``tool_result`` blocks becomes one ``tool`` message per result (in
  order), followed by a user message with its text blocks if it has any. ``tool_use`` inputs
  become JSON argument text.
- ``thinking`` and ``redacted_thinking`` blocks are dropped from the prompt, as the API itself
  does with the thinking of earlier turns: the policy never wrote them, and a harness that keeps
  or drops them renders the same prompt.
- Annotations that change nothing the model reads are accepted and ignored: ``cache_control``
  (with its ``ttl``) on any block or tool, ``citations``, ``metadata``, ``tool_choice`` (checked,
  not enforced: constraining it would change the prompt between turns), ``top_k`` (checked;
  training samples without it), ``thinking``, ``service_tier``, ``container``, ``mcp_servers``,
  ``output_config`` and any other top-level field, and tools with a ``type`` other than
  ``custom`` (server tools such as ``web_search_...``: the model is not offered them).
- ``image`` blocks (base64 sources) in user messages and in ``tool_result`` content become
  image parts of the message (:mod:`serve.protocol.images`); elsewhere (system, assistant)
  they are refused.
- Refused with a 400 naming the block: document and other media blocks (the policy reads
  text and images), and the blocks of server tools in history (``server_tool_use``,
  ``web_search_tool_result``, ...): this proxy runs none, so they come from a transcript of
  another model that it cannot continue as written.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from forge.types import (
    ChatRequest,
    Completion,
    ImagePart,
    Message,
    SamplingParams,
    TextPart,
    Tool,
    ToolCall,
)
from serve.protocol.common import (
    ProtocolError,
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
    req_str,
)
from serve.protocol.images import anthropic_image
from serve.protocol.sse import LastChunk, pieces, sse_event
from serve.protocol.structured import anthropic_schema

if TYPE_CHECKING:
    from serve.live import LiveCompletion

_IGNORED_BLOCKS = ("thinking", "redacted_thinking")
_MEDIA_BLOCKS = ("image", "document", "search_result", "container_upload", "tool_reference")
_SERVER_BLOCKS = (
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
)
_TOOL_CHOICES = ("auto", "any", "tool", "none")


def parse_count_tokens(body: dict[str, Any]) -> ChatRequest:
    """A ``POST /v1/messages/count_tokens`` body: a Messages body without ``max_tokens``."""
    return parse_request({**body, "max_tokens": 1})[0]


def parse_request(body: dict[str, Any]) -> tuple[ChatRequest, WireOptions]:
    """Validate a Messages body; unknown extra fields are ignored."""
    model = req_str(body, "model", non_empty=True)
    max_tokens = opt_int(body, "max_tokens", 1)
    if max_tokens is None:
        raise invalid("max_tokens", "is required")
    messages: list[Message] = []
    if body.get("system") is not None:
        system = _text(body["system"], "system")
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
    opt_int(body, "top_k", 0)
    if body.get("stop_sequences") is not None:
        for j, stop in enumerate(expect_list(body["stop_sequences"], "stop_sequences")):
            if not isinstance(stop, str):
                raise invalid(at("stop_sequences", j), "expected a string")
            sampling.stop.append(stop)
    sampling.json_schema = anthropic_schema(body)
    _check_tool_choice(body.get("tool_choice"))
    if body.get("metadata") is not None:
        expect_dict(body["metadata"], "metadata")
    opts = WireOptions(
        protocol="anthropic",
        stream=bool(opt_bool(body, "stream")),
        return_token_ids=bool(opt_bool(body, "return_token_ids")),
        model=model,
        tool_kinds={t.name: t.kind for t in tools},
        max_tokens_set=True,
    )
    return ChatRequest(messages=messages, tools=tools, sampling=sampling, model=model), opts


def _check_tool_choice(raw: Any) -> None:
    """``tool_choice`` as the API defines it; the model is not constrained by it."""
    if raw is None:
        return
    choice = expect_dict(raw, "tool_choice")
    kind = choice.get("type")
    if not isinstance(kind, str) or kind not in _TOOL_CHOICES:
        wanted = ", ".join(repr(k) for k in _TOOL_CHOICES)
        raise invalid("tool_choice.type", f"expected one of {wanted}, got {kind!r:.60}")
    if kind == "tool":
        req_str(choice, "name", "tool_choice", non_empty=True)
    opt_bool(choice, "disable_parallel_tool_use", "tool_choice")


def _blocks(content: Any, path: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise invalid(path, "expected string or list of content blocks")
    return [expect_dict(block, at(path, i)) for i, block in enumerate(content)]


def _refuse(kind: Any, type_path: str, where: str) -> ProtocolError:
    if isinstance(kind, str) and kind in _MEDIA_BLOCKS:
        return invalid(type_path, f"{kind!r} blocks are not supported (text only)")
    if isinstance(kind, str) and kind in _SERVER_BLOCKS:
        return invalid(
            type_path, f"{kind!r} blocks are not supported (this server runs no server tools)"
        )
    return invalid(type_path, f"unsupported content block type {kind!r:.60} in {where}")


def _text(content: Any, path: str, *, allow_none: bool = False) -> str:
    """A string, or a list of text blocks: their non-empty texts joined with newlines."""
    return _content(content, path, allow_none=allow_none, images=False)[0]


def _content(
    content: Any, path: str, *, allow_none: bool = False, images: bool = True
) -> tuple[str, list[TextPart | ImagePart] | None]:
    """A string, or a list of text (and, with ``images``, image) blocks: the non-empty texts
    joined with newlines, and the parts in order when there is an image (else None)."""
    if content is None and allow_none:
        return "", None
    if isinstance(content, str):
        return content, None
    texts: list[str] = []
    parts: list[TextPart | ImagePart] = []
    for i, block in enumerate(_blocks(content, path)):
        block_path = at(path, i)
        kind = block.get("type")
        if kind == "image" and images:
            parts.append(anthropic_image(block, block_path))
            continue
        if kind != "text":
            raise _refuse(kind, at(block_path, "type"), "text content")
        text = req_str(block, "text", block_path)
        if text:
            texts.append(text)
            parts.append(TextPart(text))
    has_image = any(isinstance(p, ImagePart) for p in parts)
    return "\n".join(texts), parts if has_image else None


def _parse_message(raw: Any, path: str, call_names: dict[str, str]) -> list[Message]:
    msg = expect_dict(raw, path)
    role = msg.get("role")
    if not isinstance(role, str) or role not in ("user", "assistant", "system"):
        raise invalid(
            at(path, "role"), f"expected 'user', 'assistant' or 'system', got {role!r:.60}"
        )
    if msg.get("content") is None:
        raise invalid(at(path, "content"), "is required")
    content_path = at(path, "content")
    if role == "system":
        system = _text(msg["content"], content_path)
        return [Message(role="system", content=system)] if system else []
    texts: list[str] = []
    parts: list[TextPart | ImagePart] = []
    calls: list[ToolCall] = []
    results: list[Message] = []
    for i, block in enumerate(_blocks(msg["content"], content_path)):
        block_path = at(content_path, i)
        kind = block.get("type")
        if kind == "text":
            text = req_str(block, "text", block_path)
            if text:
                texts.append(text)
                parts.append(TextPart(text))
        elif kind == "image" and role == "user":
            parts.append(anthropic_image(block, block_path))
        elif kind == "tool_use" and role == "assistant":
            call_id = req_str(block, "id", block_path, non_empty=True)
            name = req_str(block, "name", block_path, non_empty=True)
            arguments = expect_dict(block.get("input"), at(block_path, "input"))
            calls.append(ToolCall(call_id, name, json.dumps(arguments, ensure_ascii=False)))
            call_names[call_id] = name
        elif kind == "tool_result" and role == "user":
            call_id = req_str(block, "tool_use_id", block_path, non_empty=True)
            is_error = opt_bool(block, "is_error", block_path) is True
            body, body_parts = _content(
                block.get("content"), at(block_path, "content"), allow_none=True
            )
            name = call_names.get(call_id)
            results.append(
                Message(
                    "tool",
                    body,
                    tool_call_id=call_id,
                    name=name,
                    is_error=is_error,
                    parts=body_parts,
                )
            )
        elif isinstance(kind, str) and kind in _IGNORED_BLOCKS:
            continue
        else:
            raise _refuse(kind, at(block_path, "type"), f"a {role} message")
    text = "\n".join(texts)
    if role == "assistant":
        return [Message(role="assistant", content=text, tool_calls=calls)]
    if results and not parts:
        return results
    has_image = any(isinstance(p, ImagePart) for p in parts)
    return [*results, Message(role="user", content=text, parts=parts if has_image else None)]


def _parse_tools(raw: Any) -> list[Tool]:
    if raw is None:
        return []
    tools: list[Tool] = []
    seen: set[str] = set()
    for i, value in enumerate(expect_list(raw, "tools")):
        path = at("tools", i)
        spec = expect_dict(value, path)
        if spec.get("type") not in (None, "custom"):
            # Server tools (web_search_..., code_execution_...) and Anthropic-defined client
            # tools (bash_..., text_editor_..., computer_...): no schema given, not offered.
            continue
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
    """The answer as events: those that come together are written together (one ``bytes`` a
    wait), the last ones as a :class:`~serve.protocol.sse.LastChunk`."""

    def event(kind: str, **fields: Any) -> bytes:
        return sse_event(kind, {"type": kind, **fields})

    start = event("message_start", message=_message(opts, live.prompt_ids or [], [], None))
    yield start + event("ping")
    opened = False  # the text block (index 0) opens with its first piece
    while True:  # one batch a wait, the last with the completion
        batch = await live.next_batch()
        out: list[bytes] = []
        for piece in batch:
            if not opened:
                opened = True
                block = {"type": "text", "text": ""}
                out.append(event("content_block_start", index=0, content_block=block))
            delta = {"type": "text_delta", "text": piece}
            out.append(event("content_block_delta", index=0, delta=delta))
        c = live.completion
        if c is None:
            if out:
                yield b"".join(out)
            continue
        if opened:
            out.append(event("content_block_stop", index=0))
        index = 1 if opened else 0
        for call in c.tool_calls:
            _, text = _input_json(call.arguments)
            use = {"type": "tool_use", "id": _tool_use_id(call.id), "name": call.name}
            out.append(
                event("content_block_start", index=index, content_block={**use, "input": {}})
            )
            for piece in pieces(text):
                delta = {"type": "input_json_delta", "partial_json": piece}
                out.append(event("content_block_delta", index=index, delta=delta))
            out.append(event("content_block_stop", index=index))
            index += 1
        stop: dict[str, Any] = {"stop_reason": _stop_reason(c), "stop_sequence": None}
        usage = {"output_tokens": len(c.completion_ids)}
        extra = {"token_ids": list(c.completion_ids)} if opts.return_token_ids else {}
        out.append(event("message_delta", delta=stop, usage=usage, **extra))
        out.append(event("message_stop"))
        yield LastChunk(b"".join(out))
        return
