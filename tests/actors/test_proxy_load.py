"""Load: 256 concurrent streaming sessions through one HarnessPod proxy, three protocols mixed.

Each session is one attempt with its own URL and key, spoken by an official SDK (OpenAI chat
completions, OpenAI Responses, Anthropic messages), all streamed, several turns with tool calls
and tool results sent back. The scripted engine (the model's test double) plays a distinct
command per session and turn, so a crossed stream would show. Two rounds of 256: no errors,
every turn recorded in its own attempt, closed attempts released (410) and the pod actor's
resident memory bounded: no growth from one round to the next beyond a generous bound.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import anthropic
import httpx
import openai
import psutil
import pytest
from ray import serve
from ray._private import state as ray_state

from actors.harness_pod import HarnessPod
from forge.config import PolicyConfig
from serve.policy import deploy_policy

pytestmark = [pytest.mark.slow, pytest.mark.ray]

SESSIONS = 256
TURNS = 3  # two tool calls, then the answer
PROTOCOLS = ("chat", "responses", "anthropic")
MiB = 1024 * 1024
PARAMS = {
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
}
DESCRIPTION = "Run a shell command."


def _script(i: int) -> dict[str, Any]:
    return {
        "task_id": f"load-{i}",
        "steps": [f"echo s{i}-t{k}" for k in range(TURNS - 1)],
        "answer": f"answer-{i}",
    }


async def _chat(client: openai.AsyncOpenAI) -> list[str]:
    """One chat-completions session; returns the commands called, then the answer text."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    tools = [{"type": "function", "function": {"name": "shell", "parameters": PARAMS}}]
    seen = []
    for _ in range(TURNS):
        stream = await client.chat.completions.create(
            model="tiny", messages=messages, tools=tools, stream=True
        )
        text, call_id, args = "", None, ""
        async for chunk in stream:
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for tc in choice.delta.tool_calls or []:
                    call_id = tc.id or call_id
                    args += (tc.function and tc.function.arguments) or ""
        if call_id is None:
            seen.append(text)
            break
        seen.append(json.loads(args)["command"])
        call = {"id": call_id, "type": "function", "function": {"name": "shell", "arguments": args}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": "ok"},
        ]
    return seen


async def _responses(client: openai.AsyncOpenAI) -> list[str]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    tools = [
        {"type": "function", "name": "shell", "description": DESCRIPTION, "parameters": PARAMS}
    ]
    seen = []
    for _ in range(TURNS):
        stream = await client.responses.create(model="tiny", input=items, tools=tools, stream=True)
        done = [e.response async for e in stream if e.type == "response.completed"]
        calls = [o for o in done[0].output if o.type == "function_call"]
        if not calls:
            seen.append(done[0].output_text)
            break
        call = calls[0]
        seen.append(json.loads(call.arguments)["command"])
        items += [
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "ok"},
        ]
    return seen


async def _anthropic(client: anthropic.AsyncAnthropic) -> list[str]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    tools = [{"name": "shell", "description": DESCRIPTION, "input_schema": PARAMS}]
    seen = []
    for _ in range(TURNS):
        async with client.messages.stream(
            model="tiny", max_tokens=256, messages=messages, tools=tools
        ) as stream:
            msg = await stream.get_final_message()
        uses = [b for b in msg.content if b.type == "tool_use"]
        if not uses:
            seen.append("".join(b.text for b in msg.content if b.type == "text"))
            break
        use = uses[0]
        seen.append(use.input["command"])
        messages += [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "ok"}],
            },
        ]
    return seen


async def _session(http: dict[str, Any], url: str, info: dict[str, str], i: int) -> list[str]:
    base = url + info["path"]
    key = info["api_key"]
    protocol = PROTOCOLS[i % 3]
    if protocol == "anthropic":
        client = anthropic.AsyncAnthropic(
            base_url=base, api_key=key, http_client=http["anthropic"], max_retries=0
        )
        return await _anthropic(client)
    oc = openai.AsyncOpenAI(
        base_url=base + "/v1", api_key=key, http_client=http["openai"], max_retries=0
    )
    return await (_chat(oc) if protocol == "chat" else _responses(oc))


class RssSampler:
    """The peak resident memory of one process, sampled from a thread while a round runs."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.peak = self.rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        return self.proc.memory_info().rss

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.rss())

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())


def _round(ray: Any, pod: Any, url: str, tag: str) -> list[Any]:
    """256 sessions at once; returns each attempt's closed state (or raises on any error)."""
    infos = ray.get(
        [pod.open_attempt.remote(f"{tag}-{i}", 0, script=_script(i)) for i in range(SESSIONS)]
    )

    async def everyone() -> list[Any]:
        # One connection pool per SDK (each brings its own httpx), shared by its sessions.
        http = {
            "openai": openai.DefaultAsyncHttpxClient(timeout=120),
            "anthropic": anthropic.DefaultAsyncHttpxClient(timeout=120),
        }
        try:
            return await asyncio.gather(
                *(_session(http, url, info, i) for i, info in enumerate(infos)),
                return_exceptions=True,
            )
        finally:
            for client in http.values():
                await client.aclose()

    results = asyncio.run(everyone())
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, f"{len(errors)} of {SESSIONS} sessions failed, first: {errors[0]!r}"
    for i, seen in enumerate(results):
        assert seen == [*_script(i)["steps"], f"answer-{i}"], f"session {i} got {seen}"
    return ray.get([pod.close_attempt.remote(f"{tag}-{i}", 0) for i in range(SESSIONS)])


@pytest.mark.full  # ~40 s: -m full; scripts/bench/proxy_load.py measures the same load
def test_256_streaming_sessions_three_protocols_bounded_memory(ray_cluster):
    ray = ray_cluster
    config = PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25, batch_wait_ms=0)
    handle = deploy_policy(config, "load-policy")
    pod = ray.remote(HarnessPod).options(num_cpus=0.25).remote(handle, pod_id="load-pod")
    url = ray.get(pod.start.remote())
    pid = ray_state.actors(actor_id=pod._actor_id.hex())["Pid"]  # the GCS actor table
    rss: dict[str, int] = {}
    try:
        rss["before"] = RssSampler(pid).rss()
        peaks = []
        for tag in ("r1", "r2"):
            with RssSampler(pid) as sampler:
                closed = _round(ray, pod, url, tag)
            peaks.append(sampler.peak)
            rss[tag] = sampler.rss()
            for i, st in enumerate(closed):
                assert len(st.turns) == TURNS and not st.errors and not st.rejected
                assert {t.protocol for t in st.turns} == {PROTOCOLS[i % 3]}
                assert [t.index for t in st.turns] == list(range(TURNS))
                assert all(t.prompt_ids and t.completion_ids for t in st.turns)
        # Closed attempts are released: the pod holds none of their state, their URLs get 410.
        for tag in ("r1", "r2"):
            for i in range(SESSIONS):
                with pytest.raises(KeyError):
                    ray.get(pod.turns.remote(f"{tag}-{i}", 0))
        auth = {"Authorization": "Bearer x"}
        r = httpx.post(f"{url}/episodes/r2-0/attempts/0/v1/chat/completions", headers=auth)
        assert r.status_code == 410
        print(
            f"pod RSS MiB: before {rss['before'] / MiB:.0f}, peaks {[p // MiB for p in peaks]}, "
            f"after r1 {rss['r1'] / MiB:.0f}, after r2 {rss['r2'] / MiB:.0f}"
        )
        grown = rss["r2"] - rss["r1"]
        assert grown < 48 * MiB, f"pod RSS grew {grown / MiB:.0f} MiB in the second round"
        assert rss["r2"] - rss["before"] < 256 * MiB
        assert max(peaks) - rss["before"] < 512 * MiB
    finally:
        ray.get(pod.stop.remote())
        ray.kill(pod)
        serve.delete("load-policy")
