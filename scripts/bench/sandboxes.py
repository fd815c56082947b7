"""Sandbox latency per backend: local (bubblewrap), docker and kubernetes (kmock), side by side.

One run, same host, same proxy listener: for each backend, create, first exec, exec (``true``,
median/p95/mean of N), file round trip (put 1 KiB + get) and destroy, each over a few sandboxes.
Ratios are against local. Then, per container backend, warm pools (``sandbox.warm_pool``,
``scripts/bench/sandboxes_warm.py``): an attempt's create without a pool against the handover
of a warm sandbox (alternating, the pool full before each), and a burst of sandboxes created
at once from threads without a pool and with a full pool of the burst's size. The container
backends run in a private dockerd started here (its own root under the temp dir, no
iptables/bridge) and stopped by its pid at the end; the base image is imported from the cached
Debian root filesystem (bootstrapped if missing).
Kubernetes reuses the end-to-end tests' setup: kmock (an emulated API server) plus the
test-only controller that starts each pod as a container of that dockerd (host network, the
agent on a unique loopback IP). The reference is Orchard Env's published 0.28 s average exec
latency; the container backends target under 50 ms here.

    .venv/bin/python scripts/bench/sandboxes.py [--n 50] [--burst 32] [--reps 3]
        [--warm-reps 5] [--backends local,docker,kubernetes]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from forge.config import SandboxConfig
from forge.sandboxes import dockerd
from forge.sandboxes.base import Sandbox, SandboxSpec
from forge.sandboxes.registry import sandbox_for
from forge.sandboxes.tmproot import private_root
from tests.forge.httpstub import StubServer

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its parts, however it is loaded

# isort: split
import sandboxes_warm

BACKENDS = ("local", "docker", "kubernetes")
ORCHARD_EXEC_S = 0.28  # Orchard Env's published average exec latency
TARGET_S = 0.050  # what the container backends aim for here
PAYLOAD = os.urandom(1024)
NS = "bench"
PARENT = Path(tempfile.gettempdir()) / "openforge-bench-dockerd"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def labels(episode: str, attempt: int) -> dict[str, str]:
    return {"run": "bench", "pod": "bench-pod", "episode": episode, "attempt": str(attempt)}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


class Proxy:
    """A tiny HTTP listener standing in for the attempt's proxy: a Unix socket (local, docker)
    and loopback TCP (kubernetes pods reach it by address)."""

    def __init__(self, tmp: Path) -> None:
        ok = lambda m, p, h, b: (200, {"ok": True}, {})  # noqa: E731
        self.unix = StubServer(ok, unix_path=str(tmp / "proxy.sock"))
        self.tcp = StubServer(ok)
        self.socket = str(tmp / "proxy.sock")

    def close(self) -> None:
        self.unix.close()
        self.tcp.close()


def measure(
    make: Callable[[], Sandbox], spec: Callable[[int], SandboxSpec], n: int, reps: int
) -> dict[str, list[float]]:
    """Per-phase samples in seconds over ``reps`` sandboxes (N execs and round trips in the
    first one)."""
    out: dict[str, list[float]] = {k: [] for k in ("create", "first", "exec", "rt", "destroy")}
    for rep in range(reps):
        one_sandbox(make(), spec(rep), n if rep == 0 else 0, out)
    return out


def one_sandbox(box: Sandbox, spec: SandboxSpec, n: int, out: dict[str, list[float]]) -> None:
    try:
        dt, _ = timed(lambda: box.create(spec))
        out["create"].append(dt)
        dt, r = timed(lambda: box.exec(["true"], 30))
        if r.exit_code != 0:
            raise RuntimeError(f"first exec failed: {r.exit_code} {r.stderr[-300:]}")
        out["first"].append(dt)
        for _ in range(n):
            dt, r = timed(lambda: box.exec(["true"], 30))
            assert r.exit_code == 0, r.stderr
            out["exec"].append(dt)
        for i in range(max(5, n // 5) if n else 0):
            path = f"bench/f{i}.bin"
            t0 = time.perf_counter()
            box.put_file(path, PAYLOAD)
            got = box.get_file(path)
            out["rt"].append(time.perf_counter() - t0)
            assert got == PAYLOAD, "file round trip changed the bytes"
    finally:
        dt, _ = timed(box.destroy)
    out["destroy"].append(dt)


@contextlib.contextmanager
def private_daemon() -> Iterator[dockerd.Daemon]:
    """A dockerd of our own, stopped by its pid on the way out; the base image built in it."""
    import docker

    from forge.images import builder

    private_root(PARENT)  # a private folder of ours, never one another user made
    dockerd.sweep_stale(PARENT)
    root = Path(tempfile.mkdtemp(prefix="d", dir=PARENT))
    daemon = dockerd.start_daemon(root)
    try:
        client = docker.DockerClient(base_url=daemon.host, timeout=300)
        t0 = time.monotonic()
        builder.build_base(client, progress=lambda m: print(f"  [images] {m}", flush=True))
        print(f"  [images] base ready in {time.monotonic() - t0:.1f}s", flush=True)
        client.close()
        yield daemon
    finally:
        dockerd.stop_daemon(daemon)  # unmounts what it left in its folder
        shutil.rmtree(root, ignore_errors=True)


def kube_cluster(daemon: dockerd.Daemon) -> Any:
    """kmock plus the test-only controller making its pods containers of ``daemon``."""
    from tests.forge.sandboxes.kube_controller import emulated_cluster

    return emulated_cluster(daemon.host, NS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50, help="exec samples per backend")
    parser.add_argument("--burst", type=int, default=32, help="sandboxes created at once (0: none)")
    parser.add_argument("--warm-reps", type=int, default=5, help="creates and handovers each")
    parser.add_argument("--reps", type=int, default=3, help="sandboxes per backend (create...)")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    args = parser.parse_args()
    wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(wanted) - set(BACKENDS)
    if unknown:
        parser.error(f"unknown backends {sorted(unknown)}; known: {', '.join(BACKENDS)}")
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)  # burst > pool size

    results: dict[str, dict[str, list[float]]] = {}
    skipped: dict[str, str] = {}
    warm: dict[str, dict[str, Any]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="forge-bench-sb-"))
    proxy = Proxy(tmp)
    stack = contextlib.ExitStack()
    try:
        if "local" in wanted:
            print("local: bubblewrap ...", flush=True)
            config = SandboxConfig(backend="local", root=str(tmp / "local"))
            spec = lambda i: SandboxSpec(  # noqa: E731
                labels=labels("local", i), deadline_s=600, proxy_socket=proxy.socket
            )
            results["local"] = measure(lambda: sandbox_for(config, None), spec, args.n, args.reps)
        daemon: dockerd.Daemon | None = None
        if "docker" in wanted or "kubernetes" in wanted:
            print("starting a private dockerd ...", flush=True)
            try:
                daemon = stack.enter_context(private_daemon())
            except Exception as e:  # no dockerd, not root, no debootstrap: say so, go on
                for b in ("docker", "kubernetes"):
                    if b in wanted:
                        skipped[b] = f"no private dockerd: {type(e).__name__}: {e}"
        if daemon is not None and "docker" in wanted:
            print("docker ...", flush=True)
            config = SandboxConfig(
                backend="docker",
                docker_host=daemon.host,
                cpus=0.5,
                memory_mb=256,
                pids=128,
                start_timeout_s=120,
                root=str(tmp),
            )
            spec = lambda i: SandboxSpec(  # noqa: E731
                labels=labels("docker", i), deadline_s=600, proxy_socket=proxy.socket
            )
            results["docker"] = measure(lambda: sandbox_for(config, None), spec, args.n, args.reps)
            print(f"docker warm pool: create vs handover, burst of {args.burst} ...", flush=True)
            wspec = lambda what, i: SandboxSpec(  # noqa: E731
                labels=labels(what, i), deadline_s=600, proxy_socket=proxy.socket
            )
            warm["docker"] = sandboxes_warm.run(
                lambda size: sandbox_for(pooled(config, size), None), wspec, args.warm_reps,
                args.burst,
            )  # fmt: skip
        if daemon is not None and "kubernetes" in wanted:
            print("kubernetes (kmock + test controller) ...", flush=True)
            try:
                from forge.sandboxes.kube_reconcile import RetryPolicy
                from forge.sandboxes.kubernetes import KubernetesSandbox, KubeSettings

                kube, _ = stack.enter_context(kube_cluster(daemon))
            except ImportError as e:
                skipped["kubernetes"] = f"kubernetes wiring missing: {e}"
            else:
                port = random.randint(20000, 40000)  # host network: avoid other agents' ports
                settings = KubeSettings(namespace=NS, agent_port=port, pod_start_timeout_s=60)
                api = kube.client()
                spec = lambda i: SandboxSpec(  # noqa: E731
                    labels=labels("kube", i), deadline_s=600, proxy_tcp=proxy.tcp.address
                )
                policy = RetryPolicy()  # one for all: a warm pool serves sandboxes made alike
                results["kubernetes"] = measure(
                    lambda: KubernetesSandbox(settings=settings, api=api, policy=policy),
                    spec,
                    args.n,
                    args.reps,
                )
                print(f"kubernetes warm pool: create vs handover, burst of {args.burst} ...")
                wspec = lambda what, i: SandboxSpec(  # noqa: E731
                    labels=labels(what, i), deadline_s=600, proxy_tcp=proxy.tcp.address
                )
                cfg = SandboxConfig(backend="kubernetes", kubernetes=settings)
                warm["kubernetes"] = sandboxes_warm.run(
                    lambda size: KubernetesSandbox(pooled(cfg, size), None, settings=settings,
                                                   api=api, policy=policy),
                    wspec, args.warm_reps, args.burst,
                )  # fmt: skip
                left = kube.objects("v1/pods", NS)
                assert left == {}, f"pods left in kmock: {sorted(left)}"
    finally:
        stack.close()
        proxy.close()
        shutil.rmtree(tmp, ignore_errors=True)

    report(results, skipped, args)
    sandboxes_warm.report(warm, args.warm_reps)
    print(f"command: .venv/bin/python scripts/bench/sandboxes.py {' '.join(sys.argv[1:])}".rstrip())


def pooled(config: SandboxConfig, size: int) -> SandboxConfig:
    """``config`` with a warm pool of ``size`` (0: none), filled ``size`` at a time at most."""
    pool = {"size": size, "fill_parallel": max(1, min(size, 4))}
    return config.model_copy(update={"warm_pool": config.warm_pool.model_copy(update=pool)})


def ratio(a: float, b: float) -> str:
    r = a / b
    return f"{r:.1f}x" if r >= 10 else f"{r:.2f}x" if r >= 0.1 else f"{r:.3f}x"


def report(
    results: dict[str, dict[str, list[float]]],
    skipped: dict[str, str],
    args: argparse.Namespace,
) -> None:
    cols = [b for b in BACKENDS if b in results]
    rows: list[tuple[str, Callable[[dict[str, list[float]]], float]]] = [
        ("create (median)", lambda r: statistics.median(r["create"])),
        ("first exec (median)", lambda r: statistics.median(r["first"])),
        ("exec `true` p50", lambda r: statistics.median(r["exec"])),
        ("exec `true` p95", lambda r: pct(r["exec"], 0.95)),
        ("exec `true` mean", lambda r: statistics.fmean(r["exec"])),
        ("file round trip p50 (1 KiB)", lambda r: statistics.median(r["rt"])),
        ("file round trip p95", lambda r: pct(r["rt"], 0.95)),
        ("destroy (median)", lambda r: statistics.median(r["destroy"])),
    ]
    ratio_cols = [b for b in cols if b != "local"] if "local" in cols else []
    print()
    print(
        f"n={args.n} execs, {max(5, args.n // 5)} round trips, {args.reps} sandboxes per backend "
        "(create, first exec, destroy); times in ms"
    )
    head = f"{'':30s}" + "".join(f"{c:>12s}" for c in cols)
    head += "".join(f"{c[:4] + '/local':>12s}" for c in ratio_cols)
    print(head)
    for name, fn in rows:
        vals = {c: fn(results[c]) for c in cols}
        line = f"{name:30s}" + "".join(f"{vals[c] * 1000:12.1f}" for c in cols)
        line += "".join(f"{ratio(vals[c], vals['local']):>12s}" for c in ratio_cols)
        print(line)
    print(
        "notes: local create makes folders only (bubblewrap starts per exec); kubernetes "
        "destroy is the pod DELETE (the test controller removes the container after)"
    )
    for b, why in skipped.items():
        print(f"{b}: skipped ({why})")
    print(
        f"reference: Orchard Env's published average exec latency {ORCHARD_EXEC_S * 1000:.0f} ms; "
        f"target for the container backends here < {TARGET_S * 1000:.0f} ms"
    )
    for c in cols:
        if c == "local":
            continue
        mean = statistics.fmean(results[c]["exec"])
        verdict = "meets" if mean < TARGET_S else "misses"
        print(
            f"  {c}: mean exec {mean * 1000:.1f} ms, {ORCHARD_EXEC_S / mean:.1f}x faster than "
            f"Orchard Env's 280 ms; {verdict} the {TARGET_S * 1000:.0f} ms target"
        )


if __name__ == "__main__":
    main()
