"""ChatML rendering with Hermes-style tools, and the parser for the model's tool calls.

Every built-in model speaks ChatML (``<|im_start|>role ... <|im_end|>``); tools are described in
the system turn and called as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, the
format Qwen and Hermes models use. An assistant message from history is rendered exactly as the
model wrote it (content, then one block per call with compact canonical JSON), so the next
prompt extends the previous prompt plus completion token for token whenever the harness sends
the history back unchanged (DESIGN.md decision 3). An image in a message renders where it
stands as ``<|vision_start|><|image_pad|><|vision_end|>`` (Qwen2-VL's form); a vision model's
Policy expands the pad to the image's token count (:mod:`serve.vision`).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from forge.types import Message, TextPart, Tool, ToolCall

TOOLS_PREAMBLE = (
    "\n\n# Tools\n\nYou can call functions to help with the task. Their signatures are listed "
    "inside <tools></tools>:\n<tools>\n{tools}\n</tools>\n\n"
    "To call a function, answer with one JSON object per call, each inside "
    "<tool_call></tool_call> tags:\n"
    '<tool_call>\n{{"name": "<function name>", "arguments": {{<arguments as a JSON object>}}}}'
    "\n</tool_call>"
)
DEFAULT_SYSTEM = "You are a helpful assistant."
# An image in a prompt, where it stands (Qwen2-VL's form); the Policy of a vision model expands
# the pad token to as many as the image processor gives that image.
IMAGE_PAD = "<|image_pad|>"
VISION_TOKENS = ["<|vision_start|>", IMAGE_PAD, "<|vision_end|>"]
IMAGE_PLACEHOLDER = "".join(VISION_TOKENS)
_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def tool_json(tool: Tool) -> str:
    spec = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
    return json.dumps({"type": "function", "function": spec}, ensure_ascii=False)


def call_json(call: ToolCall) -> str:
    """Canonical text of one call, as the template renders it and the scripted engine emits it."""
    try:
        args: Any = json.loads(call.arguments) if call.arguments else {}
    except json.JSONDecodeError:
        args = call.arguments
    return json.dumps({"name": call.name, "arguments": args}, ensure_ascii=False)


def render_assistant(content: str, tool_calls: list[ToolCall]) -> str:
    parts = [content] if content else []
    parts += [f"<tool_call>\n{call_json(c)}\n</tool_call>" for c in tool_calls]
    return "\n".join(parts)


def message_text(m: Message) -> str:
    """A user, system or tool message's body: its text, with each image's placeholder where
    the image stands (text parts joined with newlines, as ``content`` joins them)."""
    if not m.parts:
        return m.content
    out: list[str] = []
    after_text = False
    for part in m.parts:
        if isinstance(part, TextPart):
            out.append(("\n" if after_text else "") + part.text)
            after_text = True
        else:
            out.append(IMAGE_PLACEHOLDER)
            after_text = False
    return "".join(out)


def render(messages: list[Message], tools: list[Tool], add_generation_prompt: bool = True) -> str:
    """The prompt text for ``messages`` and ``tools``; tokenize it with special tokens parsed.

    A leading system message is the system turn (the tools are listed in it); a later one is a
    system turn where it stands (an agent's environment block in mid-conversation), rendered
    like a user turn, so the history around it stays a token prefix of the next prompt.
    """
    msgs = list(messages)
    system = DEFAULT_SYSTEM
    if msgs and msgs[0].role == "system":
        system = message_text(msgs.pop(0))
    if tools:
        system += TOOLS_PREAMBLE.format(tools="\n".join(tool_json(t) for t in tools))
    out = [f"<|im_start|>system\n{system}<|im_end|>\n"]
    i = 0
    while i < len(msgs):
        m = msgs[i]
        if m.role == "tool":
            # Consecutive tool results share one user turn, as in Qwen's template.
            blocks = []
            while i < len(msgs) and msgs[i].role == "tool":
                blocks.append(f"<tool_response>\n{message_text(msgs[i])}\n</tool_response>")
                i += 1
            out.append("<|im_start|>user\n" + "\n".join(blocks) + "<|im_end|>\n")
            continue
        body = (
            render_assistant(m.content, m.tool_calls) if m.role == "assistant" else message_text(m)
        )
        out.append(f"<|im_start|>{m.role}\n{body}<|im_end|>\n")
        i += 1
    if add_generation_prompt:
        out.append("<|im_start|>assistant\n")
    return "".join(out)


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


@dataclass
class ParsedText:
    """A completion's text split into content and tool calls. ``invalid`` counts the
    ``<tool_call>`` blocks that did not parse as a call: they stay in ``content`` as text."""

    content: str
    calls: list[ToolCall]
    invalid: int


def parse_completion(text: str) -> ParsedText:
    """Split a completion into plain content and tool calls; never raises.

    A block becomes a call only when it holds a strict JSON object (no NaN, nesting bounded)
    with a non-empty string ``name`` and an object (or JSON-object string) ``arguments``, all
    of it valid Unicode; anything else stays in the content untouched and is counted.
    """
    calls: list[ToolCall] = []
    kept: list[str] = []
    pos = invalid = 0
    for match in _CALL_RE.finditer(text):
        call = _parse_one(match.group(1))
        if call is None:
            invalid += 1
            continue
        kept.append(text[pos : match.start()])
        pos = match.end()
        calls.append(call)
    kept.append(text[pos:])
    content = "".join(kept).strip() if calls else text
    return ParsedText(content, calls, invalid)


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """``(content, calls)`` of :func:`parse_completion`."""
    parsed = parse_completion(text)
    return parsed.content, parsed.calls


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _strict_json(text: str) -> Any:
    """``text`` as strict JSON, or None when it is not (NaN and Infinity included)."""
    try:
        return json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError):  # also ints past Python's digit limit
        return None


def _parse_one(body: str) -> ToolCall | None:
    obj = _strict_json(body)
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        args = _strict_json(args)
    if not isinstance(args, dict):
        return None
    try:
        arguments = json.dumps(args, ensure_ascii=False)
        (obj["name"] + arguments).encode("utf-8")  # no lone surrogates from \ud800 escapes
    except (ValueError, RecursionError):
        return None
    return ToolCall(id=new_call_id(), name=obj["name"], arguments=arguments)


# -- a checkpoint's own template ---------------------------------------------------------------

# A compact template for small byte-level students (``tiny-claw``; the recipe's student): each
# tool as ``name: arg,...`` in the system turn (the ChatML above spends ~580 tokens, 70% of a
# tiny episode, on the JSON schemas), tool results as ``<tool_response>`` blocks, assistant
# turns as the model wrote them (its ``<tool_call>`` blocks) so that the history stays a token
# prefix of the next prompt. Hugging Face renders with trim_blocks: a newline after a tag is a
# string.
COMPACT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t.function.name }}: "
    "{{ t.function.parameters.properties | list | join(',') }}{{ '\\n' }}{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n"
    "{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def own_template(tokenizer: Any) -> str | None:
    """The Jinja chat template ``tokenizer`` ships with (a Hugging Face checkpoint's own), if
    any; the built-in models have none and speak the ChatML of :func:`render`."""
    template = getattr(tokenizer, "chat_template", None)
    return template if isinstance(template, str) and template.strip() else None


def _hf_messages(messages: list[Message], takes_calls: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "assistant" and m.tool_calls and takes_calls:
            calls = []
            for c in m.tool_calls:
                try:
                    args: Any = json.loads(c.arguments) if c.arguments else {}
                except json.JSONDecodeError:
                    args = c.arguments
                calls.append(
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": args},
                    }
                )
            out.append({"role": "assistant", "content": m.content, "tool_calls": calls})
        elif m.role == "assistant":
            # a template that renders no calls gets them as the text the model wrote
            out.append({"role": "assistant", "content": render_assistant(m.content, m.tool_calls)})
        elif m.role == "tool":
            tool: dict[str, Any] = {"role": "tool", "content": message_text(m)}
            if m.tool_call_id:
                tool["tool_call_id"] = m.tool_call_id
            if m.name:
                tool["name"] = m.name
            out.append(tool)
        else:
            out.append({"role": m.role, "content": message_text(m)})
    return out


def render_with(
    tokenizer: Any, messages: list[Message], tools: list[Tool], add_generation_prompt: bool = True
) -> str:
    """The prompt text of ``messages`` and ``tools`` for the model of ``tokenizer``: its own
    chat template through transformers' ``apply_chat_template`` (with the tools, where the
    template takes them), else :func:`render`. A template that takes no tools gets them listed
    in the system message as :func:`render` lists them; one that renders no tool calls gets
    each assistant turn as the text the model wrote (its calls in ``<tool_call>`` blocks), so
    the history stays what was sampled. A conversation with images is rendered by
    :func:`render` (its image placeholders are what the vision Policy expands)."""
    template = own_template(tokenizer)
    if template is None or any(m.images for m in messages):
        return render(messages, tools, add_generation_prompt)
    hf = _hf_messages(messages, takes_calls="tool_calls" in template)
    takes_tools = "tools" in template.replace("tool_calls", "")
    if tools and not takes_tools:
        listed = TOOLS_PREAMBLE.format(tools="\n".join(tool_json(t) for t in tools))
        if hf and hf[0]["role"] == "system":
            hf[0] = {**hf[0], "content": hf[0]["content"] + listed}
        else:
            hf.insert(0, {"role": "system", "content": DEFAULT_SYSTEM + listed})
    specs = [json.loads(tool_json(t)) for t in tools] if tools and takes_tools else None
    return tokenizer.apply_chat_template(
        hf, tools=specs, tokenize=False, add_generation_prompt=add_generation_prompt
    )
