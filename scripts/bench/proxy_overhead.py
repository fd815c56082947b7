"""Per-call latency through a HarnessPod proxy versus calling the Policy deployment directly.

Same Policy deployment, same engine, same request, in one run, calls interleaved (direct, proxy,
direct, ...) so drift hits both alike. The proxy path is what a harness pays: HTTP to the pod,
auth, protocol parsing, the Serve call, recording the Turn, rendering the response.

    .venv/bin/python scripts/bench/proxy_overhead.py [--calls 300] [--engine scripted|torch]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import forge  # noqa: F401  (before ray: a loopback-only local cluster)

# isort: split
import httpx
import ray

from actors.harness_pod import HarnessPod
from forge.cluster import init_ray
from forge.config import PolicyConfig
from forge.types import ChatRequest, Message, SamplingParams, Tool
from serve.policy import deploy_policy

WARMUP = 20
TOOL = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}


class RawClient:
    """A minimal keep-alive HTTP/1.1 client: what a harness's own HTTP stack costs is not the
    proxy's, so the headline number uses this; httpx's figure is printed beside it."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        rest = url.split("://", 1)[1]
        hostport, self.path = rest.split("/", 1)
        self.host, port = hostport.split(":")
        self.port = int(port)
        self.headers = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes) -> bytes:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (
            f"POST /{self.path} HTTP/1.1\r\nHost: {self.host}\r\n{self.headers}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status = await self.reader.readline()
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        payload = await self.reader.readexactly(length)
        if b" 200 " not in status:
            raise RuntimeError(f"proxy answered {status!r}: {payload[:200]!r}")
        return payload


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


async def measure(handle, pod, calls: int, max_tokens: int) -> tuple[list[float], list[float]]:
    script = {"task_id": "bench", "steps": ["echo hello > out.txt"], "answer": "done"}
    info = await pod.open_attempt.remote("bench", 0, script=script)
    url = (await pod.address.remote()) + info["path"] + "/v1/chat/completions"
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "write hello to out.txt"}],
        "tools": [TOOL],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    tool = Tool("shell", "Run a shell command.", TOOL["function"]["parameters"])

    def chat() -> ChatRequest:
        return ChatRequest(
            [Message("user", "write hello to out.txt")],
            [tool],
            SamplingParams(temperature=0, max_tokens=max_tokens),
            model="tiny",
            script=script,
        )

    headers = {"Authorization": f"Bearer {info['api_key']}"}
    raw = RawClient(url, headers)
    payload = json.dumps(body).encode()
    times: dict[str, list[float]] = {"direct": [], "raw": [], "httpx": []}
    async with httpx.AsyncClient(headers=headers, timeout=60) as client:

        async def via_httpx() -> None:
            (await client.post(url, content=payload)).raise_for_status()

        paths = {
            "direct": lambda: handle.generate.remote(chat()),
            "raw": lambda: raw.post(payload),
            "httpx": via_httpx,
        }
        for i in range(calls + WARMUP):  # interleaved rounds; the first ones warm up
            for name, call in paths.items():
                t0 = time.perf_counter()
                await call()
                if i >= WARMUP:
                    times[name].append((time.perf_counter() - t0) * 1000)
    state = await pod.close_attempt.remote("bench", 0)
    assert len(state.turns) == 2 * (calls + WARMUP), "every proxied call must be recorded"
    times["inner"] = [t.latency_s * 1000 for t in state.turns[2 * WARMUP :]]
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--engine", default="scripted", choices=["scripted", "torch"])
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    init_ray(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    config = PolicyConfig(engine={"name": args.engine}, batch_wait_ms=0, num_cpus=1)
    handle = deploy_policy(config, app_name="bench-policy")
    pod = (
        ray.remote(HarnessPod)
        .options(num_cpus=0.5)
        .remote(
            handle, pod_id="bench-pod", proxy={"max_turns_per_attempt": 2 * (args.calls + WARMUP)}
        )
    )
    ray.get(pod.start.remote())
    t = asyncio.run(measure(handle, pod, args.calls, args.max_tokens))
    med = {k: statistics.median(v) for k, v in t.items()}
    p99 = {k: pct(v, 0.99) for k, v in t.items()}
    print(f"engine={args.engine} calls={args.calls} per path, interleaved, {WARMUP} warm-up rounds")
    print(f"{'':34s}{'median ms':>11s}{'p99 ms':>10s}")
    rows = [
        ("Policy handle, direct", "direct"),
        ("HarnessPod proxy, raw HTTP client", "raw"),
        ("HarnessPod proxy, httpx client", "httpx"),
        ("  of which the pod's Policy call", "inner"),
    ]
    for label, key in rows:
        print(f"{label:34s}{med[key]:11.2f}{p99[key]:10.2f}")
    for key, label in (("raw", "raw HTTP client"), ("httpx", "httpx client")):
        print(
            f"added by the proxy ({label}): median {med[key] - med['direct']:.2f} ms, "
            f"p99 {p99[key] - p99['direct']:.2f} ms; ratio {med[key] / med['direct']:.2f}x"
        )
    added = med["raw"] - med["direct"]
    print(f"target: under 2 ms added at the median -> {'met' if added < 2 else 'NOT met'}")
    ray.shutdown()


if __name__ == "__main__":
    main()
