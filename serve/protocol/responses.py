"""OpenAI Responses API (`POST /v1/responses`, spoken by Codex CLI) <-> ChatRequest, Completion.

Tool mapping (see :mod:`serve.protocol.common` for the kind strings):

- ``function`` tools become function Tools of kind ``function``.
- ``custom`` (free-text) tools become function Tools of kind ``custom`` with one required string
  parameter ``input``; a call to one is answered as a ``custom_tool_call`` whose ``input`` is that
  argument, and a ``custom_tool_call`` in the history becomes a call with ``{"input": ...}``.
- ``namespace`` groups are flattened into Tools named ``NS__TOOL`` (kind ``namespace:NS``, or
  ``namespace:NS:custom``); calls go back out under the inner name with ``namespace: NS``.
- Built-in tools (web_search, tool_search, local_shell, image_generation, ...) are dropped.

The stream always ends with ``response.completed`` (its ``status`` is ``incomplete`` when the
token limit cut the answer): Codex treats ``response.incomplete`` as a failed turn. The input
items and tools are read by :mod:`serve.protocol.responses_items`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from forge.types import ChatRequest, Completion, Message, SamplingParams
from serve.protocol.common import (
    NAMESPACE_SEP,
    WireOptions,
    custom_input,
    expect_list,
    invalid,
    opt_bool,
    opt_int,
    opt_number,
    opt_str,
    req_str,
    split_kind,
)
from serve.protocol.responses_items import parse_input, parse_tools
from serve.protocol.sse import LastChunk, pieces, sse_event
from serve.protocol.structured import responses_schema

if TYPE_CHECKING:
    from serve.live import LiveCompletion

_ECHOED = (
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "max_output_tokens",
    "store",
    "reasoning",
    "prompt_cache_key",
    "metadata",
    "text",
    "truncation",
)


def parse_request(body: dict[str, Any]) -> tuple[ChatRequest, WireOptions]:
    """Validate a Responses body; unknown extra fields are ignored."""
    model = req_str(body, "model", non_empty=True)
    if body.get("previous_response_id") is not None:
        raise invalid(
            "previous_response_id",
            "is not supported: this server stores no responses; send the whole conversation",
        )
    tools = parse_tools(body.get("tools"))
    messages: list[Message] = []
    instructions = opt_str(body, "instructions")
    if instructions:
        messages.append(Message(role="system", content=instructions))
    if body.get("input") is None:
        raise invalid("input", "is required")
    messages.extend(parse_input(body["input"]))

    sampling = SamplingParams()
    temperature = opt_number(body, "temperature", 0.0, 2.0)
    top_p = opt_number(body, "top_p", 0.0, 1.0)
    max_tokens = opt_int(body, "max_output_tokens", 1)
    if temperature is not None:
        sampling.temperature = temperature
    if top_p is not None:
        sampling.top_p = top_p
    if max_tokens is not None:
        sampling.max_tokens = max_tokens
    sampling.json_schema = responses_schema(body)
    for key in ("store", "parallel_tool_calls", "background"):
        opt_bool(body, key)
    if body.get("include") is not None:
        expect_list(body["include"], "include")

    echo = {key: body[key] for key in _ECHOED if body.get(key) is not None}
    echo["tools"] = body.get("tools") or []
    opts = WireOptions(
        protocol="responses",
        stream=bool(opt_bool(body, "stream")),
        return_token_ids=bool(opt_bool(body, "return_token_ids")),
        model=model,
        tool_kinds={t.name: t.kind for t in tools},
        echo=echo,
        max_tokens_set=max_tokens is not None,
    )
    return ChatRequest(messages=messages, tools=tools, sampling=sampling, model=model), opts


def _message_item(opts: WireOptions, text: str, status: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{opts.request_id}",
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _output_items(c: Completion, opts: WireOptions) -> list[dict[str, Any]]:
    """The completed output items: an assistant message if there is text, then one per call."""
    items: list[dict[str, Any]] = []
    if c.content:
        items.append(_message_item(opts, c.content, "completed"))
    for i, call in enumerate(c.tool_calls):
        namespace, custom = split_kind(opts.tool_kinds.get(call.name, "function"))
        name = call.name
        if namespace and name.startswith(namespace + NAMESPACE_SEP):
            name = name[len(namespace) + len(NAMESPACE_SEP) :]
        item: dict[str, Any]
        if custom:
            item = {
                "type": "custom_tool_call",
                "id": f"ctc_{opts.request_id}_{i}",
                "call_id": call.id,
                "name": name,
                "input": custom_input(call.arguments),
                "status": "completed",
            }
        else:
            item = {
                "type": "function_call",
                "id": f"fc_{opts.request_id}_{i}",
                "call_id": call.id,
                "name": name,
                "arguments": call.arguments,
                "status": "completed",
            }
        if namespace:
            item["namespace"] = namespace
        items.append(item)
    return items


def _usage(c: Completion) -> dict[str, Any]:
    prompt, completion = len(c.prompt_ids), len(c.completion_ids)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def _response(
    opts: WireOptions, created_at: int, output: list[dict[str, Any]], c: Completion | None
) -> dict[str, Any]:
    """The Response object: in progress (``c`` None) or finished."""
    echo = opts.echo
    status = "in_progress"
    incomplete = None
    if c is not None:
        status = "incomplete" if c.finish_reason == "length" else "completed"
        if status == "incomplete":
            incomplete = {"reason": "max_output_tokens"}
    out: dict[str, Any] = {
        "id": f"resp_{opts.request_id}",
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": incomplete,
        "instructions": None,
        "max_output_tokens": echo.get("max_output_tokens"),
        "metadata": echo.get("metadata", {}),
        "model": opts.model,
        "output": output,
        "parallel_tool_calls": echo.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": echo.get("reasoning", {"effort": None, "summary": None}),
        "store": echo.get("store", False),
        "temperature": echo.get("temperature", 1.0),
        "text": echo.get("text", {"format": {"type": "text"}}),
        "tool_choice": echo.get("tool_choice", "auto"),
        "tools": echo.get("tools", []),
        "top_p": echo.get("top_p", 1.0),
        "truncation": echo.get("truncation", "disabled"),
        "usage": None,
        "user": None,
    }
    if "prompt_cache_key" in echo:
        out["prompt_cache_key"] = echo["prompt_cache_key"]
    if c is not None:
        out["completed_at"] = int(time.time())
        out["usage"] = _usage(c)
        if opts.return_token_ids:
            out["prompt_token_ids"] = list(c.prompt_ids)
            out["token_ids"] = list(c.completion_ids)
    return out


def render_response(c: Completion, opts: WireOptions) -> dict[str, Any]:
    return _response(opts, int(time.time()), _output_items(c, opts), c)


async def render_stream(live: LiveCompletion, opts: WireOptions) -> AsyncIterator[bytes]:
    """The answer as events: those that come together are written together (one ``bytes`` a
    wait), the last ones as a :class:`~serve.protocol.sse.LastChunk`."""
    created_at = int(time.time())
    seq = 0

    def event(kind: str, **fields: Any) -> bytes:
        nonlocal seq
        data = {"type": kind, "sequence_number": seq, **fields}
        seq += 1
        return sse_event(kind, data)

    yield event("response.created", response=_response(opts, created_at, [], None)) + event(
        "response.in_progress", response=_response(opts, created_at, [], None)
    )
    # the message (output 0) opens with its first piece of text; the calls follow it
    message = _message_item(opts, "", "in_progress")
    where = {"item_id": message["id"], "output_index": 0}
    part = {"type": "output_text", "text": "", "annotations": []}
    opened = False
    while True:  # one batch a wait, the last with the completion
        batch = await live.next_batch()
        out: list[bytes] = []
        for piece in batch:
            if not opened:
                opened = True
                item = {**message, "content": []}
                out.append(event("response.output_item.added", output_index=0, item=item))
                out.append(
                    event("response.content_part.added", **where, content_index=0, part=part)
                )
            out.append(
                event(
                    "response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[]
                )
            )
        c = live.completion
        if c is None:
            if out:
                yield b"".join(out)
            continue
        items = _output_items(c, opts)
        for index, item in enumerate(items):
            out += _item_events(event, item, index, part)
        out.append(event("response.completed", response=_response(opts, created_at, items, c)))
        yield LastChunk(b"".join(out))
        return


def _item_events(
    event: Callable[..., bytes], item: dict[str, Any], index: int, part: dict[str, Any]
) -> list[bytes]:
    """The events that finish output ``index`` (its text is out already; a call's arguments
    or input are streamed in pieces here), ending with ``response.output_item.done``."""
    where = {"item_id": item["id"], "output_index": index}
    out: list[bytes] = []
    if item["type"] == "message":
        text = item["content"][0]["text"]
        out.append(
            event("response.output_text.done", **where, content_index=0, text=text, logprobs=[])
        )
        out.append(
            event(
                "response.content_part.done", **where, content_index=0, part={**part, "text": text}
            )
        )
    elif item["type"] == "function_call":
        added = {**item, "arguments": "", "status": "in_progress"}
        out.append(event("response.output_item.added", output_index=index, item=added))
        for piece in pieces(item["arguments"]):
            out.append(event("response.function_call_arguments.delta", **where, delta=piece))
        out.append(
            event(
                "response.function_call_arguments.done",
                **where,
                name=item["name"],
                arguments=item["arguments"],
            )
        )
    else:
        added = {**item, "input": "", "status": "in_progress"}
        out.append(event("response.output_item.added", output_index=index, item=added))
        for piece in pieces(item["input"]):
            out.append(event("response.custom_tool_call_input.delta", **where, delta=piece))
        out.append(event("response.custom_tool_call_input.done", **where, input=item["input"]))
    out.append(event("response.output_item.done", output_index=index, item=item))
    return out
