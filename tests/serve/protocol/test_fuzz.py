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
from serve.protocol.body import MAX_JSON_DEPTH, parse_body
from serve.protocol.common import ProtocolError
from tests.serve.fuzzing import (
    FIELD_NAMES,
    SEEDS,
    fuzz_settings,
    json_values,
    keys,
    mutated,
    names_mutation,
    nested,
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


@st.composite
def raw_bodies(draw: st.DrawFn) -> bytes:
    """Bytes a client may send: JSON of any value, truncated or spliced JSON, hostile
    constants, deep nesting, other encodings, random bytes."""
    seed = json.dumps(draw(st.sampled_from([b for seeds in SEEDS.values() for b in seeds])))
    kind = draw(st.integers(0, 7))
    if kind == 0:
        value = draw(st.one_of(values, st.dictionaries(keys, values, max_size=5)))
        return json.dumps(value, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    if kind == 1:
        return seed.encode()[: draw(st.integers(0, len(seed)))]
    if kind == 2:
        hostile = ["NaN", "-Infinity", "1e999", "-1e400", '"\\ud800"', '"\\udc00x"', "1" * 5000]
        at = draw(st.integers(0, len(seed)))
        return (seed[:at] + draw(st.sampled_from(hostile)) + seed[at:]).encode()
    if kind == 3:
        depth = draw(st.sampled_from([MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, 500, 100_000]))
        inner = draw(st.sampled_from(["[", '{"a":']))
        close = "]" if inner == "[" else "}"
        body = '{"model":' + inner * depth + "1" + close * depth + "}"
        return body.encode()[: draw(st.sampled_from([None, len(body) // 2]))]
    if kind == 4:
        return seed.encode(draw(st.sampled_from(["utf-16", "utf-32", "latin-1", "utf-8-sig"])))
    if kind == 5:
        return draw(st.binary(max_size=64))
    if kind == 6:  # a key or value with a lone surrogate in raw (surrogatepass) UTF-8
        return seed.replace('"model"', '"mo\ud800del"').encode("utf-8", "surrogatepass")
    return json.dumps(draw(nested())).encode()


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
