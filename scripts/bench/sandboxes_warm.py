"""Warm pools in the sandbox bench (``scripts/bench/sandboxes.py``): for one container backend,
an attempt's create without a pool against the handover of a warm sandbox (alternating, the
pool full and idle before each), and a burst of sandboxes created at once from threads without
a pool and with a full pool of the burst's size (``sandbox.warm_pool``)."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from forge.sandboxes import warm_pool
from forge.sandboxes.base import Sandbox, SandboxSpec

FILL_S = 600.0  # the most a pool may take to fill (a burst's worth on 2 cores)
Make = Callable[[int], Sandbox]  # pool size (0: none) -> a new sandbox of the backend
Spec = Callable[[str, int], SandboxSpec]  # (what, i) -> the attempt's spec


def _full(pool: warm_pool.WarmPool | None) -> warm_pool.WarmPool:
    if pool is None or not pool.wait_full(FILL_S):
        raise RuntimeError(f"the warm pool did not fill: {pool!r}")
    return pool


def create_vs_handover(make: Make, spec: Spec, reps: int) -> dict[str, list[float]]:
    """Seconds of ``create`` per attempt: ``create`` without a pool, ``handover`` from a pool
    of one, alternating; every sandbox answers an exec before it is destroyed."""
    out: dict[str, list[float]] = {"create": [], "handover": []}
    pool = _full(warm_pool.prewarm(make(1), spec("warm", 0)))
    try:
        for i in range(reps):
            for kind, size in (("create", 0), ("handover", 1)):
                _full(pool)
                box, handed = make(size), pool.handed
                t0 = time.perf_counter()
                box.create(spec(kind, i))
                out[kind].append(time.perf_counter() - t0)
                try:
                    if (pool.handed - handed) != (kind == "handover"):
                        raise RuntimeError(f"{kind} {i}: not what was meant to be measured")
                    if box.exec(["true"], 30).exit_code != 0:
                        raise RuntimeError(f"{kind} {i}: exec failed")
                finally:
                    box.destroy()
    finally:
        warm_pool.shutdown()
    return out


def burst(make: Make, spec: Spec, size: int, warm: bool) -> dict[str, Any]:
    """``size`` sandboxes created at once from threads, without a pool or (``warm``) from a
    full pool of ``size``: wall, per-sandbox create times, how many were handed over, the
    pool's fill time (before the burst, in the background of a run) and the wall to destroy
    them all at once. The pool is closed right after the burst (no refill under the checks)."""
    fill, pool = 0.0, None
    if warm:
        t0 = time.perf_counter()
        pool = _full(warm_pool.prewarm(make(size), spec("burst-warm", 0)))
        fill = time.perf_counter() - t0
    boxes = [make(size if warm else 0) for _ in range(size)]
    gate = threading.Barrier(size)
    what = "burst-warm" if warm else "burst"

    def one(i: int) -> float:
        gate.wait()
        t0 = time.perf_counter()
        boxes[i].create(spec(what, i))
        return time.perf_counter() - t0

    try:
        with ThreadPoolExecutor(size) as ex:
            t0 = time.perf_counter()
            times = list(ex.map(one, range(size)))
            wall = time.perf_counter() - t0
        handed = pool.handed if pool is not None else 0
        warm_pool.shutdown()
        for b in boxes:  # every one answers
            if b.exec(["true"], 30).exit_code != 0:
                raise RuntimeError("a burst sandbox does not answer")
    finally:
        warm_pool.shutdown()
        with ThreadPoolExecutor(size) as ex:
            t0 = time.perf_counter()
            list(ex.map(lambda b: b.destroy(), boxes))
            destroy = time.perf_counter() - t0
    return {"wall": wall, "times": times, "handed": handed, "fill": fill, "destroy": destroy}


def run(make: Make, spec: Spec, reps: int, size: int) -> dict[str, Any]:
    """Both measurements for one backend (the burst skipped when ``size`` is 0)."""
    out: dict[str, Any] = {"latency": create_vs_handover(make, spec, reps)}
    if size > 0:
        out["cold"] = burst(make, spec, size, warm=False)
        out["warm"] = burst(make, spec, size, warm=True)
    return out


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def _ratio(a: float, b: float) -> str:
    r = a / b
    return f"{r:.1f}x" if r >= 10 else f"{r:.2f}x" if r >= 0.1 else f"{r:.3f}x"


def report(results: dict[str, dict[str, Any]], reps: int) -> None:
    """The warm-pool table: per backend, without a pool, with one, and their ratio."""
    if not results:
        return
    print()
    print(f"warm pools (sandbox.warm_pool): create vs handover, {reps} each, alternating; ms")
    cols = ("no pool", "warm", "warm/none")
    print(f"{'':34s}" + "".join(f"{b[:4] + ' ' + c:>20s}" for b in results for c in cols))
    rows: list[tuple[str, Callable[[list[float]], float]]] = [
        ("attempt's sandbox start p50 (ms)", statistics.median),
        ("attempt's sandbox start max (ms)", max),
    ]
    for name, fn in rows:
        line = f"{name:34s}"
        for r in results.values():
            a, b = fn(r["latency"]["create"]), fn(r["latency"]["handover"])
            line += f"{a * 1000:20.1f}{b * 1000:20.1f}{_ratio(b, a):>20s}"
        print(line)
    bursts = [("burst wall", "s", lambda x: x["wall"]),
              ("burst per-sandbox p50", "ms", lambda x: statistics.median(x["times"])),
              ("burst per-sandbox p95", "ms", lambda x: _pct(x["times"], 0.95))]  # fmt: skip
    for name, unit, fn in bursts:
        if not all("cold" in r for r in results.values()):
            break
        line = f"{name + f' ({unit})':34s}"
        for r in results.values():
            a, b = fn(r["cold"]), fn(r["warm"])
            scale = 1000 if unit == "ms" else 1
            line += f"{a * scale:20.2f}{b * scale:20.2f}{_ratio(b, a):>20s}"
        print(line)
    for backend, r in results.items():
        if "warm" in r:
            w, n = r["warm"], len(r["warm"]["times"])
            cold = r["cold"]["destroy"]
            print(f"  {backend}: burst of {n}: {w['handed']} of {n} handed over from the pool, "
                  f"which filled in {w['fill']:.1f}s beforehand; destroy all at once "
                  f"{cold:.2f}s (no pool) / {w['destroy']:.2f}s (warm)")  # fmt: skip
