"""Structured output on each wire: the schema reaches the sampling parameters, and a malformed
request is a 400 naming its field."""

from __future__ import annotations

import pytest

from serve.protocol import anthropic, chat, responses
from serve.protocol.common import ProtocolError

SCHEMA = {"type": "object", "properties": {"done": {"type": "boolean"}}, "required": ["done"]}
USER = [{"role": "user", "content": "hi"}]


def _chat(**extra):
    return chat.parse_request({"model": "m", "messages": USER, **extra})[0].sampling.json_schema


def _responses(**extra):
    return responses.parse_request({"model": "m", "input": "hi", **extra})[0].sampling.json_schema


def _anthropic(**extra):
    body = {"model": "m", "max_tokens": 16, "messages": USER, **extra}
    return anthropic.parse_request(body)[0].sampling.json_schema


def test_each_wire_carries_its_schema() -> None:
    spec = {"name": "out", "schema": SCHEMA, "strict": True}
    assert _chat(response_format={"type": "json_schema", "json_schema": spec}) == SCHEMA
    assert _chat(response_format={"type": "json_object"}) == {"type": "object"}
    assert _chat(response_format={"type": "text"}) is None
    assert _chat() is None
    assert _responses(text={"format": {"type": "json_schema", **spec}}) == SCHEMA
    assert _responses(text={"format": {"type": "text"}}) is None
    assert _responses(text={}) is None
    assert _anthropic(output_format={"type": "json_schema", "schema": SCHEMA}) == SCHEMA
    assert _anthropic() is None


@pytest.mark.parametrize(
    "parse, extra, field",
    [
        (_chat, {"response_format": "json"}, "response_format"),
        (_chat, {"response_format": {"type": "yaml"}}, "response_format.type"),
        (_chat, {"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        (
            _chat,
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format.json_schema.schema",
        ),
        (  # a schema the grammar engine cannot follow
            _chat,
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 7}}}},
            "response_format.json_schema.schema",
        ),
        (_responses, {"text": {"format": {"type": "json_schema"}}}, "text.format.schema"),
        (_responses, {"text": {"format": []}}, "text.format"),
        (_anthropic, {"output_format": {"type": "json_object"}}, "output_format.type"),
        (_anthropic, {"output_format": {"type": "json_schema"}}, "output_format.schema"),
    ],
)
def test_a_malformed_format_is_refused_naming_its_field(parse, extra, field) -> None:
    with pytest.raises(ProtocolError) as info:
        parse(**extra)
    assert info.value.status == 400 and info.value.field == field, info.value
