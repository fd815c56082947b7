"""ChatML rendering, the tool-call parser, and the token-prefix property turns merge on."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge.types import Message, Tool, ToolCall
from serve.chat_template import (
    DEFAULT_SYSTEM,
    parse_tool_calls,
    render,
    render_assistant,
)
from serve.models import build_byte_tokenizer

SHELL = Tool(
    name="shell",
    description="Run a shell command.",
    parameters={"type": "object", "properties": {"command": {"type": "string"}}},
)
WRITE = Tool(
    name="write_file",
    description="Write a file.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    },
)


TOK = build_byte_tokenizer()


@pytest.fixture(scope="module")
def tok() -> Any:
    return TOK


def encode(tok: Any, text: str) -> list[int]:
    return tok(text, add_special_tokens=False).input_ids


def call(name: str, args: dict[str, Any], call_id: str = "c1") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=json.dumps(args))


# --- render -------------------------------------------------------------------------------------


def test_render_without_tools_is_plain_chatml() -> None:
    text = render([Message("user", "hi")], [])
    assert text == (
        f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert "# Tools" not in text
    assert "<tools>" not in text


def test_render_uses_the_callers_system_message() -> None:
    text = render([Message("system", "Be terse."), Message("user", "hi")], [])
    assert text.startswith("<|im_start|>system\nBe terse.<|im_end|>\n")
    assert DEFAULT_SYSTEM not in text
    assert text.count("<|im_start|>system") == 1


def test_render_without_generation_prompt_ends_after_last_turn() -> None:
    msgs = [Message("user", "hi"), Message("assistant", "hello")]
    text = render(msgs, [], add_generation_prompt=False)
    assert text.endswith("<|im_start|>assistant\nhello<|im_end|>\n")
    assert render(msgs, []) == text + "<|im_start|>assistant\n"


def test_render_with_tools_lists_them_as_json_in_the_system_turn() -> None:
    text = render([Message("system", "Be terse."), Message("user", "hi")], [SHELL, WRITE])
    system_turn, rest = text.split("<|im_end|>\n", 1)
    assert system_turn.startswith("<|im_start|>system\nBe terse.\n\n# Tools")
    listed = system_turn.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].split("\n")
    assert [json.loads(line) for line in listed] == [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            },
        }
        for t in (SHELL, WRITE)
    ]
    assert "<tools>" not in rest
    assert rest == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_render_assistant_calls_in_canonical_form() -> None:
    # Arguments sent back by a harness in any JSON spacing render in one canonical form.
    sloppy = ToolCall(id="x", name="shell", arguments='{ "command" :"ls",\n "n":1 }')
    msgs = [Message("user", "go"), Message("assistant", "Looking.", tool_calls=[sloppy])]
    text = render(msgs, [SHELL], add_generation_prompt=False)
    expected = (
        '<|im_start|>assistant\nLooking.\n<tool_call>\n{"name": "shell", "arguments": '
        '{"command": "ls", "n": 1}}\n</tool_call><|im_end|>\n'
    )
    assert text.endswith(expected)


def test_render_assistant_with_only_calls_has_no_leading_newline() -> None:
    body = render_assistant("", [call("shell", {"command": "pwd"})])
    assert body == '<tool_call>\n{"name": "shell", "arguments": {"command": "pwd"}}\n</tool_call>'


def test_consecutive_tool_results_share_one_user_turn() -> None:
    msgs = [
        Message("user", "go"),
        Message(
            "assistant",
            "",
            tool_calls=[call("shell", {"command": "a"}, "1"), call("shell", {"command": "b"}, "2")],
        ),
        Message("tool", "out-a", tool_call_id="1"),
        Message("tool", "out-b", tool_call_id="2"),
        Message("user", "thanks"),
        Message("assistant", "", tool_calls=[call("shell", {"command": "c"}, "3")]),
        Message("tool", "out-c", tool_call_id="3"),
    ]
    text = render(msgs, [SHELL])
    assert (
        "<|im_start|>user\n<tool_response>\nout-a\n</tool_response>\n"
        "<tool_response>\nout-b\n</tool_response><|im_end|>\n"
        "<|im_start|>user\nthanks<|im_end|>\n"
    ) in text
    assert text.endswith(
        "<|im_start|>user\n<tool_response>\nout-c\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert text.count("<|im_start|>user") == 4  # go, [a, b], thanks, [c]
    assert text.count("<tool_response>") == 3


def test_a_later_system_message_is_a_system_turn_in_place() -> None:
    msgs = [
        Message("system", "Be terse."),
        Message("user", "go"),
        Message("system", "<env>cwd: /w</env>"),
        Message("assistant", "", tool_calls=[call("shell", {"command": "ls"})]),
        Message("tool", "a.txt", tool_call_id="c1"),
        Message("system", "<env>cwd: /w/a</env>"),
    ]
    text = render(msgs, [SHELL])
    assert text.count("# Tools") == 1 and text.startswith("<|im_start|>system\nBe terse.\n\n")
    assert text.split("<|im_end|>\n", 1)[1] == (
        "<|im_start|>user\ngo<|im_end|>\n"
        "<|im_start|>system\n<env>cwd: /w</env><|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}'
        "\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\na.txt\n</tool_response><|im_end|>\n"
        "<|im_start|>system\n<env>cwd: /w/a</env><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_a_system_message_between_turns_keeps_the_token_prefix(tok: Any) -> None:
    prev = [Message("user", "Fix the build."), Message("system", "<env>turn 1</env>")]
    completion = render_assistant("On it.", [call("shell", {"command": "make"})])
    after = assert_turn_extends(tok, prev, [SHELL], completion, ["error: x"])
    after.append(Message("system", "<env>turn 2</env>"))
    assert_turn_extends(tok, after, [SHELL], render_assistant("Done.", []), ["thanks"])


# --- parse_tool_calls ---------------------------------------------------------------------------


def test_parse_one_call() -> None:
    text = '<tool_call>\n{"name": "shell", "arguments": {"command": "ls -la"}}\n</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == ""
    [c] = calls
    assert c.name == "shell"
    assert json.loads(c.arguments) == {"command": "ls -la"}
    assert c.id.startswith("call_")


def test_parse_two_calls_in_order_with_distinct_ids() -> None:
    text = (
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": {"y": [1, 2]}}</tool_call>'
    )
    content, calls = parse_tool_calls(text)
    assert content == ""
    assert [c.name for c in calls] == ["a", "b"]
    assert [json.loads(c.arguments) for c in calls] == [{"x": 1}, {"y": [1, 2]}]
    assert calls[0].id != calls[1].id


def test_parse_keeps_content_around_calls() -> None:
    text = (
        'I will list the files.\n<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}'
        "\n</tool_call>\nThen stop."
    )
    content, calls = parse_tool_calls(text)
    assert [c.name for c in calls] == ["shell"]
    assert content.startswith("I will list the files.")
    assert content.endswith("Then stop.")
    assert "<tool_call>" not in content


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>\n{not json}\n</tool_call>",
        '<tool_call>{"name": "shell", "arguments": {"command": "ls"}</tool_call>',  # one } short
        '<tool_call>{"arguments": {"command": "ls"}}</tool_call>',  # no name
        '<tool_call>{"name": "", "arguments": {}}</tool_call>',  # empty name
        '<tool_call>{"name": 3, "arguments": {}}</tool_call>',  # name not a string
        '<tool_call>["shell", {"command": "ls"}]</tool_call>',  # not an object
        '<tool_call>{"name": "shell", "arguments": [1, 2]}</tool_call>',  # arguments not an object
        '<tool_call>{"name": "shell", "arguments": "not json"}</tool_call>',
        '<tool_call>{"name": "shell", "arguments": "[1]"}</tool_call>',
        "Just an answer, no tools.",
        "Text with <tool_response>x</tool_response> but no call.",
    ],
)
def test_malformed_calls_stay_in_content_unchanged(text: str) -> None:
    content, calls = parse_tool_calls(text)
    assert calls == []
    assert content == text


def test_malformed_block_stays_while_a_good_one_parses() -> None:
    bad = "<tool_call>{oops}</tool_call>"
    good = '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>'
    content, calls = parse_tool_calls(f"{bad}\n{good}")
    assert [c.name for c in calls] == ["shell"]
    assert content == bad


def test_parse_arguments_given_as_a_json_string() -> None:
    inner = json.dumps({"command": "echo hi", "timeout": 5})
    text = "<tool_call>" + json.dumps({"name": "shell", "arguments": inner}) + "</tool_call>"
    _, [c] = parse_tool_calls(text)
    assert json.loads(c.arguments) == {"command": "echo hi", "timeout": 5}


def test_parse_parameters_alias_and_missing_arguments() -> None:
    _, [c] = parse_tool_calls('<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>')
    assert json.loads(c.arguments) == {"a": 1}
    _, [d] = parse_tool_calls('<tool_call>{"name": "g"}</tool_call>')
    assert json.loads(d.arguments) == {}


def test_parse_unclosed_final_tag() -> None:
    text = 'Running it.\n<tool_call>\n{"name": "shell", "arguments": {"command": "make"}}\n'
    content, [c] = parse_tool_calls(text)
    assert content == "Running it."
    assert c.name == "shell"
    assert json.loads(c.arguments) == {"command": "make"}


def test_parse_keeps_unicode_arguments_unescaped() -> None:
    text = '<tool_call>{"name": "say", "arguments": {"text": "héllo 😀"}}</tool_call>'
    _, [c] = parse_tool_calls(text)
    assert "héllo 😀" in c.arguments


# --- the token-prefix property ------------------------------------------------------------------


def assert_turn_extends(
    tok: Any,
    prev: list[Message],
    tools: list[Tool],
    completion: str,
    results: list[str],
) -> list[Message]:
    """Parse ``completion``, re-render with it and its results, check the token prefix, and
    return the new conversation."""
    content, calls = parse_tool_calls(completion) if tools else (completion, [])
    new = [*prev, Message("assistant", content, tool_calls=calls)]
    if calls:
        new += [Message("tool", r, tool_call_id=c.id) for c, r in zip(calls, results, strict=True)]
    else:
        new.append(Message("user", results[0]))
    before = encode(tok, render(prev, tools)) + encode(tok, completion) + [tok.eos_token_id]
    after = encode(tok, render(new, tools))
    assert after[: len(before)] == before
    assert len(after) > len(before)
    return new


CASES = [
    ("Let me look.", [("shell", {"command": "ls -la"})]),
    ("", [("shell", {"command": "cat a.txt | wc -l"})]),
    (
        "Two at once:",
        [
            ("shell", {"command": "pwd"}),
            ("write_file", {"path": "notes/ü.md", "content": "# Títle\n\n- a\n- b\n"}),
        ],
    ),
    ("", [("write_file", {"path": "x.json", "content": '{"k": [1, 2], "q": "\\""}'})]),
    ("The answer is 42.", []),
]


@pytest.mark.parametrize(("content", "specs"), CASES)
def test_completion_then_tool_result_extends_the_prompt_token_for_token(
    tok: Any, content: str, specs: list[tuple[str, dict[str, Any]]]
) -> None:
    calls = [call(n, a, f"c{i}") for i, (n, a) in enumerate(specs)]
    completion = render_assistant(content, calls)
    prev = [Message("system", "You are a coder."), Message("user", "Fix the build.")]
    results = [f"result {i}\nline two" for i in range(max(1, len(calls)))]
    after_first = assert_turn_extends(tok, prev, [SHELL, WRITE], completion, results)
    # A second turn on top of the first also extends it.
    follow = render_assistant("", [call("shell", {"command": "make test"})])
    assert_turn_extends(tok, after_first, [SHELL, WRITE], follow, ["ok"])


def test_plain_answer_without_tools_extends_the_prompt(tok: Any) -> None:
    prev = [Message("user", "What is 6 x 7?")]
    assert_turn_extends(tok, prev, [], "It is 42.", ["And 6 x 8?"])


_plain = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="<"), max_size=40
)
_value = st.one_of(_plain, st.integers(-(10**6), 10**6), st.booleans(), st.none())
_args = st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), _value, max_size=4)
_calls = st.lists(
    st.tuples(st.sampled_from(["shell", "write_file"]), _args), min_size=0, max_size=3
)


@settings(max_examples=60, deadline=None)
@given(
    content=_plain.filter(lambda s: s == s.strip()),
    specs=_calls,
    result=_plain,
)
def test_prefix_property_holds_for_generated_completions(
    content: str, specs: list[tuple[str, dict[str, Any]]], result: str
) -> None:
    tok = TOK
    calls = [call(n, a, f"c{i}") for i, (n, a) in enumerate(specs)]
    completion = render_assistant(content, calls)
    parsed_content, parsed = parse_tool_calls(completion)
    assert [(c.name, json.loads(c.arguments)) for c in parsed] == [(n, a) for n, a in specs]
    if calls:
        assert parsed_content == content
    prev = [Message("user", "do it")]
    assert_turn_extends(tok, prev, [SHELL, WRITE], completion, [result] * max(1, len(calls)))
