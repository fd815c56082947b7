"""The OpenAI Responses API's input items and tools (:mod:`serve.protocol.responses`), read into
Messages and Tools: messages and their parts, function and custom tool calls and their outputs,
and the tools, namespaces flattened, built-in ones dropped."""

from __future__ import annotations

from typing import Any

from forge.types import Message, Tool, ToolCall
from serve.protocol.common import (
    NAMESPACE_SEP,
    at,
    content_parts,
    custom_arguments,
    custom_input_schema,
    expect_dict,
    expect_list,
    invalid,
    namespace_kind,
    opt_schema,
    opt_str,
    req_str,
)
from serve.protocol.images import responses_image

# Grammar text of a custom tool kept in its description, at most this many characters.
GRAMMAR_CHARS = 4000

_ROLES = ("user", "system", "developer", "assistant")
_TEXT_PARTS = ("input_text", "output_text", "text")
_IMAGES = {"input_image": responses_image}  # in user messages and function call outputs
# History items that carry nothing the policy can read back; skipped.
_SKIPPED_ITEMS = (  # a tuple: a client's unhashable value is just not in it
    "reasoning",
    "web_search_call",
    "tool_search_call",
    "tool_search_output",
    "image_generation_call",
    "compaction",
    "compaction_summary",
    "ghost_snapshot",
)


def parse_input(raw: Any) -> list[Message]:
    if isinstance(raw, str):
        return [Message(role="user", content=raw)]
    out: list[Message] = []
    call_names: dict[str, str] = {}
    for i, value in enumerate(expect_list(raw, "input", non_empty=True)):
        path = at("input", i)
        item = expect_dict(value, path)
        kind = item.get("type")
        if kind == "message" or (kind is None and "role" in item):
            out.append(_parse_message(item, path))
        elif kind in ("function_call", "custom_tool_call"):
            call = _parse_call(item, path, custom=kind == "custom_tool_call")
            call_names[call.id] = call.name
            if out and out[-1].role == "assistant":
                out[-1].tool_calls.append(call)
            else:
                out.append(Message(role="assistant", tool_calls=[call]))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = req_str(item, "call_id", path)
            if item.get("output") is None:
                raise invalid(at(path, "output"), "is required")
            content, parts = content_parts(item["output"], at(path, "output"), _TEXT_PARTS, _IMAGES)
            name = call_names.get(call_id)
            out.append(Message("tool", content, tool_call_id=call_id, name=name, parts=parts))
        elif kind in _SKIPPED_ITEMS:
            continue
        elif kind is None:
            raise invalid(at(path, "type"), "is required (or give a message 'role')")
        else:
            raise invalid(at(path, "type"), f"unsupported input item type {kind!r}")
    return out


def _parse_message(item: dict[str, Any], path: str) -> Message:
    role = item.get("role")
    if role not in _ROLES:
        raise invalid(at(path, "role"), f"expected one of {', '.join(_ROLES)}, got {role!r}")
    if item.get("content") is None:
        raise invalid(at(path, "content"), "is required")
    images = _IMAGES if role == "user" else None
    content, parts = content_parts(item["content"], at(path, "content"), _TEXT_PARTS, images)
    return Message(role="system" if role == "developer" else role, content=content, parts=parts)


def _parse_call(item: dict[str, Any], path: str, *, custom: bool) -> ToolCall:
    call_id = req_str(item, "call_id", path)
    name = req_str(item, "name", path, non_empty=True)
    namespace = opt_str(item, "namespace", path)
    if namespace:
        name = f"{namespace}{NAMESPACE_SEP}{name}"
    if custom:
        arguments = custom_arguments(req_str(item, "input", path))
    else:
        arguments = req_str(item, "arguments", path)
    return ToolCall(id=call_id, name=name, arguments=arguments)


def parse_tools(raw: Any) -> list[Tool]:
    if raw is None:
        return []
    tools: list[Tool] = []
    for i, value in enumerate(expect_list(raw, "tools")):
        path = at("tools", i)
        spec = expect_dict(value, path)
        kind = spec.get("type")
        if kind in ("function", "custom"):
            tools.append(_parse_tool(spec, path, None))
        elif kind == "namespace":
            namespace = req_str(spec, "name", path, non_empty=True)
            for j, inner in enumerate(expect_list(spec.get("tools"), at(path, "tools"))):
                inner_path = at(at(path, "tools"), j)
                inner_spec = expect_dict(inner, inner_path)
                if inner_spec.get("type") in ("function", "custom"):
                    tools.append(_parse_tool(inner_spec, inner_path, namespace))
        elif not isinstance(kind, str):
            raise invalid(at(path, "type"), "is required")
        # Built-in tools (web_search, tool_search, local_shell, ...) are not offered to the policy.
    seen: set[str] = set()
    for tool in tools:
        if tool.name in seen:
            raise invalid("tools", f"duplicate tool name {tool.name!r}")
        seen.add(tool.name)
    return tools


def _parse_tool(spec: dict[str, Any], path: str, namespace: str | None) -> Tool:
    name = req_str(spec, "name", path, non_empty=True)
    description = opt_str(spec, "description", path) or ""
    custom = spec["type"] == "custom"
    if custom:
        description = _with_grammar(description, spec.get("format"))
        parameters = custom_input_schema("The raw input text (not JSON) for this tool.")
    else:
        parameters = opt_schema(spec, "parameters", path)
    if namespace:
        return Tool(
            name=f"{namespace}{NAMESPACE_SEP}{name}",
            description=description,
            parameters=parameters,
            kind=namespace_kind(namespace, custom),
        )
    return Tool(name=name, description=description, parameters=parameters, kind=spec["type"])


def _with_grammar(description: str, fmt: Any) -> str:
    if not isinstance(fmt, dict) or fmt.get("type") != "grammar":
        return description
    definition = fmt.get("definition")
    if not isinstance(definition, str) or not definition:
        return description
    if len(definition) > GRAMMAR_CHARS:
        definition = definition[:GRAMMAR_CHARS] + "\n... (grammar truncated)"
    syntax = fmt.get("syntax")
    label = f"{syntax} grammar" if isinstance(syntax, str) and syntax else "grammar"
    grammar = f"The input must follow this {label}:\n{definition}"
    return f"{description}\n\n{grammar}" if description else grammar


# --------------------------------------------------------------------------------------------
# Rendering
