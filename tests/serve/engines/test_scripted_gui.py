"""The oracle plays a GUI task's reference steps through the GUI tools, then ``done``."""

from __future__ import annotations

import json
from typing import Any

from forge.harnesses.gui_actions import BROWSER_ONLY, tools
from forge.types import ChatRequest, Message, Tool, ToolCall
from serve.chat_template import parse_tool_calls
from serve.engines.scripted import NOOP_ANSWER, next_action
from tasks.schema import Task

TASK = Task.model_validate(
    {
        "id": "gui_demo",
        "instruction": "Fill in the form.",
        "verifier": {"type": "answer_equals", "value": "sent"},
        "solution": [
            {"action": "click", "x": 250, "y": 100},
            {"action": "type", "text": "hello"},
            {"action": "press", "keys": "ctrl+a"},
            {"action": "scroll", "x": 500, "y": 500, "dy": 3},
            {"action": "drag", "x": 10, "y": 20, "x2": 30, "y2": 40},
            {"action": "goto", "url": "http://127.0.0.1:8000/next"},
            {"action": "wait", "seconds": 2},
            {"action": "back"},
        ],
        "answer": "sent",
    }
)


def gui_tools(names: list[str] | None = None) -> list[Tool]:
    return [
        Tool(t["function"]["name"], t["function"]["description"], t["function"]["parameters"])
        for t in tools(names)
    ]


def play(tools_: list[Tool], mode: str = "oracle") -> tuple[list[ToolCall], str]:
    script: dict[str, Any] = TASK.reference_script()
    messages = [Message("user", TASK.instruction)]
    calls: list[ToolCall] = []
    for _ in range(20):
        text = next_action(ChatRequest(messages=messages, tools=tools_, script=script), mode)
        content, turn = parse_tool_calls(text)
        if not turn:
            return calls, text
        assert len(turn) == 1
        calls += turn
        messages.append(Message("assistant", content, tool_calls=turn))
        messages.append(Message("tool", "clicked; page changed: no", tool_call_id=turn[0].id))
    raise AssertionError("the oracle never answered")


def test_plays_every_step_then_done_with_the_answer() -> None:
    calls, text = play(gui_tools())
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("click", {"x": 250, "y": 100}),
        ("type", {"text": "hello"}),
        ("press", {"keys": "ctrl+a"}),
        ("scroll", {"x": 500, "y": 500, "dy": 3}),
        ("drag", {"x": 10, "y": 20, "x2": 30, "y2": 40}),
        ("goto", {"url": "http://127.0.0.1:8000/next"}),
        ("wait", {"seconds": 2.0}),
        ("back", {}),
        ("done", {"answer": "sent"}),
    ]
    assert len({c.id for c in calls}) == len(calls)
    assert text == "sent"


def test_passes_over_actions_the_harness_does_not_offer() -> None:
    desktop = [n for n in tools() if n["function"]["name"] not in BROWSER_ONLY]
    calls, _ = play(gui_tools([t["function"]["name"] for t in desktop]))
    names = [c.name for c in calls]
    assert names == ["click", "type", "press", "scroll", "drag", "wait", "done"]


def test_arguments_the_tool_does_not_name_are_left_out() -> None:
    click = Tool("click", "", {"type": "object", "properties": {"x": {}, "y": {}}})
    done = Tool("done", "", {"type": "object", "properties": {"answer": {}}})
    script = {"steps": [{"action": "click", "x": 1, "y": 2, "note": "extra"}], "answer": "a"}
    req = ChatRequest(messages=[Message("user", "go")], tools=[click, done], script=script)
    _, turn = parse_tool_calls(next_action(req))
    assert [(c.name, json.loads(c.arguments)) for c in turn] == [("click", {"x": 1, "y": 2})]


def test_noop_never_acts() -> None:
    calls, text = play(gui_tools(), mode="noop")
    assert calls == [] and text == NOOP_ANSWER
