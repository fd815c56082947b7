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
    later one's (a harness that edits, drops or compacts old messages fails this);
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
            before, after = history(prev), history(nxt)
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
