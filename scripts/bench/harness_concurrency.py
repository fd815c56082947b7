"""Concurrent episodes of real harnesses on this machine, and the memory they take.

For each ``harness:N`` it starts N HarnessPods on one scripted-oracle Policy and runs N episodes
of one smoke task at once, sampling (every 0.2 s) the resident memory of every sandbox's
process tree (bubblewrap and everything under it: the harness, its Node or Python, the tools it
runs). It prints whether all N finished and passed, the wall time, the peak memory of one
episode and the peak of all N together.

    .venv/bin/python scripts/bench/harness_concurrency.py [--harness pi:8,openclaw:2]
"""

from __future__ import annotations

import argparse
import threading
import time

import forge  # noqa: F401  (before ray: a loopback-only local cluster)

# isort: split
import psutil
import ray

from actors.harness_pod import HarnessPod
from forge.cluster import init_ray
from forge.config import PolicyConfig
from forge.harnesses.registry import get_harness
from serve.policy import deploy_policy
from tasks.loader import load_suite

TASK = "hello_file"


class MemoryWatch:
    """Peak resident memory of sandbox process trees (one tree per ``bwrap`` process)."""

    def __init__(self, every_s: float = 0.2) -> None:
        self.every_s = every_s
        self.peak_one = 0
        self.peak_all = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        trees = []
        for proc in psutil.process_iter(["name"]):
            if proc.info["name"] != "bwrap":
                continue
            try:
                if proc.parent() is not None and proc.parent().name() == "bwrap":
                    continue  # bwrap forks once inside its namespace: count the outer one only
                members = [proc, *proc.children(recursive=True)]
                trees.append(sum(p.memory_info().rss for p in members))
            except psutil.Error:
                continue
        if trees:
            self.peak_one = max(self.peak_one, max(trees))
            self.peak_all = max(self.peak_all, sum(trees))

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run(policy, harness: str, n: int, task) -> None:
    pods = [
        ray.remote(HarnessPod).options(num_cpus=0.1).remote(policy, pod_id=f"{harness}-{i}")
        for i in range(n)
    ]
    ray.get([p.start.remote() for p in pods])
    with MemoryWatch() as mem:
        t0 = time.perf_counter()
        eps = ray.get([p.run_episode.remote(task.model_dump(), harness) for p in pods])
        wall = time.perf_counter() - t0
    ray.get([p.stop.remote() for p in pods])
    for p in pods:
        ray.kill(p)
    ok = sum(ep.status == "ok" for ep in eps)
    passed = sum(ep.reward == 1.0 for ep in eps)
    failures = sorted({ep.failure for ep in eps if ep.failure})
    mib = 2**20
    print(
        f"{harness:14s} {n:2d} at once: {ok}/{n} finished, {passed}/{n} passed, {wall:6.1f} s; "
        f"peak memory {mem.peak_one / mib:6.0f} MiB per episode, {mem.peak_all / mib:6.0f} MiB "
        f"all together{'; failures: ' + ', '.join(failures) if failures else ''}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--harness", default="pi:8,openclaw:2", help="NAME:N,...")
    args = parser.parse_args()
    plan = [(name, int(n)) for name, n in (item.split(":") for item in args.harness.split(","))]
    for name, _ in plan:
        get_harness(name).ro_mounts()  # stops now if one is not installed
    task = next(t for t in load_suite("smoke") if t.id == TASK)
    init_ray()
    policy = deploy_policy(
        PolicyConfig(engine={"name": "scripted", "mode": "oracle"}, num_cpus=0.1), "bench-conc"
    )
    print(f"{psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB")
    for name, n in plan:
        run(policy, name, n, task)


if __name__ == "__main__":
    main()
