"""The command harness's ``answer`` option: every source and reading, and its errors."""

from __future__ import annotations

import json

import pytest

from forge.harnesses.command_answer import AnswerSpec, parse_path

EVENTS = [
    {"type": "message", "part": {"type": "text", "text": "first"}},
    {"type": "message", "part": {"type": "text", "text": "final"}, "usage": {"in": 3}},
    {"type": "tool", "part": {"type": "call", "text": "ls -la"}},
    {"type": "message", "part": {"type": "reasoning"}},  # no text: not a match
    {"type": "status", "done": True},
]


def read(option: dict, text: str) -> str | None:
    return AnswerSpec(option).read(text)


def test_json_path_on_json_lines_takes_the_last_record_matching_where() -> None:
    out = "starting agent\n" + "\n".join(json.dumps(e) for e in EVENTS) + "\nbye\n"
    assert read({"json_path": "part.text", "where": {"type": "message"}}, out) == "final"
    # without where the last record that has the path wins, whatever its type
    assert read({"json_path": "part.text"}, out) == "ls -la"
    # where keys may be paths too
    assert read({"json_path": "part.text", "where": {"part.type": "call"}}, out) == "ls -la"
    assert read({"json_path": "part.text", "where": {"type": "nope"}}, out) is None
    # a value that is not a string comes back as JSON text
    assert read({"json_path": "usage"}, out) == '{"in": 3}'
    assert read({"json_path": "done", "where": {"type": "status"}}, out) == "true"


def test_integer_steps_index_lists_from_either_end() -> None:
    record = {"content": [{"text": "a"}, {"text": "b"}, {"text": "c"}], "map": {"0": "zero"}}
    out = json.dumps(record) + "\n"
    assert read({"json_path": "content.0.text"}, out) == "a"
    assert read({"json_path": "content[1].text"}, out) == "b"
    assert read({"json_path": "content.-1.text"}, out) == "c"
    assert read({"json_path": "content[-1].text"}, out) == "c"
    assert read({"json_path": "content.3.text"}, out) is None  # out of range
    assert read({"json_path": "map.0"}, out) == "zero"  # a digit key of an object is a key
    assert read({"json_path": "map[0]"}, out) is None  # brackets index lists only
    assert parse_path("a.b[0].-1[2]") == ("a", "b", 0, "-1", 2)


def test_a_json_document_on_stdout_pretty_printed_or_not() -> None:
    pretty = json.dumps(EVENTS, indent=2)  # one array over many lines: a list of events
    assert len(pretty.splitlines()) > 10
    option = {"json_path": "part.text", "where": {"type": "message"}}
    assert read(option, pretty) == "final"
    assert read({"json_path": "-1.done"}, json.dumps([EVENTS])) == "true"  # the array's elements
    document = json.dumps({"result": {"messages": EVENTS}}, indent=1)
    assert read({"json_path": "result.messages[1].part.text"}, document) == "final"
    assert read({"json_path": "result.messages.-1.type"}, document) == "status"
    # a JSON line that is an array gives its elements as records
    assert read({"json_path": "part.text"}, "log\n" + json.dumps(EVENTS[:2]) + "\n") == "final"


def test_json_null_counts_as_absent() -> None:
    out = '{"answer": "yes"}\n{"answer": null}\n'
    assert read({"json_path": "answer"}, out) == "yes"
    assert read({"json_field": "answer"}, out) == "yes"


def test_json_field_and_last_line_as_before() -> None:
    out = 'log line\n{"final_answer": "42", "turns": 2}\n{"other": 1}\n\n'
    assert read({"json_field": "final_answer"}, out) == "42"
    assert read({"json_field": "final_answer"}, "no json") is None
    assert read(None, out) == '{"other": 1}'
    assert read({"last_line": True}, "") is None


def test_file_source_reads_the_text_given() -> None:
    spec = AnswerSpec({"file": "out/answer.txt"})
    assert spec.file == "out/answer.txt"
    assert spec.read("\n  Paris \n\n") == "Paris"
    assert spec.read("") is None and spec.read(None) is None  # empty, or no file at all
    nested = AnswerSpec({"file": "{home}/result.json", "json_path": "output[-1].text"})
    assert nested.read(json.dumps({"output": [{"text": "x"}, {"text": "y"}]}, indent=2)) == "y"
    assert AnswerSpec({"file": "{workspace}/log", "last_line": True}).read("a\nb\n") == "b"


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"jsonpath": "a"}, "answer: unknown key 'jsonpath'"),
        ({"json_field": "a", "last_line": True}, "answer: give one of"),
        ({"json_path": "a", "json_field": "b"}, "answer: give one of"),
        ({}, "answer: give json_field, json_path, last_line or file"),
        ({"json_path": "a..b"}, "answer: json_path: 'a..b'"),
        ({"json_path": ""}, "answer: json_path"),
        ({"json_path": 3}, "answer: json_path"),
        ({"json_path": "a", "where": ["type"]}, "answer: where: a mapping"),
        ({"json_field": "a", "where": {"t": 1}}, "answer: where: goes with json_path"),
        ({"json_path": "a", "where": {"b.": 1}}, "answer: where: b."),
        ({"last_line": False}, "answer: last_line: only true"),
        ({"json_field": ""}, "answer: json_field"),
        ({"file": "/etc/passwd"}, "answer: file: '/etc/passwd' is not under"),
        ({"file": "../outside"}, "answer: file: '../outside' is not under"),
        ({"file": "{home}"}, "answer: file: '{home}' is not under"),
        ({"file": ""}, "answer: file"),
        ("final_answer", "answer: a mapping"),
    ],
)
def test_bad_answer_options_name_answer_and_the_key(option: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        AnswerSpec(option)  # type: ignore[arg-type]
    assert message in str(info.value)
