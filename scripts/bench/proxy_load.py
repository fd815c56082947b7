"""Added latency and CPU of one HarnessPod proxy under load: 1, 32 and 256 streaming sessions.

At each level, N sessions run at once, each one attempt with its own URL and key, several turns
of a growing conversation, all with ``stream: true``, the three protocols mixed (chat
completions, Responses, Anthropic messages; httpx, SSE parsed as a client would). Rounds through
the proxy alternate with rounds of the same sessions calling the Policy deployment's streaming
method directly through a Serve handle (same engine, same conversations), so drift hits both
alike; the difference is what the proxy adds (HTTP, auth, parsing, the Serve call from the pod,
recording the Turn, rendering the events). Time to first content and to the end of the stream
are both measured, and the CPU time the pod's process spends per call (the steadiest figure on
a shared machine). Errors count failed calls, broken streams and attempts whose recorded turns
do not match the calls made; the pod actor's resident memory is sampled before, at its peak and
after each level (attempts closed).

``--baseline REV`` also starts a HarnessPod from the packages of git revision REV (extracted to
a temporary directory, loaded by its own worker process: :mod:`baseline_tree`) on the same
cluster and Policy, and its rounds alternate with today's pod's and the direct ones (the order
rotates every round); the table then ends with both pods' CPU per call and added latency side
by side, and their ratios.

    .venv/bin/python scripts/bench/proxy_load.py [--levels 1,32,256] [--turns 4] \\
        [--samples 512] [--baseline REV]

Each level runs at least two rounds of every path: at 256 sessions that is 2,048 calls a path
(4 turns), whatever ``--samples`` asks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import forge  # noqa: F401  (before ray: a loopback-only local cluster)

# isort: split
import httpx
import psutil
import ray
from baseline_tree import TreeActor, extract_tree
from ray._private import state as ray_state

from forge.cluster import init_ray
from forge.config import PolicyConfig
from forge.types import ChatRequest, Message, SamplingParams
from serve.policy import deploy_policy

PROTOCOLS = ("chat", "responses", "anthropic")
ROUTES = {"chat": "chat/completions", "responses": "responses", "anthropic": "messages"}
MAX_TOKENS = 64
MiB = 1024 * 1024
POD = "actors.harness_pod:HarnessPod"


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


async def proxy_round(pod: Pod, n: int, turns: int, tag: str, out: Latencies) -> None:
    """One round of ``n`` sessions through ``pod``. The pod's CPU while the sessions run goes to
    ``out.cpu["path"]``: the bench opens and closes the attempts with actor calls, which a run
    makes inside the pod (``forge.episode``), so they stay outside that window."""
    opened = (pod.actor.call.remote("open_attempt", f"{tag}-{i}", 0) for i in range(n))
    infos = await asyncio.gather(*opened)
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:

        def caller(i: int, info: dict[str, str]) -> Any:
            base = pod.url + info["path"] + "/v1"
            return lambda h: proxy_call(client, base, info["api_key"], PROTOCOLS[i % 3], h)

        before = cpu_seconds(pod.rss.proc)
        made = await asyncio.gather(
            *(session(caller(i, info), turns, out) for i, info in enumerate(infos))
        )
        out.cpu["path"] = out.cpu.get("path", 0.0) + cpu_seconds(pod.rss.proc) - before
    closing = (pod.actor.call.remote("close_attempt", f"{tag}-{i}", 0) for i in range(n))
    closed = await asyncio.gather(*closing)
    out.errors += sum(len(st.turns) != m for st, m in zip(closed, made, strict=True))
    out.inner += [t.latency_s * 1000 for st in closed for t in st.turns]


def cpu_seconds(proc: psutil.Process) -> float:
    return sum(proc.cpu_times()[:2])


async def direct_round(handle: Any, n: int, turns: int, out: Latencies) -> None:
    await asyncio.gather(*(session(lambda h: direct_call(handle, h), turns, out) for _ in range(n)))


async def timed(work: Any, out: Latencies, procs: dict[str, psutil.Process]) -> None:
    """Await ``work``, adding the CPU time each of ``procs`` spent meanwhile to ``out.cpu``."""
    before = {name: cpu_seconds(p) for name, p in procs.items()}
    await work
    for name, p in procs.items():
        out.cpu[name] = out.cpu.get(name, 0.0) + cpu_seconds(p) - before[name]


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


@dataclass
class Pod:
    """One HarnessPod under test: its actor, its proxy's address, its process."""

    name: str  # "proxy" (today's), or "base" (--baseline's)
    actor: Any
    url: str
    rss: RssSampler


async def level(handle: Any, pods: list[Pod], n: int, turns: int, samples: int) -> dict[str, Any]:
    rounds = max(2, math.ceil(samples / (n * turns)))
    await direct_round(handle, n, turns, Latencies())  # warm-up, not counted
    for pod in pods:
        await proxy_round(pod, n, turns, f"warm{n}{pod.name}", Latencies())
    before = {pod.name: pod.rss.reset() for pod in pods}
    paths = {"direct": Latencies(), **{pod.name: Latencies() for pod in pods}}
    procs = {"client": psutil.Process(), **{pod.name: pod.rss.proc for pod in pods}}

    def work(name: str, r: int) -> Any:
        if name == "direct":
            return direct_round(handle, n, turns, paths[name])
        pod = next(p for p in pods if p.name == name)
        return proxy_round(pod, n, turns, f"c{n}r{r}{name}", paths[name])

    names = list(paths)
    for r in range(rounds):  # alternating, the first path rotated every round
        k = r % len(names)
        for name in names[k:] + names[:k]:
            await timed(work(name, r), paths[name], procs)
    rss = {pod.name: (before[pod.name], pod.rss.peak, pod.rss.rss()) for pod in pods}
    return {"n": n, "paths": paths, "rss": rss}


def added(proxy: Latencies, direct: Latencies, q: float) -> tuple[float, float]:
    """What the proxy adds at percentile ``q``: (to the first content, to the end)."""
    return (
        pct(proxy.ttft, q) - pct(direct.ttft, q),
        pct(proxy.total, q) - pct(direct.total, q),
    )


def report(rows: list[dict[str, Any]], turns: int) -> None:
    print(f"turns per session {turns}; latencies in ms; added = proxy - direct at that percentile")
    print(
        "CPU ms/call: the pod's while its sessions ran (calls), the same with the round's"
        " attempts opened and closed by actor calls (round), the bench's own (client)"
    )
    head = (
        f"{'sessions':>8} {'calls':>6} {'path':>7} {'ttft p50':>9} {'ttft p99':>9}"
        f" {'total p50':>10} {'total p99':>10} {'errors':>7} {'CPU calls,round,client':>23}"
        "  pod RSS MiB before/peak/after"
    )
    print(head)
    for row in rows:
        d = row["paths"]["direct"]
        for name, path in row["paths"].items():
            pod = (path.cpu_ms_per_call("path"), path.cpu_ms_per_call(name))
            if name == "direct":
                pod = (0.0, 0.0)
            rss = row["rss"].get(name)
            print(
                f"{row['n']:>8} {len(path.total):>6} {name:>7} {pct(path.ttft, 0.5):9.2f}"
                f" {pct(path.ttft, 0.99):9.2f} {pct(path.total, 0.5):10.2f}"
                f" {pct(path.total, 0.99):10.2f} {path.errors:>7}"
                f" {pod[0]:>8.2f},{pod[1]:>6.2f},{path.cpu_ms_per_call('client'):>6.2f}"
                + ("  " + "/".join(f"{b / MiB:.0f}" for b in rss) if rss else "")
            )
        for name, p in row["paths"].items():
            if name == "direct":
                continue
            print(
                f"{'':>8} {'':>6} {'in ' + name:>7} {'':>9} {'':>9} {pct(p.inner, 0.5):10.2f}"
                f" {pct(p.inner, 0.99):10.2f}  (the pod's own Policy call)"
            )
            (t50, e50), (t99, e99) = added(p, d, 0.5), added(p, d, 0.99)
            print(f"{'':>8} {'':>6} {'+' + name:>7} {t50:9.2f} {t99:9.2f} {e50:10.2f} {e99:10.2f}")


def ratio(before: float, after: float) -> str:
    return f"{before / after:.1f}x" if after > 0 and before > 0 else "-"


def compare(rows: list[dict[str, Any]], rev: str) -> None:
    """Today's pod beside --baseline's: CPU per call (while the sessions ran, and with the
    attempts' actor calls), added latency to the end of the stream; ratio = base / now."""
    print(f"\nbaseline {rev} vs now (ratio = baseline / now)")
    columns = ("CPU ms/call", "with open/close", "added p50 ms", "added p99 ms")
    heads = "".join(f" {c + ' base':>20} {'now':>7} {'ratio':>6}" for c in columns)
    print(f"{'sessions':>8}{heads}")
    for row in rows:
        paths = row["paths"]
        base, now, d = paths["base"], paths["proxy"], paths["direct"]
        pairs = [
            (base.cpu_ms_per_call("path"), now.cpu_ms_per_call("path")),
            (base.cpu_ms_per_call("base"), now.cpu_ms_per_call("proxy")),
            (added(base, d, 0.5)[1], added(now, d, 0.5)[1]),
            (added(base, d, 0.99)[1], added(now, d, 0.99)[1]),
        ]
        print(
            f"{row['n']:>8}" + "".join(f" {b:>20.2f} {a:>7.2f} {ratio(b, a):>6}" for b, a in pairs)
        )


def pod_pid(actor: Any) -> int:
    return ray_state.actors(actor_id=actor._actor_id.hex())["Pid"]  # the GCS actor table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,32,256", help="concurrent sessions per level")
    parser.add_argument("--turns", type=int, default=4, help="calls per session")
    parser.add_argument("--samples", type=int, default=512, help="least calls per path and level")
    parser.add_argument("--baseline", metavar="REV", help="also run the HarnessPod of REV")
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    tree = extract_tree(args.baseline) if args.baseline else None
    init_ray(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    config = PolicyConfig(engine={"name": "scripted"}, batch_wait_ms=0, num_cpus=1)
    handle = deploy_policy(config, app_name="bench-policy")
    pods = []
    for name, where in (("proxy", None), ("base", tree))[: 2 if tree else 1]:
        actor = (
            ray.remote(TreeActor)
            .options(num_cpus=0.5)
            .remote(where and str(where), POD, handle, pod_id=f"bench-{name}")
        )
        url = ray.get(actor.call.remote("start"))
        pods.append(Pod(name, actor, url, RssSampler(pod_pid(actor))))
        rev = args.baseline if where else "now"
        print(f"{name} ({rev}): {ray.get(actor.where.remote())}")

    async def run() -> list[dict[str, Any]]:
        return [await level(handle, pods, n, args.turns, args.samples) for n in levels]

    t0 = time.perf_counter()
    rows = asyncio.run(run())
    for pod in pods:
        pod.rss.stop()
    report(rows, args.turns)
    if tree is not None:
        compare(rows, args.baseline)
    errors = sum(p.errors for r in rows for p in r["paths"].values())
    print(f"errors {errors}; {time.perf_counter() - t0:.0f} s")
    for pod in pods:
        ray.get(pod.actor.call.remote("stop"))
        ray.kill(pod.actor)
    ray.shutdown()
    if tree is not None:
        shutil.rmtree(tree, ignore_errors=True)


if __name__ == "__main__":
    main()
