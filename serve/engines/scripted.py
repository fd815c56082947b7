"""The ``scripted`` engine: a test double for the *model* (an oracle), never for anything else.

It plays the attempt's reference solution (set on the request by the HarnessPod from the task)
through whatever shell- or file-writing tool the harness offers (a GUI step through the GUI tool
of its action's name: :mod:`serve.engines.scripted_gui`; a service step through the service's
tool or its command-line tool: :mod:`serve.engines.scripted_services`), one step per model
call, then
answers (through a ``finish``-style tool if there is one). With no script, or ``mode="noop"``,
it never calls a tool. Its text is tokenized with the configured model's tokenizer, so its
records have exactly the shape of a real model's. A solution step is not a sampled turn: the
per-turn token limit does not cut it (a Harbor task's whole ``solve.sh`` is one step), unless the
engine was given a context to fill; its answer and the no-op are cut as a model's would be.

It follows each tool's contract (:mod:`serve.engines.scripted_tools`): a file step goes through
the write tool with the tool's own parameter names and path convention, and when the result of
that call reads as a refusal, the same step is redone through the shell (a heredoc), or, with no
shell, through the write tool once more with the other path convention (absolute <-> relative).

It keeps no state: many attempts run at once, so where it stands is derived from the request
alone. Its own earlier tool calls are replayed in order against their results (matched by call
id, else by position): a call advances to the next step unless it was a write-tool call whose
result was a refusal and the step has a fallback left, in which case the step's next way is due.
A step no offered tool can perform (a command with no shell) is passed over.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from typing import Any

from forge.types import ChatRequest, Message, Tool, ToolCall
from serve.chat_template import render_assistant
from serve.engines.base import EngineOutput, EngineRequest
from serve.engines.scripted_browser_use import browser_use_reply, is_browser_use
from serve.engines.scripted_gui import gui_call, is_gui_step
from serve.engines.scripted_services import cli_command, is_service_step, service_tool_call
from serve.engines.scripted_tools import (
    DEFAULT_WORKSPACE,
    Writer,
    absolute,
    find_finish_tool,
    find_shell_tool,
    find_write_tool,
    flagged,
    heredoc,
    props,
    refused,
    workspace_of,
)
from serve.models import load_tokenizer

__all__ = [
    "NOOP_ANSWER",
    "ScriptedEngine",
    "finish_call",
    "heredoc",
    "next_action",
    "step_call",
    "step_calls",
]

NOOP_ANSWER = "I will not use any tools for this."
SUBMIT_MARKERS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",)


def _shell_call(tools: list[Tool], command: str, call_id: str) -> ToolCall | None:
    shell = find_shell_tool(tools)
    if shell is None:
        return None
    tool, param = shell
    return ToolCall(call_id, tool.name, json.dumps({param: command}, ensure_ascii=False))


def step_calls(
    step: Any, tools: list[Tool], call_id: str, workspace: str = DEFAULT_WORKSPACE
) -> list[ToolCall]:
    """The ways to perform one solution step with the tools on offer, best first: for a file
    step, the write tool with its path convention, then the shell (or, with no shell, the write
    tool with the other convention); for a command, the shell; for a GUI action, the GUI tool of
    its name (:mod:`serve.engines.scripted_gui`). Empty: no tool can do it."""
    if is_gui_step(step):
        call = gui_call(step, tools, call_id)
        return [call] if call else []
    if is_service_step(step):  # the service's tool, else its command-line tool
        call = service_tool_call(step, tools, call_id) or _shell_call(
            tools, cli_command(step), call_id
        )
        return [call] if call else []
    if not isinstance(step, dict):
        call = _shell_call(tools, str(step), call_id)
        return [call] if call else []
    path, content = str(step["path"]), str(step["content"])
    writer = find_write_tool(tools)
    shell = _shell_call(tools, heredoc(path, content), call_id)
    if writer is None:
        return [shell] if shell else []
    full = absolute(path, workspace)
    first, other = (full, path) if writer.absolute else (path, full)
    return [writer.call(first, content, call_id), shell or writer.call(other, content, call_id)]


def step_call(
    step: Any, tools: list[Tool], call_id: str, workspace: str = DEFAULT_WORKSPACE
) -> ToolCall | None:
    """The first way to perform one solution step (see :func:`step_calls`)."""
    calls = step_calls(step, tools, call_id, workspace)
    return calls[0] if calls else None


def finish_call(
    tools: list[Tool], answer: str, call_id: str, submit_marker: str | None = None
) -> ToolCall | None:
    """A call of the harness's finish tool with ``answer``; where the harness ends a task by a
    shell command whose first output line is a marker its prompt names (mini-swe-agent's
    ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``), that command, with the answer after it."""
    tool = find_finish_tool(tools)
    if tool is not None:
        keys = list(props(tool))
        key = keys[0] if keys else "answer"
        return ToolCall(call_id, tool.name, json.dumps({key: answer}, ensure_ascii=False))
    if submit_marker:
        command = f"printf '%s\\n%s\\n' {submit_marker} {shlex.quote(answer)}"
        return _shell_call(tools, command, call_id)
    return None


def _submit_marker(chat: ChatRequest) -> str | None:
    text = " ".join(str(m.content) for m in chat.messages if m.role in ("system", "user"))
    return next((m for m in SUBMIT_MARKERS if m in text), None)


def calls_with_results(messages: list[Message]) -> list[tuple[ToolCall, Message | None]]:
    """Every assistant tool call in the history, in order, with its result message: the tool
    message answering its id, else the tool message at its position after the call's turn."""
    by_id = {m.tool_call_id: m for m in messages if m.role == "tool" and m.tool_call_id}
    out: list[tuple[ToolCall, Message | None]] = []
    for i, message in enumerate(messages):
        if message.role != "assistant" or not message.tool_calls:
            continue
        following: list[Message] = []
        for later in messages[i + 1 :]:
            if later.role == "assistant":
                break
            if later.role == "tool":
                following.append(later)
        for j, call in enumerate(message.tool_calls):
            result = by_id.get(call.id)
            if result is None and j < len(following):
                result = following[j]
            out.append((call, result))
    return out


def _failed(call: ToolCall, result: Message | None, writer: Writer | None) -> bool:
    """A call whose step is not done: a write-tool call that was refused, or any call whose
    result carries an explicit error flag."""
    if result is not None and flagged(result):
        return True
    return (
        writer is not None
        and call.name == writer.tool.name
        and refused(call, result, writer.path_key)
    )


def next_action(chat: ChatRequest, mode: str = "oracle") -> str:
    """The completion text for this point of the conversation."""
    return _action(chat, mode)[0]


def _action(chat: ChatRequest, mode: str) -> tuple[str, bool]:
    """The completion text, and whether it performs a step of the task's solution."""
    if is_browser_use(chat):  # browser-use's own JSON (AgentOutput), not tool calls
        return browser_use_reply(chat, mode, NOOP_ANSWER), False
    script = chat.script or {}
    steps = list(script.get("steps") or [])
    answer = script.get("answer") or "Done."
    if mode == "noop" or chat.script is None:
        return NOOP_ANSWER, False
    workspace = workspace_of(chat)
    writer = find_write_tool(chat.tools)
    history = calls_with_results(chat.messages)
    ways = [step_calls(s, chat.tools, "", workspace) for s in steps]

    def due(i: int) -> int:  # the first step at or after i that some tool can perform
        while i < len(steps) and not ways[i]:
            i += 1
        return i

    step, tries = due(0), 0  # the step due, and how many of its ways were refused
    for call, result in history:
        if step < len(steps) and tries + 1 < len(ways[step]) and _failed(call, result, writer):
            tries += 1
        else:
            step, tries = due(step + 1), 0
    call_id = f"call_{len(history)}"
    if step < len(steps):
        return render_assistant("", [replace(ways[step][tries], id=call_id)]), True
    if step == len(steps):
        call = finish_call(chat.tools, answer, call_id, _submit_marker(chat))
        if call is not None:
            return render_assistant("", [call]), False
    return answer, False


class ScriptedEngine:
    def __init__(self, model: str = "tiny", mode: str = "oracle", seed: int = 0) -> None:
        if mode not in ("oracle", "noop"):
            raise ValueError(f"engine.mode: {mode!r} is not 'oracle' or 'noop'")
        self.mode = mode
        self.max_context: int | None = None  # the oracle has no context to fill
        self.tokenizer = load_tokenizer(model)

    async def generate(self, requests: list[EngineRequest]) -> list[EngineOutput]:
        return [self._one(r) for r in requests]

    def _one(self, request: EngineRequest) -> EngineOutput:
        if request.chat is None:
            raise ValueError("the scripted engine needs the chat request")
        text, step = _action(request.chat, self.mode)
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        limit = request.sampling.max_tokens
        if len(ids) >= limit and not (step and self.max_context is None):
            return EngineOutput(ids[:limit], [0.0] * limit, "length")
        ids = [*ids, self.tokenizer.eos_token_id]
        return EngineOutput(ids, [0.0] * len(ids), "stop")

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        """The scripted model has no weights; versions still advance in the Policy."""

    def state_dict(self) -> dict[str, Any]:
        return {}
