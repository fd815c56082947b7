"""actors.pod_proxy in process (the Policy through a local handle): which Policy call a streamed
request costs, and the models API's context when the pod was given none."""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from typing import Any

import httpx
import pytest

from actors.attempt_state import AttemptState
from actors.harness_pod import ATTEMPT_PREFIX
from actors.pod_proxy import RecordingProxy
from forge.config import ProxyConfig
from serve.http_app import build_app, protocol_routes
from serve.policy import LocalHandle, Policy
from tests.serve.test_live import StreamingTextEngine

TEXT = "A streamed answer, sampled token by token."
PATH = "/episodes/ep/attempts/0"


class CountingHandle:
    """A local handle that counts the Policy methods called through it."""

    def __init__(self, policy: Policy) -> None:
        self.inner = LocalHandle(policy)
        self.called: list[str] = []

    def options(self, **_: Any) -> CountingHandle:
        return self

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)
        called = self.called

        class _Counted:
            @staticmethod
            def remote(*args: Any, **kwargs: Any) -> Any:
                called.append(name)
                return method.remote(*args, **kwargs)

        return _Counted


def _proxy(streaming: bool, context_length: int | None = None) -> tuple[RecordingProxy, Any]:
    """A proxy for one open attempt (``ep``, 0, key ``key``); ``context_length``: the pod's."""
    policy = Policy({"engine": {"name": "scripted", "model": "tiny"}})
    policy.engine.max_context = 4096  # as a torch or vLLM engine would hold it
    if streaming:
        policy.engine = StreamingTextEngine(policy.tokenizer, TEXT)
        policy.continuous = True
    handle = CountingHandle(policy)
    attempts = {("ep", 0): AttemptState("ep", 0, "key")}
    proxy = RecordingProxy(handle, "tiny", ProxyConfig(), attempts, OrderedDict(), context_length)
    return proxy, handle


async def _stream(proxy: RecordingProxy) -> list[str]:
    """One streamed chat call through the proxy's routes; the content deltas it got."""
    app = build_app(protocol_routes(ATTEMPT_PREFIX, proxy))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://pod") as client:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "Go."}], "stream": True}
        headers = {"Authorization": "Bearer key"}
        r = await client.post(f"{PATH}/v1/chat/completions", json=body, headers=headers)
        assert r.status_code == 200, r.text
        deltas = []
        for line in r.text.splitlines():
            if line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                deltas += [delta["content"]] if delta.get("content") else []
        await asyncio.sleep(0)  # the stream's producer records the turn as it finishes
        return deltas


@pytest.mark.parametrize("streaming", [True, False])
def test_a_streamed_request_is_one_unary_call_unless_the_engine_streams(streaming: bool) -> None:
    """An engine that sends its answer whole is called with ``generate`` (one message back);
    one that samples live is streamed from, delta by delta. Either way the turn is recorded
    and the client gets the whole content."""
    proxy, handle = _proxy(streaming)
    deltas = asyncio.run(_stream(proxy))
    generation = [c for c in handle.called if c.startswith("generate")]
    assert generation == (["generate_stream"] if streaming else ["generate"])
    assert handle.called.count("describe") == 1
    [turn] = proxy.attempts[("ep", 0)].turns
    assert "".join(deltas) == turn.text and turn.completion_ids
    if streaming:
        assert turn.text == TEXT and len(deltas) > 3


def test_models_api_asks_the_policy_for_its_context_once() -> None:
    proxy, handle = _proxy(streaming=False)

    async def go() -> list[Any]:
        return [(await proxy.models(None))[0].context_length for _ in range(3)]

    assert asyncio.run(go()) == [4096] * 3
    assert handle.called == ["describe"]
    given, handle = _proxy(streaming=False, context_length=1024)
    assert asyncio.run(given.models(None))[0].context_length == 1024
    assert handle.called == []  # what the pod was given is not asked again
