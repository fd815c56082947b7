"""Wire-level fidelity: arguments echoed verbatim, call ids kept, history kept as a prefix."""

from __future__ import annotations

import json
from typing import Any

from forge.observe.fidelity import echoed_arguments, wire_fidelity
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


def _anthropic_pair(before: list[dict], after: list[dict]) -> dict[str, Any]:
    first = _turn(0, "anthropic", {"messages": before})
    second = _turn(1, "anthropic", {"messages": after})
    return wire_fidelity([Episode("e", "t", 0, "h", 1.0, "ok", turns=[first, second])])


MARK = {"type": "ephemeral", "ttl": "5m"}


def test_a_moved_cache_marker_is_not_a_history_edit() -> None:
    """Claude-style clients put one cache_control marker on the newest block of every call."""
    user = {"role": "user", "content": [{"type": "text", "text": "list", "cache_control": MARK}]}
    before = [user]
    reply = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {"cmd": "ls"}}],
    }
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt", "cache_control": MARK}
    after = [
        {"role": "user", "content": [{"type": "text", "text": "list"}]},  # the marker moved on
        {**reply, "content": [{**reply["content"][0]}]},
        {"role": "user", "content": [result]},
    ]
    assert _anthropic_pair(before, after)["history_kept"] == 1.0
    # next call: a marker inside a tool result's own content blocks moves away as well
    nested = {**result, "content": [{"type": "text", "text": "a.txt", "cache_control": MARK}]}
    again = [*after[:2], {"role": "user", "content": [nested]}]
    later = [*after[:2], {"role": "user", "content": [{**result, "cache_control": None}]}]
    assert _anthropic_pair(again, later)["history_kept"] == 1.0


def test_string_content_equals_one_text_block_and_citations_are_ignored() -> None:
    before = [{"role": "user", "content": "list"}, {"role": "assistant", "content": "Done."}]
    block = {"type": "text", "text": "Done.", "citations": None}
    after = [
        {"role": "user", "content": [{"type": "text", "text": "list", "cache_control": MARK}]},
        {"role": "assistant", "content": [block]},
    ]
    assert _anthropic_pair(before, after)["history_kept"] == 1.0


def test_edits_still_count_when_markers_move() -> None:
    before = [
        {"role": "user", "content": [{"type": "text", "text": "list", "cache_control": MARK}]}
    ]
    edited = [{"role": "user", "content": [{"type": "text", "text": "list (12:00)"}]}]
    assert _anthropic_pair(before, edited)["history_kept"] == 0.0
    # a key named cache_control inside a tool's input is the model's argument, not a marker
    call = {"type": "tool_use", "id": "t", "name": "f", "input": {"cache_control": 1}}
    stripped = {**call, "input": {}}
    msgs = [{"role": "user", "content": "go"}]
    assert (
        _anthropic_pair(
            [*msgs, {"role": "assistant", "content": [call]}],
            [*msgs, {"role": "assistant", "content": [stripped]}],
        )["history_kept"]
        == 0.0
    )
    # thinking blocks are content on the wire: dropping one is an edit here
    thought = {"type": "thinking", "thinking": "hm", "signature": "s"}
    with_thought = [*msgs, {"role": "assistant", "content": [thought, call]}]
    without = [*msgs, {"role": "assistant", "content": [call]}]
    assert _anthropic_pair(with_thought, without)["history_kept"] == 0.0


def test_chat_content_parts_lose_their_markers_too() -> None:
    part = {"type": "text", "text": "u", "cache_control": {"type": "ephemeral"}}
    first = _turn(0, "chat", _chat([SYSTEM, {"role": "user", "content": [part]}]))
    second = _turn(1, "chat", _chat([SYSTEM, USER, _assistant(ARGS)]))
    report = wire_fidelity([Episode("e", "t", 0, "h", 1.0, "ok", turns=[first, second])])
    assert report["history_kept"] == 1.0 and report["replies_kept"] == 1.0
