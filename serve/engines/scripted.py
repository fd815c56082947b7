"""The ``scripted`` engine: a test double for the *model* (an oracle), never for anything else.

It plays the attempt's reference solution (set on the request by the HarnessPod from the task)
through whatever shell- or file-writing tool the harness offers, one step per model call, then
answers (through a ``finish``-style tool if there is one). With no script, or ``mode="noop"``,
it never calls a tool. Its text is tokenized with the configured model's tokenizer, so its
records have exactly the shape of a real model's.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from forge.types import ChatRequest, Tool, ToolCall
from serve.chat_template import render_assistant
from serve.engines.base import EngineOutput, EngineRequest
from serve.models import build_byte_tokenizer, load_model

SHELL_NAMES = ("shell", "bash", "exec", "command", "terminal", "run", "sh")
SHELL_PARAMS = ("command", "cmd", "script", "commands", "input")
WRITE_PATH_PARAMS = ("path", "file_path", "filename", "file")
WRITE_CONTENT_PARAMS = ("content", "contents", "text", "data")
FINISH_NAMES = ("finish", "submit", "final_answer", "done")
NOOP_ANSWER = "I will not use any tools for this."


def _props(tool: Tool) -> dict[str, Any]:
    props = tool.parameters.get("properties") if isinstance(tool.parameters, dict) else None
    return props if isinstance(props, dict) else {}


def _string_param(tool: Tool, names: tuple[str, ...]) -> str | None:
    props = _props(tool)
    for name in names:
        spec = props.get(name)
        if isinstance(spec, dict) and spec.get("type") in ("string", None):
            return name
    return None


def find_shell_tool(tools: list[Tool]) -> tuple[Tool, str] | None:
    """A tool that runs a shell command, and the name of its command parameter."""
    for tool in tools:
        lname = tool.name.lower()
        if tool.kind == "function" and any(s in lname for s in SHELL_NAMES):
            param = _string_param(tool, SHELL_PARAMS)
            if param:
                return tool, param
    return None


def find_write_tool(tools: list[Tool]) -> tuple[Tool, str, str] | None:
    for tool in tools:
        if tool.kind == "function" and "write" in tool.name.lower():
            path = _string_param(tool, WRITE_PATH_PARAMS)
            content = _string_param(tool, WRITE_CONTENT_PARAMS)
            if path and content:
                return tool, path, content
    return None


def heredoc(path: str, content: str) -> str:
    marker = "FORGE_EOF"
    while marker in content:
        marker += "_"
    body = content if content.endswith("\n") else content + "\n"
    parent = f"mkdir -p \"$(dirname '{path}')\" && " if "/" in path else ""
    return f"{parent}cat > '{path}' <<'{marker}'\n{body}{marker}"


def step_call(step: Any, tools: list[Tool], call_id: str) -> ToolCall | None:
    """The tool call that performs one solution step with the tools on offer."""
    shell = find_shell_tool(tools)
    writer = find_write_tool(tools)
    if isinstance(step, dict) and writer is not None:
        tool, pkey, ckey = writer
        args = {pkey: step["path"], ckey: step["content"]}
        return ToolCall(call_id, tool.name, json.dumps(args, ensure_ascii=False))
    if shell is None:
        return None
    command = heredoc(step["path"], step["content"]) if isinstance(step, dict) else str(step)
    tool, param = shell
    return ToolCall(call_id, tool.name, json.dumps({param: command}, ensure_ascii=False))


def finish_call(
    tools: list[Tool], answer: str, call_id: str, submit_marker: str | None = None
) -> ToolCall | None:
    """A call of the harness's finish tool with ``answer``; where the harness ends a task by a
    shell command whose first output line is a marker its prompt names (mini-swe-agent's
    ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``), that command, with the answer after it."""
    for tool in tools:
        if tool.kind == "function" and tool.name.lower() in FINISH_NAMES:
            props = list(_props(tool))
            key = props[0] if props else "answer"
            return ToolCall(call_id, tool.name, json.dumps({key: answer}, ensure_ascii=False))
    shell = find_shell_tool(tools)
    if submit_marker and shell is not None:
        tool, param = shell
        command = f"printf '%s\\n%s\\n' {submit_marker} {shlex.quote(answer)}"
        return ToolCall(call_id, tool.name, json.dumps({param: command}, ensure_ascii=False))
    return None


SUBMIT_MARKERS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",)


def _submit_marker(chat: ChatRequest) -> str | None:
    text = " ".join(str(m.content) for m in chat.messages if m.role in ("system", "user"))
    return next((m for m in SUBMIT_MARKERS if m in text), None)


def next_action(chat: ChatRequest, mode: str = "oracle") -> str:
    """The completion text for this point of the conversation."""
    script = chat.script or {}
    steps = list(script.get("steps") or [])
    answer = script.get("answer") or "Done."
    if mode == "noop" or chat.script is None:
        return NOOP_ANSWER
    done = sum(len(m.tool_calls) for m in chat.messages if m.role == "assistant")
    call_id = f"call_{done}"
    if done < len(steps):
        call = step_call(steps[done], chat.tools, call_id)
        if call is not None:
            return render_assistant("", [call])
    elif done == len(steps):
        call = finish_call(chat.tools, answer, call_id, _submit_marker(chat))
        if call is not None:
            return render_assistant("", [call])
    return answer


class ScriptedEngine:
    def __init__(self, model: str = "tiny", mode: str = "oracle", seed: int = 0) -> None:
        if mode not in ("oracle", "noop"):
            raise ValueError(f"engine.mode: {mode!r} is not 'oracle' or 'noop'")
        self.mode = mode
        self.max_context: int | None = None  # the oracle has no context to fill
        # Only the tokenizer is needed; the tiny one is built without a model.
        self.tokenizer = build_byte_tokenizer() if model == "tiny" else load_model(model)[1]

    async def generate(self, requests: list[EngineRequest]) -> list[EngineOutput]:
        return [self._one(r) for r in requests]

    def _one(self, request: EngineRequest) -> EngineOutput:
        if request.chat is None:
            raise ValueError("the scripted engine needs the chat request")
        text = next_action(request.chat, self.mode)
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        limit = request.sampling.max_tokens
        if len(ids) >= limit:
            return EngineOutput(ids[:limit], [0.0] * limit, "length")
        ids = [*ids, self.tokenizer.eos_token_id]
        return EngineOutput(ids, [0.0] * len(ids), "stop")

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        """The scripted model has no weights; versions still advance in the Policy."""

    def state_dict(self) -> dict[str, Any]:
        return {}
