"""Added latency of one HarnessPod proxy under load: 1, 32 and 256 concurrent streaming sessions.

At each level, N sessions run at once, each one attempt with its own URL and key, several turns
of a growing conversation, all with ``stream: true``, the three protocols mixed (chat
completions, Responses, Anthropic messages; httpx, SSE parsed as a client would). Rounds through
the proxy alternate with rounds of the same sessions calling the Policy deployment's streaming
method directly through a Serve handle (same engine, same conversations), so drift hits both
alike; the difference is what the proxy adds (HTTP, auth, parsing, the Serve call from the pod,
recording the Turn, rendering the events). Time to first content and to the end of the stream
are both measured. Errors count failed calls, broken streams and attempts whose recorded turns
do not match the calls made; the pod actor's resident memory is sampled before, at its peak and
after each level (attempts closed).

    .venv/bin/python scripts/bench/proxy_load.py [--levels 1,32,256] [--turns 4] [--samples 512]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import forge  # noqa: F401  (before ray: a loopback-only local cluster)

# isort: split
import httpx
import psutil
import ray
from ray._private import state as ray_state

from actors.harness_pod import HarnessPod
from forge.cluster import init_ray
from forge.config import PolicyConfig
from forge.types import ChatRequest, Message, SamplingParams
from serve.policy import deploy_policy

PROTOCOLS = ("chat", "responses", "anthropic")
ROUTES = {"chat": "chat/completions", "responses": "responses", "anthropic": "messages"}
MAX_TOKENS = 64
MiB = 1024 * 1024


@dataclass
class Latencies:
    """Latencies (ms) and errors of one path at one level."""

    ttft: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    inner: list[float] = field(default_factory=list)  # the pod's own Policy call (proxy only)
    errors: int = 0
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds by process (pod, client)

    def cpu_ms_per_call(self, name: str) -> float:
        return 1000 * self.cpu.get(name, 0.0) / max(1, len(self.total))


def body(protocol: str, history: list[tuple[str, str]]) -> dict[str, Any]:
    msgs = [{"role": role, "content": text} for role, text in history]
    out: dict[str, Any] = {"model": "tiny", "stream": True, "temperature": 0}
    if protocol == "responses":
        return {**out, "input": msgs, "max_output_tokens": MAX_TOKENS}
    return {**out, "messages": msgs, "max_tokens": MAX_TOKENS}


def text_delta(protocol: str, event: dict[str, Any]) -> str:
    if protocol == "chat":
        return "".join(c["delta"].get("content") or "" for c in event.get("choices", []))
    if protocol == "responses":
        return event["delta"] if event.get("type") == "response.output_text.delta" else ""
    if event.get("type") == "content_block_delta" and event["delta"]["type"] == "text_delta":
        return event["delta"]["text"]
    return ""


def stream_ended(protocol: str, data: str) -> bool:
    if protocol == "chat":
        return data == "[DONE]"
    kind = json.loads(data).get("type")
    return kind == ("response.completed" if protocol == "responses" else "message_stop")


async def proxy_call(
    client: httpx.AsyncClient, url: str, key: str, protocol: str, history: list[tuple[str, str]]
) -> tuple[float, float, str]:
    """One streamed call through the proxy: (ms to first content, ms to the end, text)."""
    headers = {"Authorization": f"Bearer {key}"}
    t0 = time.perf_counter()
    first, text, ended = 0.0, "", False
    async with client.stream(
        "POST", f"{url}/{ROUTES[protocol]}", json=body(protocol, history), headers=headers
    ) as r:
        if r.status_code != 200:
            raise RuntimeError(f"proxy answered {r.status_code}: {(await r.aread())[:200]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if stream_ended(protocol, data):
                ended = True
                break
            delta = text_delta(protocol, json.loads(data))
            if delta and not text:
                first = time.perf_counter()
            text += delta
    if not ended or not text:
        raise RuntimeError(f"{protocol} stream broke off after {text!r}")
    end = time.perf_counter()
    return (first - t0) * 1000, (end - t0) * 1000, text


async def direct_call(handle: Any, history: list[tuple[str, str]]) -> tuple[float, float, str]:
    """The same call made on the Policy's streaming method through a Serve handle."""
    chat = ChatRequest(
        [Message(role, text) for role, text in history],
        sampling=SamplingParams(temperature=0, max_tokens=MAX_TOKENS),
        model="tiny",
    )
    t0 = time.perf_counter()
    first, text = 0.0, ""
    async for kind, value in handle.options(stream=True).generate_stream.remote(chat):
        if kind in ("text", "done") and not first:
            first = time.perf_counter()
        if kind == "done":
            text = value.content
    if not text:
        raise RuntimeError("the Policy's stream ended without content")
    return (first - t0) * 1000, (time.perf_counter() - t0) * 1000, text


async def session(call: Any, turns: int, out: Latencies) -> int:
    """One conversation of ``turns`` calls; returns the calls that succeeded."""
    history = [("user", "Say something.")]
    done = 0
    for k in range(turns):
        try:
            ttft, total, text = await call(history)
        except Exception as e:  # counted, and the session goes on
            out.errors += 1
            print(f"  error: {type(e).__name__}: {str(e)[:200]}")
            continue
        out.ttft.append(ttft)
        out.total.append(total)
        history += [("assistant", text), ("user", f"And again ({k}).")]
        done += 1
    return done


async def proxy_round(pod: Any, url: str, n: int, turns: int, tag: str, out: Latencies) -> None:
    infos = await asyncio.gather(*(pod.open_attempt.remote(f"{tag}-{i}", 0) for i in range(n)))
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:

        def caller(i: int, info: dict[str, str]) -> Any:
            base = url + info["path"] + "/v1"
            return lambda h: proxy_call(client, base, info["api_key"], PROTOCOLS[i % 3], h)

        made = await asyncio.gather(
            *(session(caller(i, info), turns, out) for i, info in enumerate(infos))
        )
    closed = await asyncio.gather(*(pod.close_attempt.remote(f"{tag}-{i}", 0) for i in range(n)))
    out.errors += sum(len(st.turns) != m for st, m in zip(closed, made, strict=True))
    out.inner += [t.latency_s * 1000 for st in closed for t in st.turns]


async def direct_round(handle: Any, n: int, turns: int, out: Latencies) -> None:
    await asyncio.gather(*(session(lambda h: direct_call(handle, h), turns, out) for _ in range(n)))


async def timed(work: Any, out: Latencies, procs: dict[str, psutil.Process]) -> None:
    """Await ``work``, adding the CPU time each of ``procs`` spent meanwhile to ``out.cpu``."""
    before = {name: sum(p.cpu_times()[:2]) for name, p in procs.items()}
    await work
    for name, p in procs.items():
        out.cpu[name] = out.cpu.get(name, 0.0) + sum(p.cpu_times()[:2]) - before[name]


class RssSampler:
    """The pod actor's resident memory, sampled from a thread; ``peak`` since the last reset."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.peak = self.rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def rss(self) -> int:
        return self.proc.memory_info().rss

    def reset(self) -> int:
        self.peak = now = self.rss()
        return now

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.rss())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] if xs else math.nan


async def level(
    handle: Any, pod: Any, url: str, n: int, turns: int, samples: int, rss: RssSampler
) -> dict[str, Any]:
    rounds = max(2, math.ceil(samples / (n * turns)))
    await direct_round(handle, n, turns, Latencies())  # warm-up, not counted
    await proxy_round(pod, url, n, turns, f"warm{n}", Latencies())
    before = rss.reset()
    direct, proxy = Latencies(), Latencies()
    procs = {"pod": rss.proc, "client": psutil.Process()}
    for r in range(rounds):  # alternating, the first path swapped every round
        pair = [
            timed(direct_round(handle, n, turns, direct), direct, procs),
            timed(proxy_round(pod, url, n, turns, f"c{n}r{r}", proxy), proxy, procs),
        ]
        for work in pair if r % 2 == 0 else pair[::-1]:
            await work
    return {"n": n, "direct": direct, "proxy": proxy, "rss": (before, rss.peak, rss.rss())}


def report(rows: list[dict[str, Any]], turns: int) -> None:
    print(f"turns per session {turns}; latencies in ms; added = proxy - direct at that percentile")
    head = (
        f"{'sessions':>8} {'calls':>6} {'path':>7} {'ttft p50':>9} {'ttft p99':>9}"
        f" {'total p50':>10} {'total p99':>10} {'errors':>7} {'CPU ms/call pod,client':>23}"
        "  pod RSS MiB before/peak/after"
    )
    print(head)
    for row in rows:
        d, p = row["direct"], row["proxy"]
        for name, path in (("direct", d), ("proxy", p)):
            print(
                f"{row['n']:>8} {len(path.total):>6} {name:>7} {pct(path.ttft, 0.5):9.2f}"
                f" {pct(path.ttft, 0.99):9.2f} {pct(path.total, 0.5):10.2f}"
                f" {pct(path.total, 0.99):10.2f} {path.errors:>7}"
                f" {path.cpu_ms_per_call('pod'):>14.2f},{path.cpu_ms_per_call('client'):>8.2f}"
                + ("  " + "/".join(f"{b / MiB:.0f}" for b in row["rss"]) if name == "proxy" else "")
            )
        print(
            f"{'':>8} {'':>6} {'in pod':>7} {'':>9} {'':>9} {pct(p.inner, 0.5):10.2f}"
            f" {pct(p.inner, 0.99):10.2f}  (the pod's own Policy call)"
        )
        added = [pct(p.ttft, q) - pct(d.ttft, q) for q in (0.5, 0.99)]
        added += [pct(p.total, q) - pct(d.total, q) for q in (0.5, 0.99)]
        print(
            f"{'':>8} {'':>6} {'added':>7} {added[0]:9.2f} {added[1]:9.2f}"
            f" {added[2]:10.2f} {added[3]:10.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,32,256", help="concurrent sessions per level")
    parser.add_argument("--turns", type=int, default=4, help="calls per session")
    parser.add_argument("--samples", type=int, default=512, help="least calls per path and level")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    init_ray(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    config = PolicyConfig(engine={"name": "scripted"}, batch_wait_ms=0, num_cpus=1)
    handle = deploy_policy(config, app_name="bench-policy")
    pod = ray.remote(HarnessPod).options(num_cpus=0.5).remote(handle, pod_id="bench-pod")
    url = ray.get(pod.start.remote())
    rss = RssSampler(ray_state.actors(actor_id=pod._actor_id.hex())["Pid"])

    async def run() -> list[dict[str, Any]]:
        return [await level(handle, pod, url, n, args.turns, args.samples, rss) for n in levels]

    t0 = time.perf_counter()
    rows = asyncio.run(run())
    rss.stop()
    report(rows, args.turns)
    errors = sum(r["direct"].errors + r["proxy"].errors for r in rows)
    print(f"errors {errors}; {time.perf_counter() - t0:.0f} s")
    ray.get(pod.stop.remote())
    ray.shutdown()


if __name__ == "__main__":
    main()
