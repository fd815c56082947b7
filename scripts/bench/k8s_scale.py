"""A thousand kubernetes sandboxes, simulated: create, one exec, delete, through the real backend.

Real: forge's ``KubernetesSandbox`` (create -> watch -> agent ready -> exec -> destroy), its
token bucket and retry policy, the official ``kubernetes`` client from ``api_client``, kmock
(an emulated API server, the tests' ``KMock``) and a handful of real sandbox agents
(``forge/sandboxes/agent.py``, one process each) on distinct loopback IPs. Stood in: the
kubelet (the tests' ``Kubelet`` with no container: it patches each new pod Running with the IP
of one of the real agents, round-robin, and is exempt from the server's latency and limit, as
a cluster's many kubelets are parallel and in their own APF priority level); the per-pod agent
token (patched to one shared token so a few agents can serve many pods); the API server's
latency (``--latency-ms``, jittered +-50%) and its rate limit (a token bucket of
``--qps-limit`` a second: beyond it 429 with ``Retry-After: 1``, like APF; watches exempt).

    .venv/bin/python scripts/bench/k8s_scale.py [--pods 1000] [--compare 100] [--quick]
        [--latency-ms 10] [--qps-limit 50] [--agents 8] [--client-qps 10 --client-burst 20]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import logging
import os
import random
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.forge.sandboxes.kube_controller import (  # noqa: E402
    RESOURCES,
    FaultyEmulator,
    KMock,
    Kubelet,
)

NS = "forge-scale"
KUBELET_UA = "standin-kubelet"
TOKEN = secrets.token_hex(32)
AGENT_PORT = 18937


@attrs.define(kw_only=True)
class ScaleEmulator(FaultyEmulator):
    """kmock with latency and a server-side token bucket; counts what reaches it."""

    latency_s: float = 0.01
    qps_limit: float = 50.0
    stats: dict[str, Any] = attrs.field(factory=dict)
    _tokens: float = 0.0
    _t: float = 0.0

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        ua = str((request.headers or {}).get("User-Agent", ""))
        params = dict(request.params)
        watching = params.get("watch") in ("true", "1", "True")
        method, path = str(request.method.value).upper(), request.url.path
        s = self.stats
        if ua == KUBELET_UA:
            s["kubelet"] = s.get("kubelet", 0) + 1
            return await super()._handle(request)
        sec = int(time.monotonic())
        s.setdefault("per_s", collections.Counter())[sec] += 1
        if not watching:
            now = time.monotonic()
            if not self._t:
                self._t, self._tokens = now, self.qps_limit
            self._tokens = min(self.qps_limit, self._tokens + (now - self._t) * self.qps_limit)
            self._t = now
            if self._tokens < 1.0:
                s["429"] = s.get("429", 0) + 1
                s.setdefault("429_at", []).append(now)
                body = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "TooManyRequests",
                    "code": 429,
                    "message": "too many requests",
                }
                return aiohttp.web.json_response(body, status=429, headers={"Retry-After": "1"})
            self._tokens -= 1.0
        await asyncio.sleep(self.latency_s * (0.5 + random.random()))
        verb = "WATCH" if watching else method
        kind = resource_of(path)
        s.setdefault("calls", collections.Counter())[(verb, kind)] += 1
        s.setdefault("seen", []).append((time.monotonic(), verb, kind))
        return await super()._handle(request)

    async def _serve_watch(self, request: Any) -> Any:
        """kmock ignores fieldSelector; a real API server sends a watch of one pod only its
        events (without this, each of N watches carries all N pods' events: N^2)."""
        fs = str(dict(request.params).get("fieldSelector", ""))
        want = fs.split("=", 1)[1] if fs.startswith("metadata.name=") else None
        async for ev in super()._serve_watch(request):
            if (
                want is None
                or not isinstance(ev, dict)
                or ((ev.get("object") or {}).get("metadata") or {}).get("name") == want
            ):
                yield ev


def resource_of(path: str) -> str:
    """'pod' for pods (and their status), else the resource's plural, from a request path."""
    parts = path.strip("/").split("/")
    if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
        kind = parts[parts.index("namespaces") + 2]
    else:
        kind = parts[-1]
    return "pod" if kind == "pods" else kind


class ScaleKMock(KMock):
    def __init__(self, latency_s: float, qps_limit: float) -> None:
        self.latency_s, self.qps_limit = latency_s, qps_limit
        super().__init__()

    async def _main(self) -> None:
        self._stopped = asyncio.Event()
        emu = ScaleEmulator(latency_s=self.latency_s, qps_limit=self.qps_limit)
        async with emu, kmock.Server(emu) as server:
            for key, info in RESOURCES.items():
                emu.resources[key] = info
            self.emu, self.url = emu, str(server.url).rstrip("/")
            self._ready.set()
            await self._stopped.wait()

    def stats(self) -> dict[str, Any]:
        def get(emu: Any) -> dict[str, Any]:
            s = emu.stats
            return {k: (v.copy() if hasattr(v, "copy") else v) for k, v in s.items()}

        return self.run(get)

    def reset(self) -> None:
        self.run(lambda emu: emu.stats.clear())


class StandinKubelet(Kubelet):
    """Marks each new pod Running with one of ``ips`` (real agents listen there); no process."""

    def __init__(self, kube: KMock, namespace: str, ips: list[str]) -> None:
        self.ips, self._n = ips, 0
        super().__init__(kube, namespace)

    def _loop(self) -> None:
        self.api.user_agent = KUBELET_UA
        super()._loop()

    def next_ip(self) -> str:
        self._n += 1
        return self.ips[self._n % len(self.ips)]

    def start_pod(self, pod: dict[str, Any], ip: str) -> Any:
        return None

    def stop_pod(self, handle: Any) -> None:
        pass


@contextlib.contextmanager
def agents(n: int) -> Iterator[list[str]]:
    """``n`` real sandbox agents on 127.88.<pid>.<i>:AGENT_PORT sharing TOKEN."""
    ips = [f"127.88.{os.getpid() % 250}.{i + 2}" for i in range(n)]  # apart per process
    procs, tmp = [], Path(tempfile.mkdtemp(prefix="k8s-scale-"))
    env = {**os.environ, "FORGE_AGENT_TOKEN": TOKEN}
    for ip in ips:
        ws, home = tmp / ip / "ws", tmp / ip / "home"
        ws.mkdir(parents=True)
        home.mkdir(parents=True)
        argv = [
            sys.executable,
            "-m",
            "forge.sandboxes.agent",
            "--listen",
            f"{ip}:{AGENT_PORT}",
            "--workspace",
            str(ws),
            "--home",
            str(home),
        ]
        procs.append(
            subprocess.Popen(
                argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        )
    try:
        for ip in ips:  # every agent listening before the clock starts
            for _ in range(600):
                with contextlib.suppress(OSError), socket.create_connection((ip, AGENT_PORT), 1):
                    break
                time.sleep(0.05)
        yield ips
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


@dataclass
class Result:
    pods: int
    ready_s: float = 0.0
    total_s: float = 0.0
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    calls: dict[tuple[str, str], int] = field(default_factory=dict)
    per_run: int = 0
    peak_qps: int = 0
    mean_qps: float = 0.0
    r429: int = 0
    honoured: bool | None = None
    reap: tuple[int, float] = (0, 0.0)
    sweep: tuple[int, float] = (0, 0.0)
    create_p50: float = 0.0
    create_max: float = 0.0


def run_once(pods: int, latency_ms: float, qps_limit: float, n_agents: int, client_qps: float,
             client_burst: int) -> Result:  # fmt: skip
    """``pods`` sandboxes at once: create (all ready: a barrier), one reconcile pass and one
    Reconciler sweep at full size, then one exec each and delete."""
    from forge.config import SandboxConfig
    from forge.sandboxes import kube_api, kubernetes
    from forge.sandboxes import kube_reconcile as kr
    from forge.sandboxes.base import SandboxSpec

    res = Result(pods)
    kube = ScaleKMock(latency_ms / 1000, qps_limit)
    real_hex = secrets.token_hex
    kubernetes.secrets.token_hex = lambda n=32: TOKEN if n == 32 else real_hex(n)  # type: ignore
    try:
        with agents(n_agents) as ips:
            kubelet = StandinKubelet(kube, NS, ips)
            cfg = SandboxConfig.model_validate(
                {
                    "kubernetes": {
                        "namespace": NS,
                        "api_url": kube.url,
                        "agent_port": AGENT_PORT,
                        "qps": client_qps,
                        "burst": client_burst,
                        "pod_start_timeout_s": 600,
                    }
                }
            )
            kube_api._clients.clear()
            kube_api._buckets.clear() if hasattr(kube_api, "_buckets") else None
            boxes = [kubernetes.KubernetesSandbox(cfg, None) for _ in range(pods)]
            gate, done = threading.Barrier(pods + 1), threading.Event()
            created: list[float] = []
            lock = threading.Lock()
            # per-run setup first (namespace objects, heartbeat Lease): counted apart
            kube.reset()

            def one(i: int) -> None:
                t0 = time.perf_counter()
                spec = SandboxSpec(labels={"run": "scale", "episode": f"e{i}", "attempt": "0",
                                           "pod": "hp-0"}, deadline_s=3600,
                                   proxy_tcp="127.0.0.1:1")  # fmt: skip
                try:
                    boxes[i].create(spec)
                    with lock:
                        created.append(time.perf_counter() - t0)
                except Exception as e:
                    res.failed.append(f"create {i}: {type(e).__name__}: {str(e)[:200]}")
                gate.wait()
                done.wait()
                try:
                    if boxes[i].name and boxes[i].pod_ip:
                        r = boxes[i].exec(["true"], 60)
                        if r.exit_code == 0:
                            with lock:
                                res.ok += 1
                        else:
                            res.failed.append(f"exec {i}: exit {r.exit_code}")
                except Exception as e:
                    res.failed.append(f"exec {i}: {type(e).__name__}: {str(e)[:200]}")
                finally:
                    boxes[i].destroy()

            t0 = time.perf_counter()
            with ThreadPoolExecutor(pods) as pool:
                futs = [pool.submit(one, i) for i in range(pods)]
                gate.wait()
                res.ready_s = time.perf_counter() - t0
                before = sum(kube.stats().get("calls", {}).values())
                api = kube_api.api_client(cfg.kubernetes)
                ts = time.perf_counter()
                kr.reap_pods(api, NS, "scale", orphans_only=True)
                mid = sum(kube.stats().get("calls", {}).values())
                res.reap = (mid - before, time.perf_counter() - ts)
                ts = time.perf_counter()
                kr.Reconciler(api, NS, "scale").sweep()
                res.sweep = (
                    sum(kube.stats().get("calls", {}).values()) - mid,
                    time.perf_counter() - ts,
                )
                done.set()
                for f in futs:
                    f.result()
            res.total_s = time.perf_counter() - t0
            st = kube.stats()
            kubelet.close()
            kubernetes.shutdown()
    finally:
        kubernetes.secrets.token_hex = real_hex  # type: ignore[assignment]
        kube.close()
    calls = collections.Counter(st.get("calls", {}))
    res.calls = dict(calls)
    res.per_run = sum(v for (verb, kind), v in calls.items() if kind != "pod")
    per_s = st.get("per_s", collections.Counter())
    res.peak_qps = max(per_s.values(), default=0)
    res.mean_qps = sum(per_s.values()) / max(1, len(per_s))
    res.r429 = st.get("429", 0)
    res.honoured = None
    created.sort()
    if created:
        res.create_p50, res.create_max = created[len(created) // 2], created[-1]
    return res


def pod_calls(r: Result) -> dict[str, float]:
    """Calls on pods per sandbox, by verb (the two reconcile LIST pods taken out)."""
    out: dict[str, float] = collections.defaultdict(float)
    for (verb, kind), v in r.calls.items():
        if kind == "pod":
            out[verb] += v
    out["GET"] -= 2  # reap_pods' and the Reconciler's LIST (GET on the collection)
    return {k: v / r.pods for k, v in sorted(out.items())}


def report(rs: list[Result], args: argparse.Namespace) -> None:
    print(f"\nkmock latency {args.latency_ms} ms (+-50%), server limit {args.qps_limit} QPS "
          f"(429 Retry-After 1), client bucket qps={args.client_qps} burst={args.client_burst}, "
          f"{args.agents} real agents; host load: {os.getloadavg()[0]:.1f} (1-min) on "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    rows: list[tuple[str, list[str]]] = [
        ("sandboxes", [str(r.pods) for r in rs]),
        ("ok (create+exec+delete)", [str(r.ok) for r in rs]),
        ("failed", [str(len(r.failed)) for r in rs]),
        ("time until all ready (s)", [f"{r.ready_s:.1f}" for r in rs]),
        ("create p50 / max (s)", [f"{r.create_p50:.1f} / {r.create_max:.1f}" for r in rs]),
        ("whole run (s)", [f"{r.total_s:.1f}" for r in rs]),
    ]
    verbs = sorted({v for r in rs for v in pod_calls(r)})
    for v in verbs:
        rows.append((f"pod {v} per sandbox", [f"{pod_calls(r).get(v, 0):.2f}" for r in rs]))
    rows.append(
        (
            "pod calls/sandbox w/o WATCH",
            [f"{sum(c for v, c in pod_calls(r).items() if v != 'WATCH'):.2f}" for r in rs],
        )
    )
    rows += [
        ("per-run calls (ns, lease, LISTs)", [str(r.per_run) for r in rs]),
        ("peak requests/s at server incl. 429s", [str(r.peak_qps) for r in rs]),
        ("mean API QPS while busy", [f"{r.mean_qps:.1f}" for r in rs]),
        ("429s sent (all retried)", [str(r.r429) for r in rs]),
        ("reap_pods orphans_only: calls, s", [f"{r.reap[0]}, {r.reap[1]:.2f}" for r in rs]),
        ("Reconciler.sweep: calls, s", [f"{r.sweep[0]}, {r.sweep[1]:.2f}" for r in rs]),
    ]
    w = max(len(k) for k, _ in rows)
    for k, vals in rows:
        print(f"{k:<{w}}  " + "  ".join(f"{v:>14}" for v in vals))
    if len(rs) == 2 and rs[0].ready_s:
        a, b = rs
        print(f"growth {a.pods}->{b.pods} ({b.pods / a.pods:.0f}x pods): ready time "
              f"{b.ready_s / a.ready_s:.1f}x, reconcile pass time "
              f"{b.reap[1] / max(a.reap[1], 1e-9):.1f}x")  # fmt: skip
    for r in rs:
        for f in r.failed[:5]:
            print(f"  [{r.pods}] {f}")


def main(argv: list[str] | None = None) -> list[Result]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", type=int, default=1000)
    p.add_argument("--compare", type=int, default=100, help="a smaller size run first (0: none)")
    p.add_argument("--quick", action="store_true", help="50 pods vs 10")
    p.add_argument("--latency-ms", type=float, default=10.0)
    p.add_argument("--qps-limit", type=float, default=50.0)
    p.add_argument("--agents", type=int, default=8)
    p.add_argument("--client-qps", type=float, default=10.0)
    p.add_argument("--client-burst", type=int, default=20)
    args = p.parse_args(argv)
    if args.quick:
        args.pods, args.compare = 50, 10
    logging.basicConfig(level=logging.ERROR)
    sizes = [n for n in (args.compare, args.pods) if n]
    rs = []
    for n in sizes:
        print(f"running {n} sandboxes ...", flush=True)
        rs.append(run_once(n, args.latency_ms, args.qps_limit, args.agents, args.client_qps,
                           args.client_burst))  # fmt: skip
    report(rs, args)
    return rs


if __name__ == "__main__":
    main()
