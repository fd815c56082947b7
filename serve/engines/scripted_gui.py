"""How the scripted engine (the oracle) plays a GUI task's reference solution.

A GUI step is a mapping with ``action`` (a ``tasks.schema.GuiAction`` as plain data): it becomes
a call of the harness's tool of that name (``forge.harnesses.gui_actions``: click, double_click,
type, press, scroll, drag, goto, back, wait) with the step's other fields as arguments, those
the tool's schema names (all of them when it names none). A step whose action the harness does
not offer (``goto`` in a desktop harness) is passed over, like a command with no shell. The
answer then goes through the ``done`` tool like any finish tool.
"""

from __future__ import annotations

import json
from typing import Any

from forge.types import Tool, ToolCall
from serve.engines.scripted_tools import props


def is_gui_step(step: Any) -> bool:
    return isinstance(step, dict) and isinstance(step.get("action"), str)


def gui_call(step: dict[str, Any], tools: list[Tool], call_id: str) -> ToolCall | None:
    """The call of the tool named by ``step["action"]``; None when no such tool is offered."""
    name = step["action"]
    tool = next((t for t in tools if t.kind == "function" and t.name == name), None)
    if tool is None:
        return None
    known = props(tool)
    args = {k: v for k, v in step.items() if k != "action" and (not known or k in known)}
    return ToolCall(call_id, tool.name, json.dumps(args, ensure_ascii=False))
