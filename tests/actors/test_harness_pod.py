"""The HarnessPod as a real Ray actor in front of a real Serve Policy."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import subprocess
import sys
import threading
import time

import anthropic
import httpx
import openai
import pytest

from actors.harness_pod import HarnessPod
from forge.config import PolicyConfig
from forge.sandboxes import netns
from serve.chat_template import parse_tool_calls
from serve.models import build_byte_tokenizer
from serve.policy import deploy_policy
from tasks.loader import load_suite

pytestmark = pytest.mark.ray
TOOL = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def _pod(ray, handle, name, **kw):
    pod = ray.remote(HarnessPod).options(num_cpus=0.25).remote(handle, pod_id=name, **kw)
    url = ray.get(pod.start.remote())
    return pod, url


@pytest.fixture(scope="module")
def oracle(ray_cluster):
    handle = deploy_policy(PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25), "pod-oracle")
    pod, url = _pod(
        ray_cluster, handle, "pod-a", proxy={"max_body_bytes": 65536}, context_length=4096
    )
    yield ray_cluster, pod, url
    ray_cluster.get(pod.stop.remote())


@pytest.fixture(scope="module")
def noop(ray_cluster):
    config = PolicyConfig(engine={"name": "scripted", "mode": "noop"}, num_cpus=0.25)
    handle = deploy_policy(config, "pod-noop")
    pod, url = _pod(ray_cluster, handle, "pod-b")
    yield ray_cluster, pod, url


def _open(ray, pod, episode, attempt=0, steps=("echo hi",)):
    script = {"task_id": "t", "steps": list(steps), "answer": "ok"}
    return ray.get(pod.open_attempt.remote(episode, attempt, script=script))


def test_sdks_through_proxy_are_recorded_token_for_token(oracle):
    ray, pod, url = oracle
    info = _open(ray, pod, "ep-sdk")
    base = url + info["path"]
    oa = openai.OpenAI(base_url=base + "/v1", api_key=info["api_key"])
    chat = oa.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hi"}],
        tools=[TOOL],
        extra_body={"return_token_ids": True},
    )
    stream = oa.responses.create(
        model="tiny", input="hi", tools=[{"type": "function", **TOOL["function"]}], stream=True
    )
    completed = next(e for e in stream if e.type == "response.completed").response
    an = anthropic.Anthropic(base_url=base, api_key=info["api_key"])
    tool = {"name": "shell", "input_schema": TOOL["function"]["parameters"]}
    msg = an.messages.create(
        model="tiny", max_tokens=200, messages=[{"role": "user", "content": "hi"}], tools=[tool]
    )
    state = ray.get(pod.close_attempt.remote("ep-sdk", 0))
    assert [t.protocol for t in state.turns] == ["chat", "responses", "anthropic"]
    tok = build_byte_tokenizer()
    first = state.turns[0]
    assert first.completion_ids == chat.model_dump()["choices"][0]["token_ids"]
    assert first.prompt_ids == chat.model_dump()["prompt_token_ids"]
    for turn in state.turns:
        assert tok.decode(turn.completion_ids, skip_special_tokens=True) == turn.text
        assert len(turn.logprobs) == len(turn.completion_ids)
        _, calls = parse_tool_calls(turn.text)
        assert [c.name for c in calls] == ["shell"]
        assert [c["name"] for c in turn.tool_calls] == ["shell"]
    assert chat.choices[0].message.tool_calls[0].function.name == "shell"
    assert [o.name for o in completed.output if o.type == "function_call"] == ["shell"]
    assert [b.name for b in msg.content if b.type == "tool_use"] == ["shell"]


def test_models_api_gives_the_context_length_in_each_wire_form(oracle):
    """What agents probe before they compact: the served model and its context, through each
    official SDK; an unknown model or another attempt's key is that wire's JSON error."""
    ray, pod, url = oracle
    info, other = _open(ray, pod, "ep-models"), _open(ray, pod, "ep-models-other")
    base = url + info["path"]
    oa = openai.OpenAI(base_url=base + "/v1", api_key=info["api_key"], max_retries=0)
    an = anthropic.Anthropic(base_url=base, api_key=info["api_key"], max_retries=0)
    model = oa.models.retrieve("tiny")
    assert (model.id, model.object, model.model_extra["max_model_len"]) == ("tiny", "model", 4096)
    assert [m.model_extra["max_model_len"] for m in oa.models.list()] == [4096]
    card = an.models.retrieve("tiny")
    assert (card.id, card.type, card.max_input_tokens) == ("tiny", "model", 4096)
    assert [m.max_input_tokens for m in an.models.list()] == [4096]
    with pytest.raises(openai.NotFoundError) as missing:
        oa.models.retrieve("gpt-9")
    assert missing.value.response.json()["error"]["param"] == "model"
    with pytest.raises(anthropic.NotFoundError) as missing_an:
        an.models.retrieve("claude-9")
    assert missing_an.value.response.json()["error"]["type"] == "not_found_error"
    stranger = anthropic.Anthropic(base_url=base, api_key=other["api_key"], max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        stranger.models.retrieve("tiny")
    assert ray.get(pod.close_attempt.remote("ep-models", 0)).turns == []


def test_count_tokens_is_the_prompt_the_policy_renders(oracle):
    ray, pod, url = oracle
    info = _open(ray, pod, "ep-count")
    base = url + info["path"] + "/v1/messages"
    auth = {"x-api-key": info["api_key"], "anthropic-version": "2023-06-01"}
    body = {"model": "tiny", "system": "sys", "messages": [{"role": "user", "content": "hi"}]}
    counted = httpx.post(base + "/count_tokens", json=body, headers=auth)
    assert counted.status_code == 200, counted.text
    assert httpx.post(base, json={**body, "max_tokens": 8}, headers=auth).status_code == 200
    [turn] = ray.get(pod.close_attempt.remote("ep-count", 0)).turns  # counting made no turn
    assert counted.json() == {"input_tokens": len(turn.prompt_ids)}


def test_bad_input_answers_clearly_and_pod_stays_up(oracle):
    ray, pod, url = oracle
    info = _open(ray, pod, "ep-bad")
    base = url + info["path"] + "/v1/chat/completions"
    auth = {"Authorization": f"Bearer {info['api_key']}"}
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(base, content=b"{not json", headers=auth)
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    r = httpx.post(base, json={**body, "model": "gpt-9"}, headers=auth)
    assert r.status_code == 404 and "model" in r.json()["error"]["message"]
    r = httpx.post(base, json={"model": "tiny", "messages": [{"role": "robot"}]}, headers=auth)
    assert r.status_code == 400 and "messages[0].role" in r.json()["error"]["message"]
    r = httpx.post(base, json=body, headers={"Authorization": "Bearer forge-someone-else"})
    assert r.status_code == 401
    other = _open(ray, pod, "ep-other")
    r = httpx.post(base, json=body, headers={"Authorization": f"Bearer {other['api_key']}"})
    assert r.status_code == 401  # another attempt's key cannot write into this episode
    big = {**body, "messages": [{"role": "user", "content": "x" * 100_000}]}
    r = httpx.post(base, json=big, headers=auth)
    assert r.status_code == 413
    r = httpx.post(url + "/episodes/nope/attempts/0/v1/chat/completions", json=body, headers=auth)
    assert r.status_code == 404
    assert httpx.post(base, json=body, headers=auth).status_code == 200
    state = ray.get(pod.close_attempt.remote("ep-bad", 0))
    assert len(state.turns) == 1  # only the valid call was recorded
    # each 4xx answered to this attempt is kept (to tell a refused harness from a crashed one);
    # refusals before authorisation (a wrong key, an unknown attempt) belong to no attempt
    assert [r.split()[0] for r in state.refusals] == ["400", "404", "400", "413"]
    assert "messages[0].role" in state.refusals[2]
    r = httpx.post(base, json=body, headers=auth)
    assert r.status_code == 410
    assert ray.get(pod.ready.remote()) == "pod-a"


def test_32_streaming_clients_get_separate_records(oracle):
    ray, pod, url = oracle
    infos = [_open(ray, pod, f"ep-par-{i}", steps=[f"echo client-{i}"]) for i in range(32)]

    async def one(info):
        async with httpx.AsyncClient(timeout=120) as client:
            body = {
                "model": "tiny",
                "stream": True,
                "messages": [{"role": "user", "content": "go"}],
                "tools": [TOOL],
            }
            args = ""
            async with client.stream(
                "POST",
                url + info["path"] + "/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {info['api_key']}"},
            ) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    if line.startswith("data: {"):
                        for choice in json.loads(line[6:])["choices"]:
                            for tc in choice["delta"].get("tool_calls") or []:
                                args += tc["function"].get("arguments") or ""
            return json.loads(args)["command"]

    async def all_clients():
        return await asyncio.gather(*(one(i) for i in infos))

    commands = asyncio.run(all_clients())
    assert commands == [f"echo client-{i}" for i in range(32)]
    for i in range(32):
        state = ray.get(pod.close_attempt.remote(f"ep-par-{i}", 0))
        assert len(state.turns) == 1
        assert json.loads(state.turns[0].tool_calls[0]["arguments"]) == {
            "command": f"echo client-{i}"
        }


@pytest.mark.slow
def test_react_episode_oracle_gets_1_and_noop_gets_0(oracle, noop):
    ray = oracle[0]
    task = next(t for t in load_suite("smoke") if t.id == "json_extract")
    good = ray.get(oracle[1].run_episode.remote(task.model_dump(), "react", episode_id="e-good"))
    bad = ray.get(noop[1].run_episode.remote(task.model_dump(), "react", episode_id="e-bad"))
    assert (good.status, good.reward) == ("ok", 1.0)
    assert (bad.status, bad.reward) == ("ok", 0.0)
    # The oracle plays every solution step, then answers: one turn per step plus the answer.
    assert len(good.turns) == len(task.solution) + 1
    assert len(bad.turns) == 1 and not bad.turns[0].tool_calls
    for ep in (good, bad):
        assert [t.index for t in ep.turns] == list(range(len(ep.turns)))
        assert all(t.completion_ids and t.prompt_ids for t in ep.turns)
        # The react loop sends history back unchanged: every turn merges into one segment.
        assert len(ep.segments) == 1 and ep.reset_reasons == {}
        seg = ep.segments[0]
        sampled = [tok for tok, m in zip(seg.tokens, seg.loss_mask, strict=True) if m]
        assert sampled == [i for t in ep.turns for i in t.completion_ids]


REFUSED_HARNESS = """
import json, os, sys, urllib.error, urllib.request
body = {"model": "tiny", "messages": [{"role": "wizard", "content": "hi"}]}
request = urllib.request.Request(
    os.environ["URL"] + "/chat/completions", data=json.dumps(body).encode(),
    headers={"Authorization": "Bearer " + os.environ["KEY"], "Content-Type": "application/json"})
try:
    urllib.request.urlopen(request, timeout=30)
except urllib.error.HTTPError as e:
    sys.exit("unexpected reply from the model server")  # what an agent prints: not the cause
"""


def test_harness_the_proxy_refused_is_proxy_rejected_not_a_crash(oracle):
    """A harness that gives up after a 4xx: the failure says so, and the episode's log carries
    the status and message (not only the harness's own unrelated last words)."""
    ray, pod, _ = oracle
    task = next(t for t in load_suite("smoke") if t.id == "json_extract")
    options = {
        "name": "refused",
        "command": ["python3", "-c", REFUSED_HARNESS],
        "env": {"URL": "{base_url}", "KEY": "{api_key}"},
    }
    ep = ray.get(pod.run_episode.remote(task.model_dump(), "command", harness_options=options))
    assert (ep.status, ep.failure, ep.harness_exit_code) == ("failed", "proxy_rejected", 1)
    assert "proxy rejected: 400 messages[0].role" in ep.harness_log, ep.harness_log
    assert "unexpected reply" in ep.harness_log and ep.turns == []


def test_a_sandbox_listener_is_served_by_the_pod_itself() -> None:
    """Listeners handed over by a sandbox's exec (bound in its network namespace:
    forge.sandboxes.netns.serve_here) are served by the pod's own proxy and egress proxy
    until stopped; on the pod's loop itself the pod declines (it cannot wait there) and the
    listener is relayed."""
    pod = HarnessPod(None, pod_id="serve-on")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(pod.start(), loop).result(30)
    try:
        listener = socket.create_server(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/episodes/e/attempts/0/v1/models"
        stop = _server(pod.socket_path)(listener)
        assert stop is not None
        r = httpx.get(url, timeout=10)
        assert r.status_code == 404 and "no attempt 0 of episode e" in r.text  # the pod's app
        stop()
        time.sleep(0.2)
        with pytest.raises(httpx.ConnectError):
            httpx.get(url, timeout=10)
        listener = socket.create_server(("127.0.0.1", 0))
        stop = _server(pod.egress_socket)(listener)
        assert stop is not None
        with socket.create_connection(listener.getsockname(), timeout=10) as conn:
            conn.sendall(b"GET http://example.test/ HTTP/1.1\r\nHost: example.test\r\n\r\n")
            assert conn.recv(4096).startswith(b"HTTP/1.1 407")  # the egress proxy: no key
        stop()
        serve = _server(pod.socket_path)
        on_loop = asyncio.run_coroutine_threadsafe(_call(serve, listener), loop)
        assert on_loop.result(10) is None
    finally:
        asyncio.run_coroutine_threadsafe(pod.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    assert netns.server_of(pod.socket_path) is None and netns.server_of(pod.egress_socket) is None


async def _call(fn, *args):
    return fn(*args)


def _server(path):
    serve = netns.server_of(path)
    assert serve is not None, f"no server of {path} in this process"
    return serve


def test_a_pod_process_freezes_what_it_started_with(oracle):
    """What a pod's process holds when it starts serving lives as long as the pod: it is moved
    out of the collector's scans (which a proxied call's garbage triggers every few calls);
    a pod in a driver's process leaves that process's collector alone."""
    ray, pod, _ = oracle
    frozen = ray.get(pod.__ray_call__.remote(lambda _self: gc.get_freeze_count()))
    assert frozen > 10_000  # the modules, Ray's and Serve's state: far more than a call makes
    before = gc.get_freeze_count()

    async def start_and_stop() -> int:
        local = HarnessPod(None, pod_id="in-driver")
        await local.start()
        try:
            return gc.get_freeze_count()
        finally:
            await local.stop()

    assert asyncio.run(start_and_stop()) == before


def test_the_processes_that_move_no_weights_never_load_torch() -> None:
    """A HarnessPod, the Scheduler, the ReplayBuffer and a driver that deploys the Policy each
    start in a process of their own; loading torch there cost each ~3 s of a 2-core machine's
    time at every ``forge run``."""
    modules = ["actors.harness_pod", "actors.scheduler", "actors.replay_buffer", "serve.policy"]
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nprint('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "False", "one of them imports torch again"
