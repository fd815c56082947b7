"""Fuzzing the request parsers: whatever a client sends, a parser returns a request or raises a
400 ProtocolError whose message starts with the field at fault, never anything else.

Budget: ``FORGE_FUZZ_EXAMPLES`` examples per test (see ``tests/serve/fuzzing.py``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from serve.chat_template import render
from serve.protocol import anthropic, chat, responses
from serve.protocol.body import parse_body
from serve.protocol.common import ProtocolError
from tests.serve.fuzzing import (
    FIELD_NAMES,
    SEEDS,
    fuzz_settings,
    json_values,
    keys,
    mutated,
    names_mutation,
    raw_bodies,
    values,
)

PARSERS = {"chat": chat, "responses": responses, "anthropic": anthropic}


def check_parse(protocol: str, body: dict[str, Any], fuzzing: bool = True) -> ProtocolError | None:
    """Parse ``body``; a refusal must be a 400 naming its field. Returns the refusal."""
    try:
        request, opts = PARSERS[protocol].parse_request(body)
    except ProtocolError as err:
        assert err.status == 400, err.message
        assert err.field, err.message
        assert err.message.startswith(f"{err.field}: "), err.message
        if fuzzing:
            event("refused")
        return err
    if fuzzing:
        event("accepted")
    assert opts.protocol == protocol and request.model == body["model"]
    render(request.messages, request.tools)  # whatever parsed, the template can render
    return None


def test_seed_bodies_parse() -> None:
    for protocol, seeds in SEEDS.items():
        for body in seeds:
            assert check_parse(protocol, body, fuzzing=False) is None


@pytest.mark.parametrize("protocol", list(PARSERS))
@fuzz_settings()
@given(data=st.data())
def test_one_changed_field_is_accepted_or_named(protocol: str, data: st.DataObject) -> None:
    body, path = data.draw(mutated(protocol))
    err = check_parse(protocol, body)
    if err is not None:
        assert names_mutation(err.field, path), (err.message, path)


@st.composite
def loose_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """Objects made of the protocols' field names with values of any type."""
    body = draw(st.dictionaries(st.sampled_from(FIELD_NAMES), values, max_size=8))
    if draw(st.booleans()):
        body["model"] = "tiny"
    return body


@pytest.mark.parametrize("protocol", list(PARSERS))
@fuzz_settings()
@given(body=st.one_of(loose_bodies(), st.dictionaries(keys, json_values(), max_size=6)))
def test_any_object_is_accepted_or_named(protocol: str, body: dict[str, Any]) -> None:
    check_parse(protocol, body)


# --- the body itself: bytes -> one JSON object ------------------------------------------------


def safe_to_echo(body: dict[str, Any]) -> None:
    """What every later step does with a body: write it back as strict UTF-8 JSON."""
    json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")


@fuzz_settings()
@given(raw=raw_bodies())
def test_any_bytes_are_one_safe_object_or_a_400_naming_the_field(raw: bytes) -> None:
    try:
        body = parse_body(raw)
    except ProtocolError as err:
        assert err.status == 400 and err.field, err.message
        assert err.message.startswith(f"{err.field}: "), err.message
        err.message.encode("utf-8")  # the error itself can be written back
        return
    assert isinstance(body, dict)
    safe_to_echo(body)


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        (b"", "body", "is empty"),
        (b"[1]", "body", "got an array"),
        (b'{"a": NaN}', "body", "NaN is not valid JSON"),
        (b'{"a": 1e999}', "body", "out of range"),
        (b'{"a": "\\ud800"}', "a", "lone surrogate"),
        (b'{"m": [{"k\\udc00": 1}]}', "m[0].k\\udc00", "lone surrogate"),
        (b"\xff\xfe{", "body", "not valid UTF-8"),
        (b'{"a":' + b"[" * 100_000, "body", "nested too deeply"),
        (b'{"a":' + b"[" * 200 + b"]" * 200 + b"}", "a" + "[0]" * 127, "levels deep"),
    ],
)
def test_body_refusals_name_the_field(raw: bytes, field: str, words: str) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_body(raw)
    assert info.value.status == 400 and info.value.field == field
    assert info.value.message.startswith(f"{field}: ") and words in info.value.message
