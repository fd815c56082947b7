"""Wire-level fidelity: arguments echoed verbatim, call ids kept, history kept as a prefix."""

from __future__ import annotations

import json
from typing import Any

from forge.fidelity import echoed_arguments, wire_fidelity
from forge.types import Episode, Turn

ARGS = json.dumps({"command": "ls -a"})  # '{"command": "ls -a"}': with spaces, as emitted


def _turn(i: int, protocol: str, request: dict[str, Any], calls: list[dict] = ()) -> Turn:
    return Turn("e", 0, i, protocol, request, [1], [2], [0.0], "", list(calls), "stop", 0, 0.0, 0.0)


def _chat(messages: list[dict]) -> dict[str, Any]:
    return {"messages": messages}


def _assistant(args: str, call_id: str = "c1") -> dict[str, Any]:
    fn = {"name": "bash", "arguments": args}
    return {
        "role": "assistant",
        "tool_calls": [{"id": call_id, "type": "function", "function": fn}],
    }


SYSTEM, USER = {"role": "system", "content": "s"}, {"role": "user", "content": "u"}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}
CALL = {"id": "c1", "name": "bash", "arguments": ARGS}


def test_a_faithful_chat_harness_scores_1() -> None:
    first = _turn(0, "chat", _chat([SYSTEM, USER]), [CALL])
    second = _turn(1, "chat", _chat([SYSTEM, USER, _assistant(ARGS), RESULT]))
    report = wire_fidelity([Episode("e", "t", 0, "h", 1.0, "ok", turns=[second, first])])
    assert report == {
        "tool_calls": 1,
        "args_verbatim": 1.0,
        "ids_kept": 1.0,
        "turn_pairs": 1,
        "history_kept": 1.0,
        "replies_kept": 1.0,
    }


def test_a_dropped_reply_is_caught() -> None:
    """mini-swe-agent drops a reply without a tool call and sends back only its error message."""
    first = _turn(0, "chat", _chat([SYSTEM, USER]))
    error = {"role": "user", "content": "No tool calls found"}
    second = _turn(1, "chat", _chat([SYSTEM, USER, error]))
    report = wire_fidelity([Episode("e", "t", 0, "h", 0.0, "ok", turns=[first, second])])
    assert report["history_kept"] == 1.0 and report["replies_kept"] == 0.0


def test_compacted_arguments_new_ids_and_edited_history_are_caught() -> None:
    compact = json.dumps(json.loads(ARGS), separators=(",", ":"))
    first = _turn(0, "chat", _chat([SYSTEM, USER]), [CALL, {**CALL, "id": "c2"}])
    # c1 re-serialised compactly, c2 renamed; and the user message was rewritten
    edited = {"role": "user", "content": "u (12:00 UTC)"}
    second = _turn(
        1, "chat", _chat([SYSTEM, edited, _assistant(compact), _assistant(ARGS, "mine")])
    )
    report = wire_fidelity([Episode("e", "t", 0, "h", 1.0, "ok", turns=[first, second])])
    assert report["tool_calls"] == 2 and report["ids_kept"] == 0.5
    assert report["args_verbatim"] == 0.0 and report["history_kept"] == 0.0


def test_responses_function_calls_are_read_and_anthropic_inputs_are_not_counted() -> None:
    item = {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": ARGS}
    turn = _turn(1, "responses", {"input": [{"role": "user", "content": "u"}, item]})
    assert echoed_arguments(turn) == {"c1": ARGS}
    block = {"type": "tool_use", "id": "c1", "name": "bash", "input": {"command": "ls -a"}}
    msgs = [{"role": "user", "content": "u"}]
    first = _turn(0, "anthropic", {"messages": msgs}, [CALL])
    second = _turn(1, "anthropic", {"messages": [*msgs, {"role": "assistant", "content": [block]}]})
    report = wire_fidelity([Episode("e", "t", 0, "h", 1.0, "ok", turns=[first, second])])
    assert report["tool_calls"] == 0 and report["args_verbatim"] is None
    assert report["history_kept"] == 1.0
