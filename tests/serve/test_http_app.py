"""The shared HTTP app: routing under a prefix, auth, body limits, error formats, failures."""

from __future__ import annotations

import asyncio

import anthropic
import openai
import pytest
from starlette.requests import Request

from serve.http_app import request_api_key
from serve.protocol.common import ProtocolError
from serve.protocol.models import ModelCard

PREFIX = "/episodes/{episode_id}/attempts/{attempt:int}"
CHAT = {"model": "policy", "messages": [{"role": "user", "content": "hi"}]}
AUTH = {"Authorization": "Bearer k"}


def _post(app, kit, path, body=None, headers=AUTH, content=None):
    async def run():
        async with kit.http_client(app) as client:
            if content is not None:
                return await client.post(path, content=content, headers=headers)
            return await client.post(path, json=body, headers=headers)

    return asyncio.run(run())


def test_prefixed_routes_reach_backend_with_path_params(kit):
    backend = kit.FakeBackend()
    app = kit.make_app(backend, prefix=PREFIX)

    async def run():
        oa = kit.openai_client(app, prefix="/episodes/ep-1/attempts/2")
        out = await oa.chat.completions.create(**CHAT)
        resp = await oa.responses.create(model="policy", input="hi")
        an = kit.anthropic_client(app, prefix="/episodes/ep-1/attempts/2")
        msg = await an.messages.create(**CHAT, max_tokens=20)
        models = await oa.models.list()
        an_models = await an.models.list()
        return out, resp, msg, models, an_models

    out, resp, msg, models, an_models = asyncio.run(run())
    assert out.choices[0].message.content == kit.LONG_TEXT
    assert resp.output_text == kit.LONG_TEXT
    assert msg.content[0].text == kit.LONG_TEXT
    assert [m.id for m in models.data] == ["policy"]
    assert [m.id for m in an_models.data] == ["policy"]
    assert [ctx for ctx, *_ in backend.calls] == [{"episode_id": "ep-1", "attempt": 2}] * 3
    assert [opts.protocol for _, _, opts, _ in backend.calls] == ["chat", "responses", "anthropic"]
    assert backend.calls[0][3] == CHAT  # the raw body reaches the backend too


def test_malformed_json_is_400(kit):
    r = _post(kit.make_app(kit.FakeBackend()), kit, "/v1/chat/completions", content=b"{nope")
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["message"].startswith("body: is not valid JSON: ")
    assert err["param"] == "body"
    assert err["type"] == "invalid_request_error" and err["code"] is None


def test_non_object_and_empty_bodies_are_400(kit):
    app = kit.make_app(kit.FakeBackend())
    assert _post(app, kit, "/v1/chat/completions", body=[1, 2]).status_code == 400
    r = _post(app, kit, "/v1/messages", content=b"")
    assert r.status_code == 400 and r.json()["type"] == "error"


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model", "model: is required"),
        ({**CHAT, "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "robot"),
        ({**CHAT, "n": 2}, "n", "only n=1"),
    ],
)
def test_bad_chat_requests_are_400_naming_the_param(kit, body, param, words):
    backend = kit.FakeBackend()
    r = _post(kit.make_app(backend), kit, "/v1/chat/completions", body=body)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"]
    assert backend.calls == []


def test_sdk_raises_bad_request_with_message(kit):
    client = kit.openai_client(kit.make_app(kit.FakeBackend()))

    async def run():
        await client.chat.completions.create(model="policy", messages=CHAT["messages"], n=2)

    with pytest.raises(openai.BadRequestError) as info:
        asyncio.run(run())
    assert "only n=1 is supported" in str(info.value)


def test_oversize_body_is_413(kit):
    app = kit.make_app(kit.FakeBackend(), max_body_bytes=1000)
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
    r = _post(app, kit, "/v1/chat/completions", body=big)
    assert r.status_code == 413
    assert "1000 bytes" in r.json()["error"]["message"]

    async def chunks():  # no Content-Length: the bound applies while reading
        for _ in range(10):
            yield b" " * 500

    r = _post(app, kit, "/v1/messages", content=chunks())
    assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"
    assert _post(app, kit, "/v1/chat/completions", body=CHAT).status_code == 200


def test_unauthorised_is_401_not_400(kit):
    backend = kit.FakeBackend()
    app = kit.make_app(backend)
    r = _post(app, kit, "/v1/chat/completions", content=b"{bad json", headers={})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    r = _post(app, kit, "/v1/messages", body={}, headers={"x-api-key": "wrong"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert r.json()["type"] == "error"

    async def run():
        await kit.openai_client(app, key="wrong").responses.create(model="policy", input="x")

    with pytest.raises(openai.AuthenticationError):
        asyncio.run(run())

    async def run_anthropic():
        await kit.anthropic_client(app, key="wrong").messages.create(**CHAT, max_tokens=5)

    with pytest.raises(anthropic.AuthenticationError):
        asyncio.run(run_anthropic())
    assert backend.calls == []
    # x-api-key is accepted on every route
    r = _post(app, kit, "/v1/chat/completions", body=CHAT, headers={"x-api-key": "k"})
    assert r.status_code == 200


def test_backend_crash_is_500_and_server_keeps_serving(kit):
    backend = kit.FakeBackend(fail=RuntimeError("engine exploded"))
    app = kit.make_app(backend)
    r = _post(app, kit, "/v1/responses", body={"model": "policy", "input": "x", "stream": True})
    assert r.status_code == 500
    assert "engine exploded" in r.json()["error"]["message"]
    backend.fail = None
    r = _post(app, kit, "/v1/responses", body={"model": "policy", "input": "x", "stream": True})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.text.rstrip().splitlines()[-2] == "event: response.completed"


def test_503_carries_retry_after(kit):
    backend = kit.FakeBackend(fail=ProtocolError(503, "swapping weights", retry_after=2.4))
    app = kit.make_app(backend)
    r = _post(app, kit, "/v1/messages", body={**CHAT, "max_tokens": 5})
    assert r.status_code == 503 and r.headers["retry-after"] == "2"
    assert r.json()["error"] == {"type": "overloaded_error", "message": "swapping weights"}
    r = _post(app, kit, "/v1/chat/completions", body=CHAT)
    assert r.status_code == 503 and r.headers["retry-after"] == "2"


def test_streams_end_properly_over_http(kit):
    app = kit.make_app(kit.FakeBackend())
    r = _post(app, kit, "/v1/chat/completions", body={**CHAT, "stream": True})
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    r = _post(app, kit, "/v1/messages", body={**CHAT, "max_tokens": 9, "stream": True})
    assert r.text.rstrip().endswith('data: {"type":"message_stop"}')


def test_models_requires_auth_and_uses_caller_error_format(kit):
    app = kit.make_app(kit.FakeBackend())

    async def run():
        async with kit.http_client(app) as client:
            plain = await client.get("/v1/models")
            anth = await client.get("/v1/models", headers={"anthropic-version": "2023-06-01"})
            ok = await client.get("/v1/models", headers=AUTH)
            return plain, anth, ok

    plain, anth, ok = asyncio.run(run())
    assert plain.status_code == 401 and "error" in plain.json() and "type" not in plain.json()
    assert anth.status_code == 401 and anth.json()["type"] == "error"
    assert ok.json()["data"][0]["id"] == "policy"


class _SizedBackend:
    """A backend that knows its model's context length (the HarnessPod's kind)."""

    def __init__(self, kit) -> None:
        self.inner = kit.FakeBackend()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def models(self, ctx):
        return [ModelCard("org/policy-7b", 4096)]


def test_models_api_in_each_wire_form_through_the_sdks(kit):
    app = kit.make_app(_SizedBackend(kit), prefix=PREFIX)
    prefix = "/episodes/ep-1/attempts/0"

    async def run():
        oa, an = kit.openai_client(app, prefix), kit.anthropic_client(app, prefix)
        found = (
            await oa.models.retrieve("org/policy-7b"),
            await an.models.retrieve("org/policy-7b"),
        )
        listed = (await oa.models.list(), await an.models.list())
        missing = []
        for call in (oa.models.retrieve("gpt-9"), an.models.retrieve("claude-9")):
            try:
                await call
            except (openai.NotFoundError, anthropic.NotFoundError) as e:
                missing.append(e)
        return found, listed, missing

    (om, am), (ol, al), missing = asyncio.run(run())
    assert (om.id, om.object, om.owned_by, om.model_extra["max_model_len"]) == (
        "org/policy-7b", "model", "openforge", 4096,
    )  # fmt: skip
    assert (am.id, am.type, am.display_name, am.max_input_tokens) == (
        "org/policy-7b", "model", "org/policy-7b", 4096,
    )  # fmt: skip
    assert am.created_at.year == 1970
    assert [m.model_extra["max_model_len"] for m in ol.data] == [4096]
    assert [m.max_input_tokens for m in al.data] == [4096] and not al.has_more
    # an unknown model is a JSON 404 in the caller's own error shape, naming the served model
    oerr, aerr = missing
    assert isinstance(oerr, openai.NotFoundError) and isinstance(aerr, anthropic.NotFoundError)
    body = oerr.response.json()["error"]
    assert body["param"] == "model" and "'org/policy-7b'" in body["message"]
    assert aerr.response.json()["error"]["type"] == "not_found_error"


def test_model_lookup_needs_the_key_and_a_bare_name_has_no_length(kit):
    app = kit.make_app(kit.FakeBackend())

    async def run():
        async with kit.http_client(app) as client:
            no_key = await client.get("/v1/models/policy")
            plain = await client.get("/v1/models/policy", headers=AUTH)
            anth = await client.get(
                "/v1/models/policy", headers={**AUTH, "anthropic-version": "2023-06-01"}
            )
            listed = await client.get("/v1/models", headers=AUTH)
            return no_key, plain, anth, listed

    no_key, plain, anth, listed = asyncio.run(run())
    assert no_key.status_code == 401 and no_key.json()["error"]["type"] == "authentication_error"
    assert plain.json() == {
        "id": "policy", "object": "model", "created": 0, "owned_by": "openforge",
        "root": "policy", "parent": None, "max_model_len": None,
    }  # fmt: skip
    assert anth.json()["type"] == "model" and anth.json()["max_input_tokens"] is None
    assert listed.json()["object"] == "list" and "has_more" not in listed.json()


def _request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": raw})


def test_request_api_key():
    assert request_api_key(_request({"Authorization": "Bearer abc"})) == "abc"
    assert request_api_key(_request({"authorization": "bearer  abc "})) == "abc"
    assert request_api_key(_request({"x-api-key": "xyz"})) == "xyz"
    assert request_api_key(_request({"Authorization": "Basic Zm9v"})) is None
    assert request_api_key(_request({})) is None
    both = _request({"Authorization": "Bearer a", "x-api-key": "b"})
    assert request_api_key(both) == "a"


def test_backend_is_told_of_each_4xx_to_an_authorised_request(kit):
    """What the HarnessPod records as ``proxy_rejected``: refusals after authorisation reach
    the backend with their status and message; a refused key belongs to nobody."""
    backend = kit.FakeBackend()
    app = kit.make_app(backend, prefix=PREFIX, max_body_bytes=1000)
    path = "/episodes/ep-1/attempts/0/v1/chat/completions"
    assert _post(app, kit, path, {"model": "policy", "messages": "hi"}).status_code == 400
    assert _post(app, kit, path, content=b"{oops").status_code == 400
    assert _post(app, kit, path, content=b"x" * 2000).status_code == 413
    assert _post(app, kit, path, CHAT, headers={"Authorization": "Bearer no"}).status_code == 401
    assert _post(app, kit, path, CHAT).status_code == 200
    assert [(ctx["episode_id"], status) for ctx, status, _ in backend.refusals] == [
        ("ep-1", 400),
        ("ep-1", 400),
        ("ep-1", 413),
    ]
    assert "messages" in backend.refusals[0][2]


def test_anthropic_count_tokens_through_the_sdk(kit):
    """``messages.count_tokens`` (real clients call it before a turn): the backend's count of
    the rendered prompt, nothing generated; a bad body is a 400 like any other."""
    backend = kit.FakeBackend()
    app = kit.make_app(backend, prefix=PREFIX)

    async def run():
        an = kit.anthropic_client(app, prefix="/episodes/ep-1/attempts/0")
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
        return await an.messages.count_tokens(model="policy", system="be brief", messages=messages)

    assert asyncio.run(run()).input_tokens == 15  # system + 2 messages, 5 ids each
    assert backend.calls == []
    path = "/episodes/ep-1/attempts/0/v1/messages/count_tokens"
    r = _post(app, kit, path, {"model": "policy", "messages": []})
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
