"""Fuzzing the tool-call parser with malformed model text: it never raises, what is not a valid
call stays in the content as text and is counted in ``invalid``, and valid calls round-trip.

Budget: ``FORGE_FUZZ_EXAMPLES`` examples per test (see ``tests/serve/fuzzing.py``).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forge.types import ToolCall
from serve.chat_template import _CALL_RE, parse_completion, render_assistant
from serve.protocol.body import loads_strict
from tests.serve.fuzzing import fuzz_settings, json_values, texts

FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<tool_call>\n",
    "\n</tool_call>",
    "<tool_",
    "{",
    "}",
    "[",
    "]",
    '"name"',
    '"arguments"',
    '"parameters"',
    ":",
    ",",
    '"shell"',
    '""',
    "null",
    "NaN",
    "-Infinity",
    "1e999",
    '"\\ud800"',
    '"\\udfff\\ud800"',
    "1" * 5000,
    "[" * 3000,
    "{" * 20,
    '{"name": "shell", "arguments": {"command": "ls"}}',
    '{"name": "shell", "arguments": "{\\"command\\": \\"ls\\"}"}',
    '{"name": "", "arguments": {}}',
    '{"name": 5}',
    '{"name": "x", "arguments": [1]}',
    '{"name": "x", "arguments": "not json"}',
    '{"name": "x", "arguments": {"a": NaN}}',
    '{"name": "x", "arguments": {"a": "\\ud800"}}',
    "\n",
    "  ",
    "<|im_end|>",
    "\ufffd",
]


@st.composite
def model_texts(draw: st.DrawFn) -> str:
    """Text a model may write: tags, JSON pieces and junk in any order."""
    parts = draw(
        st.lists(
            st.one_of(
                st.sampled_from(FRAGMENTS),
                texts,
                json_values().map(lambda v: json.dumps(v, ensure_ascii=False)),
            ),
            max_size=14,
        )
    )
    return "".join(parts)


def check(text: str) -> Any:
    parsed = parse_completion(text)  # never raises
    matches = list(_CALL_RE.finditer(text))
    assert len(parsed.calls) + parsed.invalid == len(matches)
    assert (len(matches) > 0) == ("<tool_call>" in text)
    if not parsed.calls:
        assert parsed.content == text  # nothing taken: all of it stays text
    for call in parsed.calls:
        assert isinstance(call.name, str) and call.name
        args = loads_strict(call.arguments)  # strict JSON, an object, writable as UTF-8
        assert isinstance(args, dict)
        (call.name + call.arguments).encode("utf-8")
    for m in matches:  # a block that is not a call stays in the content as text
        if not _is_call(m.group(1)):
            assert m.group(0).strip() in parsed.content
    return parsed


def _is_call(body: str) -> bool:
    return bool(parse_completion(f"<tool_call>{body}</tool_call>").calls)


@fuzz_settings()
@given(text=model_texts())
def test_malformed_model_text_never_raises_and_stays_text(text: str) -> None:
    check(text)


@fuzz_settings()
@given(text=st.text(st.characters(exclude_categories=[]), max_size=200))
def test_any_text_never_raises(text: str) -> None:
    check(text)


names = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="<"), min_size=1, max_size=12
)
arguments = st.dictionaries(
    st.text(max_size=6), json_values(max_leaves=6).filter(lambda v: _finite(v)), max_size=4
)
junk_bodies = st.one_of(
    st.sampled_from(FRAGMENTS[5:]).filter(lambda f: "tool_call>" not in f and not _is_call(f)),
    st.text(max_size=20).filter(lambda t: "tool_call>" not in t and not _is_call(t)),
)


def _finite(value: Any) -> bool:
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        return False
    return "</tool_call>" not in text


@fuzz_settings()
@given(
    content=st.text(max_size=40).filter(lambda t: "<tool_call>" not in t),
    calls=st.lists(st.tuples(names, arguments), max_size=4),
    junk=st.lists(junk_bodies, max_size=3),
)
def test_valid_calls_parse_and_each_malformed_block_is_counted(
    content: str, calls: list[tuple[str, dict[str, Any]]], junk: list[str]
) -> None:
    tool_calls = [ToolCall(f"c{i}", n, json.dumps(a)) for i, (n, a) in enumerate(calls)]
    text = render_assistant(content, tool_calls)
    text += "".join(f"\n<tool_call>\n{j}\n</tool_call>" for j in junk)
    parsed = check(text)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == calls
    assert parsed.invalid == len(junk)
    if calls:
        assert parsed.content.startswith(content.strip())
