"""Fuzzing the HTTP routes (``serve/http_app.py``) end to end: the ``forge serve`` app over a real
Policy in process, with the scripted engine playing the model (it calls the tools offered) and a
context limit of 4096 tokens. Whatever the body, content type or header, the answer is never a
5xx: a success is complete JSON or a stream that ends properly, a refusal is a 4xx in the
protocol's error format whose message starts with the field at fault.

Budget: ``FORGE_FUZZ_EXAMPLES`` examples per test (see ``tests/serve/fuzzing.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from serve.policy import LocalHandle, Policy
from serve.protocol.body import loads_strict
from serve.server import make_app
from tests.serve.fuzzing import (
    FIELD_NAMES,
    ROUTES,
    fuzz_settings,
    json_values,
    message_field,
    mutated,
    raw_bodies,
    values,
)

SCRIPT = {"steps": ["echo hi > a.txt", {"path": "b.txt", "content": "x"}], "answer": "done"}
STREAM_END = {
    "chat": "data: [DONE]\n\n",
    "responses": "event: response.completed\n",
    "anthropic": "event: message_stop\n",
}
CONTENT_TYPES = [
    None,
    "application/json",
    "application/json; charset=utf-8",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=xyz",
    "application/json; charset=latin-1",
    "\u00e9/\u00e9",
]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    policy = Policy({"engine": {"name": "scripted", "model": "tiny"}, "batch_wait_ms": 0})
    policy.engine.max_context = 4096  # a model's context: long prompts are refused, or clamped
    app = make_app(LocalHandle(policy), "tiny", script=SCRIPT, max_body_bytes=1 << 20)
    with TestClient(app, raise_server_exceptions=True) as c:
        yield c


def check_answer(protocol: str, status: int, headers: Any, text: str) -> None:
    assert status < 500, text[:2000]
    event(f"{protocol} {status}")
    if status >= 400:
        if status == 405:
            return  # Starlette's own answer to a method the route does not take
        body = json.loads(text)
        if protocol == "anthropic":
            assert body["type"] == "error" and body["error"]["type"]
            message = body["error"]["message"]
        else:
            message = body["error"]["message"]
        field = message_field(message)
        assert field, message
        if protocol != "anthropic":
            assert body["error"]["param"] == field, (body, field)
        return
    assert status == 200
    if headers["content-type"].startswith("text/event-stream"):
        assert text.endswith(STREAM_END[protocol]) or STREAM_END[protocol] in text, text[-500:]
        for line in text.split("\n"):  # what SSE calls a line; data is one line of JSON
            assert "\r" not in line and "\u2028" not in line and "\x85" not in line, line
            if line.startswith("data: ") and line != "data: [DONE]":
                loads_strict(line[len("data: ") :])
        return
    body = loads_strict(text)
    key = {"chat": "choices", "responses": "output", "anthropic": "content"}[protocol]
    assert key in body, body


def post(
    client: TestClient,
    protocol: str,
    content: bytes,
    content_type: str | None,
    extra: dict[str, str] | None = None,
) -> None:
    named = {"content-type": content_type} if content_type else {}
    named.update(extra or {})
    headers = {k: v.encode("latin-1") for k, v in named.items()}  # any byte a header may hold
    r = client.post(ROUTES[protocol], content=content, headers=headers)
    check_answer(protocol, r.status_code, r.headers, r.text)


protocols = st.sampled_from(list(ROUTES))
content_types = st.sampled_from(CONTENT_TYPES)


@fuzz_settings()
@given(data=st.data(), protocol=protocols, content_type=content_types)
def test_one_changed_field_over_http(
    client: TestClient, data: st.DataObject, protocol: str, content_type: str | None
) -> None:
    body, _ = data.draw(mutated(protocol))
    raw = json.dumps(body, ensure_ascii=data.draw(st.booleans()))
    post(client, protocol, raw.encode("utf-8", "surrogatepass"), content_type)


@fuzz_settings()
@given(
    body=st.one_of(
        st.dictionaries(st.sampled_from(FIELD_NAMES), values, max_size=8).map(
            lambda d: {**d, "model": "tiny"}
        ),
        json_values(),
    ),
    protocol=protocols,
    content_type=content_types,
)
def test_any_json_over_http(
    client: TestClient, body: Any, protocol: str, content_type: str | None
) -> None:
    raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    post(client, protocol, raw, content_type)


@fuzz_settings()
@given(
    raw=raw_bodies(),
    protocol=protocols,
    content_type=content_types,
    length=st.sampled_from([None, None, None, "abc", "-1", "99999999999", "0", " 12 "]),
)
def test_any_bytes_over_http(
    client: TestClient, raw: bytes, protocol: str, content_type: str | None, length: str | None
) -> None:
    extra = {"content-length": length} if length is not None else None
    post(client, protocol, raw, content_type, extra)


def test_models_and_wrong_methods_are_never_5xx(client: TestClient) -> None:
    for protocol, route in ROUTES.items():
        r = client.get(route)
        assert r.status_code == 405
        r = client.put(route, content=b"{}")
        assert r.status_code == 405, protocol
    r = client.get("/v1/models", headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == 200 and r.json()["data"][0]["id"] == "tiny"
