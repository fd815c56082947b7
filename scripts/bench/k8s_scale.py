"""A thousand kubernetes sandboxes, simulated: create, one exec, delete, through the real backend.

Real: forge's ``KubernetesSandbox`` (create -> watch -> agent ready -> exec -> destroy), its
token bucket and retry policy, the official ``kubernetes`` client from ``api_client``, the
driver's reconcile pass, kmock (an emulated API server, tests/forge/sandboxes/kube_scale.py) and
a handful of real sandbox agents (``forge/sandboxes/agent.py``, one process each) on distinct
loopback IPs. The sandboxes belong to HarnessPods (``--per-harness-pod`` each; 1, as in the
design), each with its own API client, token bucket, run set-up and heartbeat Lease, as if in
a process of its own; a few forked processes (``--processes``) host them. Stood in: the
kubelet (no container: each new pod is patched Running, ``--pod-start-s`` +-50% after its
creation, with the IP of one of the real agents, round-robin; exempt from latency and limit and
not counted, as a cluster's kubelets are many and in their own APF priority level); the
per-pod agent token (one shared token so a few agents serve many pods); the API
server's latency (``--latency-ms``, jittered +-50%) and its rate limit (``--qps-limit`` a
second, beyond it 429 with ``Retry-After: 1``; watches exempt). kmock runs in its own process,
so its CPU time is reported apart from the backend's.

    .venv/bin/python scripts/bench/k8s_scale.py [--sizes 100,300,1000] [--quick]
        [--latency-ms 10] [--qps-limit 50] [--agents 8] [--per-harness-pod 125]
        [--client-qps 10 --client-burst 20] [--pod-start-s 2] [--per-harness-pod 1]
        [--processes 8] [--heartbeat-s 10]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import math
import multiprocessing
import os
import resource
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

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.forge.sandboxes.kube_scale import EmulatorProcess  # noqa: E402

NS = "forge-scale"
TOKEN = secrets.token_hex(32)
AGENT_PORT = 18937
WAIT_S = 1800.0
DRIVER_UA = "scale-driver"


@contextlib.contextmanager
def agents(n: int) -> Iterator[tuple[list[str], list[subprocess.Popen]]]:
    """``n`` real sandbox agents on 127.88.<pid>.<i>:AGENT_PORT sharing TOKEN."""
    ips = [f"127.88.{os.getpid() % 250}.{i + 2}" for i in range(n)]  # apart per process
    procs, tmp = [], Path(tempfile.mkdtemp(prefix="k8s-scale-"))
    env = {**os.environ, "FORGE_AGENT_TOKEN": TOKEN}
    for ip in ips:
        ws, home = tmp / ip / "ws", tmp / ip / "home"
        ws.mkdir(parents=True)
        home.mkdir(parents=True)
        argv = [sys.executable, "-m", "forge.sandboxes.agent", "--listen", f"{ip}:{AGENT_PORT}",
                "--workspace", str(ws), "--home", str(home)]  # fmt: skip
        procs.append(subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))  # fmt: skip
    try:
        for ip in ips:  # every agent listening before the clock starts
            for _ in range(600):
                with contextlib.suppress(OSError), socket.create_connection((ip, AGENT_PORT), 1):
                    break
                time.sleep(0.05)
        yield ips, procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@dataclass
class Result:
    pods: int
    harness_pods: int = 1
    processes: int = 1
    ready_s: float = 0.0
    total_s: float = 0.0
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    calls: dict[tuple[str, str], int] = field(default_factory=dict)
    status: dict[tuple[str, int], int] = field(default_factory=dict)
    per_run: int = 0
    peak_qps: int = 0
    mean_qps: float = 0.0
    r429: int = 0
    reap: tuple[int, float, float] = (0, 0.0, 0.0)  # calls, seconds, driver CPU seconds
    sweep: tuple[int, float] = (0, 0.0)
    list_bytes: int = 0
    create_p50: float = 0.0
    create_max: float = 0.0
    cpu_client_s: float = 0.0
    cpu_emulator_s: float = 0.0  # kmock's event loop thread
    cpu_kubelet_s: float = 0.0  # the stand-in kubelet's thread
    cpu_agents_s: float = 0.0
    emu_requests: int = 0
    conns: int = 0
    watch_peak: int = 0
    threads_peak: int = 0
    rss_client_mb: float = 0.0
    pool_full: int = 0
    load: float = 0.0


class PoolFull(logging.Handler):
    """Counts urllib3's "Connection pool is full, discarding connection" warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += "pool is full" in record.getMessage()


def host(idx: int, hps: list[int], per_hp: int, url: str, kw: dict[str, Any],
         sync: dict[str, Any]) -> None:  # fmt: skip
    """HarnessPods ``hps`` (a forked process hosting them, to spread the client's CPU over a
    few processes), ``per_hp`` sandboxes each, as if each were its own process: its own API
    client (from ``kube_api.api_client``), token bucket, run set-up and heartbeat Lease. Every
    sandbox is created (then the all-ready barrier), used for one exec and deleted; the
    figures go to ``sync['out']``."""
    from forge.config import SandboxConfig
    from forge.sandboxes import kube_api, kube_calls, kubernetes
    from forge.sandboxes.base import SandboxSpec

    real_hex = secrets.token_hex
    kubernetes.secrets.token_hex = lambda k=32: TOKEN if k == 32 else real_hex(k)  # type: ignore
    cfg = SandboxConfig.model_validate({"kubernetes": {
        "namespace": NS, "api_url": url, "agent_port": AGENT_PORT, "qps": kw["client_qps"],
        "burst": kw["client_burst"], "pod_start_timeout_s": 600,
        "heartbeat_s": kw["heartbeat_s"]}})  # fmt: skip
    boxes, labels = [], []
    for h in hps:
        kube_api._clients.clear()  # a client of its own, as in a process of its own
        api = kube_api.api_client(cfg.kubernetes)
        bucket = kube_calls.TokenBucket(cfg.kubernetes.qps, cfg.kubernetes.burst)
        for i in range(per_hp):
            boxes.append(kubernetes.KubernetesSandbox(cfg, None, api=api, bucket=bucket))
            labels.append({"run": "scale", "episode": f"e{h}-{i}", "attempt": "0",
                           "pod": f"hp-{h}"})  # fmt: skip
    n = len(boxes)
    gate, go_on, lock = threading.Barrier(n + 1), threading.Event(), threading.Lock()
    out: dict[str, Any] = {"created": [], "ok": 0, "failed": [], "threads": 0}

    def sample() -> None:
        while not go_on.wait(0.1):
            out["threads"] = max(out["threads"], threading.active_count())

    def one(i: int) -> None:
        t0 = time.perf_counter()
        spec = SandboxSpec(labels=labels[i], deadline_s=3600, proxy_tcp="127.0.0.1:1")
        try:
            boxes[i].create(spec)
            with lock:
                out["created"].append(time.perf_counter() - t0)
        except Exception as e:
            out["failed"].append(f"create {idx}/{i}: {type(e).__name__}: {str(e)[:200]}")
        gate.wait()
        go_on.wait()
        try:
            if boxes[i].name and boxes[i].pod_ip:
                r = boxes[i].exec(["true"], 60)
                with lock:
                    out["ok"] += r.exit_code == 0
                if r.exit_code:
                    out["failed"].append(f"exec {idx}/{i}: exit {r.exit_code}")
        except Exception as e:
            out["failed"].append(f"exec {idx}/{i}: {type(e).__name__}: {str(e)[:200]}")
        finally:
            boxes[i].destroy()

    full = PoolFull()
    pool_log = logging.getLogger("urllib3.connectionpool")
    pool_log.setLevel(logging.WARNING)
    pool_log.addHandler(full)
    pool_log.propagate = False
    threading.Thread(target=sample, daemon=True).start()
    sync["start"].wait()
    cpu0 = cpu_s()
    with ThreadPoolExecutor(n) as pool:
        futs = [pool.submit(one, i) for i in range(n)]
        gate.wait()
        sync["ready"].wait(WAIT_S)
        sync["release"].wait(WAIT_S)
        go_on.set()
        for f in futs:
            f.result()
    kubernetes.shutdown()
    out["cpu_s"], out["pool_full"] = cpu_s() - cpu0, full.count
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    sync["out"].put(out)


def calls_of(emu: EmulatorProcess) -> int:
    """Requests the driver (this process) has sent so far, 429s included."""
    return emu.stats().get("by_ua", {}).get(DRIVER_UA, 0)


def run_once(pods: int, latency_ms: float, qps_limit: float, n_agents: int, client_qps: float,
             client_burst: int, per_harness_pod: int = 1, pod_start_s: float = 0.0,
             processes: int = 8, heartbeat_s: float = 10.0) -> Result:  # fmt: skip
    """``pods`` sandboxes at once, ``per_harness_pod`` to a HarnessPod, the HarnessPods spread
    over up to ``processes`` forked processes: created (all ready: a barrier), one reconcile
    pass and one Reconciler sweep by the driver (this process) at full size, then one exec
    each and deleted."""
    from forge.config import KubernetesConfig, SandboxConfig
    from forge.sandboxes import kube_api, kube_calls, kubernetes  # imported before the forks
    from forge.sandboxes import kube_reconcile as kr

    for api_class in ("CoreV1Api", "NetworkingV1Api", "CoordinationV1Api"):  # lazy imports,
        getattr(kube_api.client, api_class)  # seconds each: done once here, before the forks
    if pods % per_harness_pod:
        raise ValueError(f"pods ({pods}) must be a multiple of per_harness_pod")
    hps = max(1, math.ceil(pods / per_harness_pod))
    nproc = min(processes, hps)
    res = Result(pods, hps, nproc)
    ctx = multiprocessing.get_context("fork")
    with agents(n_agents) as (ips, agent_procs):
        emu = EmulatorProcess(latency_ms / 1000, qps_limit, NS, ips, pod_start_s)
        try:
            sync = {"start": ctx.Event(), "release": ctx.Event(), "ready": ctx.Barrier(nproc + 1),
                    "out": ctx.Queue()}  # fmt: skip
            kw = {"client_qps": client_qps, "client_burst": client_burst,
                  "heartbeat_s": heartbeat_s}  # fmt: skip
            procs = [ctx.Process(target=host, args=(i, list(range(hps))[i::nproc], pods // hps,
                                                    emu.url, kw, sync), daemon=True)
                     for i in range(nproc)]  # fmt: skip
            for p in procs:
                p.start()
            driver_cfg = KubernetesConfig(namespace=NS, api_url=emu.url)
            kubernetes.reconciler(SandboxConfig(kubernetes=driver_cfg), "scale")  # sets it up
            kubernetes.shutdown()  # (forgets it: each HarnessPod is a process of its own)
            emu_cpu0 = emu.reset()
            agents_cpu0 = sum(sum(psutil.Process(p.pid).cpu_times()[:2]) for p in agent_procs)
            t0 = time.perf_counter()
            sync["start"].set()
            sync["ready"].wait(WAIT_S)
            res.ready_s = time.perf_counter() - t0
            res.load = os.getloadavg()[0]
            api = kube_api.api_client(driver_cfg)
            api.user_agent = DRIVER_UA  # its calls counted apart from the HarnessPods'
            before, ts, c0 = calls_of(emu), time.perf_counter(), cpu_s()
            kr.reap_pods(api, NS, "scale", orphans_only=True)
            mid = calls_of(emu)
            res.reap = (mid - before, time.perf_counter() - ts, cpu_s() - c0)
            ts = time.perf_counter()
            kr.Reconciler(api, NS, "scale").sweep()
            res.sweep = (calls_of(emu) - mid, time.perf_counter() - ts)
            from kubernetes import client

            raw = kube_calls.call(client.CoreV1Api(api).list_namespaced_pod, NS)  # with retries
            res.list_bytes = len(json.dumps(raw))
            sync["release"].set()
            outs = [sync["out"].get(timeout=WAIT_S) for _ in procs]
            for p in procs:
                p.join(30)
            res.total_s = time.perf_counter() - t0
            st = emu.stats()
            res.cpu_agents_s = (
                sum(sum(psutil.Process(p.pid).cpu_times()[:2]) for p in agent_procs) - agents_cpu0
            )
        finally:
            emu_cpu = emu.stop()
    res.cpu_emulator_s = emu_cpu.get("kmock", 0.0) - emu_cpu0.get("kmock", 0.0)
    res.cpu_kubelet_s = emu_cpu.get("kubelet", 0.0) - emu_cpu0.get("kubelet", 0.0)
    created = sorted(t for o in outs for t in o["created"])
    if created:
        res.create_p50, res.create_max = created[len(created) // 2], created[-1]
    res.ok = sum(o["ok"] for o in outs)
    res.failed = [f for o in outs for f in o["failed"]]
    res.cpu_client_s = sum(o["cpu_s"] for o in outs)
    res.threads_peak = max(o["threads"] for o in outs)
    res.rss_client_mb = max(o["rss_mb"] for o in outs)
    res.pool_full = sum(o["pool_full"] for o in outs)
    calls = collections.Counter(st.get("calls", {}))
    res.calls, res.status = dict(calls), dict(st.get("status", {}))
    res.per_run = sum(v for (verb, kind), v in calls.items() if kind != "pod")
    per_s = st.get("per_s", collections.Counter())
    res.peak_qps = max(per_s.values(), default=0)
    res.mean_qps = sum(per_s.values()) / max(1, len(per_s))
    res.r429 = st.get("429", 0)
    res.emu_requests = sum(calls.values()) + res.r429 + st.get("kubelet", 0)
    res.conns, res.watch_peak = st.get("conns", 0), st.get("watch_peak", 0)
    return res


SETUP = ("networkpolicies", "serviceaccounts", "configmaps")


def kinds(r: Result, which: tuple[str, ...]) -> int:
    return sum(v for (_verb, kind), v in r.calls.items() if kind in which)


def pod_calls(r: Result) -> dict[str, float]:
    """Calls on pods per sandbox, by verb (the driver's three LIST pods taken out)."""
    out: dict[str, float] = collections.defaultdict(float)
    for (verb, kind), v in r.calls.items():
        if kind == "pod":
            out[verb] += v
    out["GET"] -= 3  # reap_pods', the Reconciler's and the size probe's LIST
    return {k: v / r.pods for k, v in sorted(out.items())}


def report(rs: list[Result], args: argparse.Namespace) -> None:
    print(f"\nkmock latency {args.latency_ms} ms (+-50%), server limit {args.qps_limit} QPS "
          f"(429 Retry-After 1), client bucket qps={args.client_qps} burst={args.client_burst} "
          f"per HarnessPod, Lease renewed every {args.heartbeat_s} s, pods start after "
          f"{args.pod_start_s} s (+-50%), "
          f"{args.agents} real agents; {os.cpu_count()} CPUs, "
          f"1-min load now {os.getloadavg()[0]:.1f}")  # fmt: skip
    rows: list[tuple[str, list[str]]] = [
        ("sandboxes", [str(r.pods) for r in rs]),
        ("HarnessPods (own client, bucket, Lease)", [str(r.harness_pods) for r in rs]),
        ("processes hosting them", [str(r.processes) for r in rs]),
        ("ok (create+exec+delete)", [str(r.ok) for r in rs]),
        ("failed", [str(len(r.failed)) for r in rs]),
        ("time until all ready (s)", [f"{r.ready_s:.1f}" for r in rs]),
        ("create p50 / max (s)", [f"{r.create_p50:.1f} / {r.create_max:.1f}" for r in rs]),
        ("whole run (s)", [f"{r.total_s:.1f}" for r in rs]),
        ("1-min load at all ready", [f"{r.load:.1f}" for r in rs]),
    ]
    verbs = sorted({v for r in rs for v in pod_calls(r)})
    for v in verbs:
        rows.append((f"pod {v} per sandbox", [f"{pod_calls(r).get(v, 0):.2f}" for r in rs]))
    no_watch = [sum(c for v, c in pod_calls(r).items() if v != "WATCH") for r in rs]
    rows += [
        ("pod calls/sandbox w/o WATCH", [f"{c:.2f}" for c in no_watch]),
        ("per-run calls (ns, leases, LISTs)", [str(r.per_run) for r in rs]),
        ("  namespace set-up calls", [str(kinds(r, SETUP)) for r in rs]),
        ("  Lease calls (heartbeats)", [str(kinds(r, ("leases",))) for r in rs]),
        (
            "  Lease calls/s while the run lasted",
            [f"{kinds(r, ('leases',)) / max(r.total_s, 1e-9):.1f}" for r in rs],
        ),
        ("peak requests/s at server incl. 429s", [str(r.peak_qps) for r in rs]),
        ("mean API QPS while busy", [f"{r.mean_qps:.1f}" for r in rs]),
        ("429s sent (all retried)", [str(r.r429) for r in rs]),
        ("TCP connections opened", [str(r.conns) for r in rs]),
        ("connections discarded, pool full", [str(r.pool_full) for r in rs]),
        ("peak open watches", [str(r.watch_peak) for r in rs]),
        ("peak threads per hosting process", [str(r.threads_peak) for r in rs]),
        ("max RSS per hosting process (MiB)", [f"{r.rss_client_mb:.0f}" for r in rs]),
        ("backend CPU, all HarnessPods (s)", [f"{r.cpu_client_s:.1f}" for r in rs]),
        ("backend CPU per sandbox (ms)", [f"{1000 * r.cpu_client_s / r.pods:.1f}" for r in rs]),
        ("kmock CPU (s)", [f"{r.cpu_emulator_s:.1f}" for r in rs]),
        ("stand-in kubelet CPU (s)", [f"{r.cpu_kubelet_s:.1f}" for r in rs]),
        (
            "kmock CPU per request (ms)",
            [f"{1000 * r.cpu_emulator_s / max(1, r.emu_requests):.2f}" for r in rs],
        ),
        ("agents CPU (s)", [f"{r.cpu_agents_s:.1f}" for r in rs]),
        (
            "reap pass: calls, s, driver CPU s",
            [f"{r.reap[0]}, {r.reap[1]:.2f}, {r.reap[2]:.2f}" for r in rs],
        ),
        ("Reconciler.sweep: calls, s", [f"{r.sweep[0]}, {r.sweep[1]:.2f}" for r in rs]),
        ("LIST pods size (KiB)", [f"{r.list_bytes / 1024:.0f}" for r in rs]),
    ]
    w = max(len(k) for k, _ in rows)
    for k, vals in rows:
        print(f"{k:<{w}}  " + "  ".join(f"{v:>16}" for v in vals))
    for r in rs:
        for f in r.failed[:5]:
            print(f"  [{r.pods}] {f}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> list[Result]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="100,300,1000", help="sandbox counts, one run each")
    p.add_argument("--quick", action="store_true", help="sizes 10,50")
    p.add_argument("--latency-ms", type=float, default=10.0)
    p.add_argument("--qps-limit", type=float, default=50.0)
    p.add_argument("--agents", type=int, default=8)
    p.add_argument("--per-harness-pod", type=int, default=1, help="sandboxes a HarnessPod")
    p.add_argument("--processes", type=int, default=8, help="processes hosting HarnessPods")
    p.add_argument("--heartbeat-s", type=float, default=10.0, help="each Lease's renewal")
    p.add_argument("--client-qps", type=float, default=10.0)
    p.add_argument("--client-burst", type=int, default=20)
    p.add_argument("--pod-start-s", type=float, default=2.0, help="kubelet start, +-50%%")
    args = p.parse_args(argv)
    sizes = [10, 50] if args.quick else [int(n) for n in args.sizes.split(",") if n]
    logging.basicConfig(level=logging.ERROR)
    rs = []
    for n in sizes:  # the table so far after each size
        print(f"running {n} sandboxes ...", flush=True)
        rs.append(run_once(n, args.latency_ms, args.qps_limit, args.agents, args.client_qps,
                           args.client_burst, args.per_harness_pod, args.pod_start_s,
                           args.processes, args.heartbeat_s))  # fmt: skip
        report(rs, args)
    return rs


if __name__ == "__main__":
    main()
