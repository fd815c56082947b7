"""What a harness does to the conversation it sends back, measured on the wire.

Token-level fidelity (does the next prompt begin with exactly the tokens of the last one plus its
completion?) is what :mod:`forge.trajectory` decides when it merges turns into segments. This
module explains *why* a merge breaks, from the raw requests the proxy recorded:

``args_verbatim``
    share of the model's tool calls whose arguments text came back unchanged in the next request
    (a harness that parses and re-serialises the JSON, even only its spacing, fails this);
``ids_kept``
    share of the model's tool calls whose id came back at all (some harnesses mint their own);
``history_kept``
    share of consecutive requests where the earlier request's messages are an exact prefix of the
    later one's (a harness that edits, drops or compacts old messages fails this). Messages are
    compared without what never reaches the prompt: ``cache_control`` markers (Claude-style
    clients move theirs to the newest block on every call) and ``citations``, on a message or
    any of its content blocks; and a string ``content`` equals one text block holding it
    (chat and anthropic). Everything else counts, thinking blocks and tool inputs included;
``replies_kept``
    of those, the share where the model's reply follows that prefix in the later request (a
    harness that drops a reply it could not use, such as one without a tool call, fails this).

Anthropic messages carry tool input as a JSON object, never as text, so arguments there are
re-serialised by construction and are not counted.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from forge.types import Episode, Turn


def history(turn: Turn) -> list[Any]:
    """The conversation a request carries: chat and anthropic ``messages``, responses ``input``."""
    body = turn.request or {}
    items = body.get("input") if turn.protocol == "responses" else body.get("messages")
    if isinstance(items, str):
        return [items]
    return list(items) if isinstance(items, list) else []


_ANNOTATIONS = ("cache_control", "citations")


def comparable(item: Any, protocol: str) -> Any:
    """``item`` (a message or a Responses item) as the history comparison sees it: without the
    annotations above, on it and on its content blocks (a tool result's own blocks included),
    string content written as one text block. Tool inputs and arguments are left as they are."""
    out = _strip(item)
    if isinstance(out, dict) and "content" in out:
        out["content"] = _content(out["content"], protocol)
    return out


def _content(content: Any, protocol: str) -> Any:
    if isinstance(content, str) and protocol in ("chat", "anthropic"):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return content
    blocks = []
    for raw in content:
        block = _strip(raw)
        if _is_tool_result(block, protocol):
            block["content"] = _content(block["content"], protocol)
        blocks.append(block)
    return blocks


def _is_tool_result(block: Any, protocol: str) -> bool:
    return (
        protocol == "anthropic"
        and isinstance(block, dict)
        and block.get("type") == "tool_result"
        and "content" in block
    )


def _strip(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    return {key: inner for key, inner in value.items() if key not in _ANNOTATIONS}


def echoed_arguments(turn: Turn) -> dict[str, str]:
    """Tool-call id -> the arguments text the request sends back for it."""
    echoed: dict[str, str] = {}
    for item in history(turn):
        if not isinstance(item, dict):
            continue
        if turn.protocol == "chat":
            for call in item.get("tool_calls") or []:
                fn = call.get("function") or {}
                if isinstance(fn.get("arguments"), str):
                    echoed[str(call.get("id"))] = fn["arguments"]
        elif (
            turn.protocol == "responses"
            and item.get("type") == "function_call"
            and isinstance(item.get("arguments"), str)
        ):
            echoed[str(item.get("call_id"))] = item["arguments"]
    return echoed


def wire_fidelity(episodes: Iterable[Episode]) -> dict[str, Any]:
    """The three shares above over every consecutive pair of turns of ``episodes`` (None where
    nothing could be compared), with the counts they come from."""
    calls = verbatim = kept_ids = pairs = kept = replies = 0
    for ep in episodes:
        turns = sorted(ep.turns, key=lambda t: t.index)
        for prev, nxt in itertools.pairwise(turns):
            pairs += 1
            before = [comparable(item, prev.protocol) for item in history(prev)]
            after = [comparable(item, nxt.protocol) for item in history(nxt)]
            if after[: len(before)] == before:
                kept += 1
                replies += len(after) > len(before) and _is_reply(after[len(before)])
            if prev.protocol == "anthropic":
                continue
            echoed = echoed_arguments(nxt)
            for call in prev.tool_calls:
                calls += 1
                if call["id"] in echoed:
                    kept_ids += 1
                    verbatim += echoed[call["id"]] == call["arguments"]
    return {
        "tool_calls": calls,
        "args_verbatim": verbatim / kept_ids if kept_ids else None,
        "ids_kept": kept_ids / calls if calls else None,
        "turn_pairs": pairs,
        "history_kept": kept / pairs if pairs else None,
        "replies_kept": replies / kept if kept else None,
    }


def _is_reply(item: Any) -> bool:
    """A message or item that the model said: an assistant message, or a Responses output item."""
    if not isinstance(item, dict):
        return False
    return item.get("role") == "assistant" or item.get("type") in ("function_call", "reasoning")
