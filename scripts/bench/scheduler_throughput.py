"""Scheduler throughput with instant simulated episodes and no model.

The real Scheduler and ReplayBuffer actors (the buffer writes every record to disk as in a run);
each pod's ``run_episode`` returns a finished one-turn Episode at once (no sandbox, no harness,
no model), so what is measured is the Scheduler's own dispatch and collection: attempts
dispatched and collected per second, for each pod count, in one run.

A Ray actor is a worker process, and a thousand of them do not fit on 2 cores, so by default the
pods are *hosted*: ``--hosts`` Ray actors (4) each serve many simulated pods, and every pod is
still its own entry in the Scheduler's real pod pool (``actors.pod_pool.PodPool``: lent, busy,
released, replaced, retired one by one; only the actor creation is swapped). Every attempt is
still one actor call from the Scheduler to its pod's host. ``--hosts 0`` makes one Ray actor per
pod, as a HarnessPod is (use it for small pod counts).

``--baseline REV`` runs the same bench first against the ``actors/`` package of git revision REV
(extracted to a temporary directory, put first on PYTHONPATH, in a subprocess with its own Ray
cluster) and prints both side by side:

    .venv/bin/python scripts/bench/scheduler_throughput.py \\
        [--pods 16 64 256 1024] [--attempts 8192] [--hosts 4] [--baseline REV] [--address A]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import forge  # noqa: F401  (before ray: a loopback-only local cluster)

# isort: split
import ray

from actors.pod_pool import Pod, PodPool
from actors.replay_buffer import ReplayBuffer
from actors.scheduler import Scheduler
from forge.cluster import init_ray
from forge.config import RunConfig
from forge.types import Episode, Turn

ROOT = Path(__file__).resolve().parents[2]


def _episode(episode_id: str, attempt: int, task_id: str, harness: str) -> Episode:
    turn = Turn(
        episode_id,
        attempt,
        0,
        "chat",
        {},
        [1, 2],
        [3],
        [0.0],
        "x",
        [],
        "stop",
        0,
        0.0,
        time.time(),
    )
    return Episode(episode_id, task_id, attempt, harness, 1.0, "ok", turns=[turn])


class SimulatedPod:
    """Stands in for a HarnessPod (one Ray actor per pod): same methods, an instant episode."""

    def __init__(self, policy: Any, pod_id: str = "sim", **_: object) -> None:
        self.pod_id = pod_id

    async def start(self) -> str:
        return "sim://"

    async def stop(self) -> None:
        return None

    async def run_episode(
        self,
        task,
        harness,
        attempt=0,
        episode_id="",
        harness_options=None,
        temperature=None,
        attempt_timeout_s=None,
    ) -> Episode:
        return _episode(episode_id, attempt, task["id"], harness)

    async def run(self, spec: dict) -> Episode:
        return await self.run_episode(**spec)


class PodHost:
    """One Ray actor that serves many simulated pods (each call names its pod); an episode
    takes ``delay_s`` (0: instant)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.pods: set[str] = set()
        self.calls = 0
        self.delay_s = delay_s

    async def start(self, pod_id: str) -> str:
        self.pods.add(pod_id)
        return "sim://"

    async def stop(self, pod_id: str) -> None:
        self.pods.discard(pod_id)

    async def run_episode(
        self,
        pod_id: str,
        task,
        harness,
        attempt=0,
        episode_id="",
        harness_options=None,
        temperature=None,
        attempt_timeout_s=None,
    ) -> Episode:
        if pod_id not in self.pods:
            raise RuntimeError(f"pod {pod_id} is not started on this host")
        self.calls += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return _episode(episode_id, attempt, task["id"], harness)

    async def run(self, pod_id: str, spec: dict) -> Episode:
        return await self.run_episode(pod_id, **spec)


class _Method:
    def __init__(self, host: Any, name: str, pod_id: str) -> None:
        self.method = getattr(host, name)
        self.pod_id = pod_id

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        return self.method.remote(self.pod_id, *args, **kwargs)


class HostedPod:
    """What the pool keeps as a pod's actor handle: a HarnessPod's methods, on a host."""

    def __init__(self, host: Any, pod_id: str) -> None:
        self.start = _Method(host, "start", pod_id)
        self.stop = _Method(host, "stop", pod_id)
        self.run_episode = _Method(host, "run_episode", pod_id)
        self.run = _Method(host, "run", pod_id)


class HostedPodPool(PodPool):
    """The real pool; a new pod is a name on one of the hosts instead of a new actor."""

    def __init__(self, config: RunConfig, policy: Any, pod_cls: type, hosts: list[Any]) -> None:
        super().__init__(config, policy, pod_cls)
        self.hosts = hosts

    async def new_pod(self) -> Pod | None:
        name = f"pod-{next(self._ids)}"
        actor = HostedPod(self.hosts[len(self.pods) % len(self.hosts)], name)
        await asyncio.wait_for(actor.start.remote(), self.rollout.pod_start_timeout_s)
        pod = Pod(name, actor)
        self.pods.append(pod)
        self.counts["pods_started"] += 1
        return pod

    @staticmethod
    def _kill(actor: Any) -> None:
        return None  # the hosts outlive their pods


class BenchScheduler(Scheduler):
    """The real Scheduler; only its pool's pods are hosted when ``hosts`` are given."""

    def __init__(self, *args: Any, hosts: list[Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if hosts:
            self.pool = HostedPodPool(self.config, self.policy, SimulatedPod, hosts)


def setup(
    pods: int,
    groups: int,
    group_size: int,
    hosts: int,
    run_dir: str,
    delay_s: float = 0.0,
    **rollout: Any,
) -> tuple[Any, Any, list[Any]]:
    """The real Scheduler and ReplayBuffer actors over ``pods`` simulated pods (on ``hosts``
    host actors; 0: one actor per pod), not started: (scheduler, buffer, host actors)."""
    config = RunConfig.model_validate(
        {
            "name": f"bench-{pods}",
            "rollout": {
                "group_size": group_size,
                "min_pods": pods,
                "max_pods": pods,
                "pod_num_cpus": 0.01,
                "buffer_capacity": groups + 1,
                **rollout,
            },
        }
    )
    buffer = ray.remote(ReplayBuffer).options(num_cpus=0).remote(run_dir, groups + 1, 10**6)
    host = ray.remote(PodHost).options(num_cpus=0)
    host_actors = [host.remote(delay_s) for _ in range(hosts)]
    tasks = [{"id": f"t{i}"} for i in range(8)]
    sched = (
        ray.remote(BenchScheduler)
        .options(num_cpus=0)
        .remote(config.model_dump(), None, buffer, tasks, pod_cls=SimulatedPod, hosts=host_actors)
    )
    return sched, buffer, host_actors


def bench(
    pods: int, attempts: int, group_size: int, hosts: int, run_dir: str | None = None
) -> dict[str, Any]:
    """One measurement: ``attempts`` instant attempts over ``pods`` pods, clocked from the
    request to the last group in the buffer (its episodes on disk). ``run_dir``: keep the
    buffer's files there (otherwise a temporary directory, removed)."""
    groups = max(1, attempts // group_size)
    keep = run_dir is not None
    run_dir = run_dir or tempfile.mkdtemp(prefix="forge-bench-")
    sched, buffer, host_actors = setup(pods, groups, group_size, hosts, run_dir)
    ray.get(sched.start.remote())  # starts all the pods before the clock starts
    started = ray.get(sched.stats.remote())["pods"]
    assert started == pods, f"{started} of {pods} pods started"
    t0 = time.perf_counter()
    ray.get(sched.request.remote(groups))
    ray.get(sched.wait_settled.remote(groups, 1200))
    deadline = time.monotonic() + 600
    while ray.get(buffer.size.remote()) < groups and time.monotonic() < deadline:
        time.sleep(0.005)  # collected means in the buffer, on disk: the clock stops there
    took = time.perf_counter() - t0
    stats = ray.get(sched.stats.remote())
    assert not stats["failures"], f"simulated attempts failed: {stats['failures']}"
    ray.get(sched.stop.remote())
    buffered = ray.get(buffer.stats.remote())
    ray.kill(sched)
    ray.kill(buffer)
    for host in host_actors:
        ray.kill(host)
    assert stats["groups_buffered"] == groups, stats
    assert buffered["episodes_written"] == groups * group_size, buffered
    if not keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    n = stats["attempts_dispatched"]
    return {
        "pods": pods,
        "attempts": n,
        "seconds": took,
        "rate": n / took,
        "buffer_calls": stats.get("buffer_calls"),  # None before the outbox
        "passes": stats.get("dispatch_passes"),
        "stats": stats,
    }


def baseline(rev: str, argv: list[str]) -> dict[int, dict[str, Any]]:
    """Run this bench in a subprocess against ``actors/`` as it was at ``rev``."""
    tmp = Path(tempfile.mkdtemp(prefix="forge-bench-base-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "actors"], check=True, capture_output=True
    ).stdout
    tar_path = tmp / "actors.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(tmp, filter="data")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, __file__, *argv, "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp,  # not the checkout: Ray puts the working directory first on sys.path
    )
    if proc.returncode:
        raise SystemExit(f"the baseline run at {rev} failed:\n{proc.stderr[-4000:]}")
    out = proc.stdout
    rows = json.loads(out.strip().splitlines()[-1])
    return {row["pods"]: row for row in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--attempts", type=int, default=8192, help="per pod count")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--hosts", type=int, default=4, help="pod host actors; 0: one per pod")
    parser.add_argument("--baseline", metavar="REV", help="also run actors/ at this revision")
    parser.add_argument("--json", action="store_true", help="print one JSON line of results")
    parser.add_argument(
        "--address", default="local", help="a Ray cluster to join (default: start a local one)"
    )
    args = parser.parse_args()
    argv = ["--pods", *map(str, args.pods), "--attempts", str(args.attempts)]
    argv += ["--group-size", str(args.group_size), "--hosts", str(args.hosts)]
    argv += ["--address", args.address]
    before = baseline(args.baseline, argv) if args.baseline else {}
    # The workers of a joined cluster get this job's PYTHONPATH too (--baseline's old actors/).
    paths = os.environ.get("PYTHONPATH")
    runtime_env = {"env_vars": {"PYTHONPATH": paths}} if paths else None
    local = {"num_cpus": 8, "include_dashboard": False} if args.address == "local" else {}
    init_ray(address=args.address, log_to_driver=False, runtime_env=runtime_env, **local)
    rows = [bench(p, args.attempts, args.group_size, args.hosts) for p in args.pods]
    ray.shutdown()
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "stats"} for r in rows]))
        return
    hosting = f"{args.hosts} host actor(s)" if args.hosts else "one actor per pod"
    print(f"{args.attempts} attempts per pod count, groups of {args.group_size}, {hosting}")
    head = f"{'pods':>6s}{'attempts':>10s}"
    if before:
        head += f"{'before/s':>11s}"
    head += f"{'after/s' if before else 'attempts/s':>11s}{'vs first':>10s}"
    print(head + f"{'buffer calls':>14s}{'passes':>8s}")
    first = rows[0]["rate"]
    for row in rows:
        line = f"{row['pods']:6d}{row['attempts']:10d}"
        if before:
            line += f"{before[row['pods']]['rate']:11.1f}"
        line += f"{row['rate']:11.1f}{row['rate'] / first:9.2f}x"
        print(line + f"{row['buffer_calls'] or 0:14d}{row['passes'] or 0:8d}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
