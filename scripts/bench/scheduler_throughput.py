"""Scheduler throughput with instant simulated episodes and no model.

The real Scheduler and ReplayBuffer actors; each pod is a Ray actor whose ``run_episode``
returns a finished Episode at once (no sandbox, no harness, no model), so what is measured is
the Scheduler's own dispatch and collection. Attempts dispatched and collected per second, at
4, 16 and 64 pods, in one run.

    .venv/bin/python scripts/bench/scheduler_throughput.py [--pods 4 16 64] [--groups 200]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

import forge  # noqa: F401  (before ray: a loopback-only local cluster)

# isort: split
import ray

from actors.replay_buffer import ReplayBuffer
from actors.scheduler import Scheduler
from forge.cluster import init_ray
from forge.config import RunConfig
from forge.types import Episode, Turn


class SimulatedPod:
    """Stands in for a HarnessPod: same methods, an instant one-turn episode."""

    def __init__(self, policy, pod_id: str = "sim", **_: object) -> None:
        self.pod_id = pod_id

    async def start(self) -> str:
        return "sim://"

    async def stop(self) -> None:
        return None

    async def run_episode(
        self, task, harness, attempt=0, episode_id="", harness_options=None, temperature=None
    ):
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
        return Episode(episode_id, task["id"], attempt, harness, 1.0, "ok", turns=[turn])


def bench(pods: int, groups: int, group_size: int) -> tuple[float, int]:
    config = RunConfig.model_validate(
        {
            "name": f"bench-{pods}",
            "rollout": {
                "group_size": group_size,
                "min_pods": pods,
                "max_pods": pods,
                "pod_num_cpus": 0.01,
                "buffer_capacity": groups + 1,
            },
        }
    )
    run_dir = tempfile.mkdtemp(prefix="forge-bench-")
    buffer = ray.remote(ReplayBuffer).options(num_cpus=0).remote(run_dir, groups + 1, 10**6)
    tasks = [{"id": f"t{i}"} for i in range(8)]
    sched = (
        ray.remote(Scheduler)
        .options(num_cpus=0)
        .remote(config.model_dump(), None, buffer, tasks, pod_cls=SimulatedPod)
    )
    ray.get(sched.start.remote())  # starts all the pods before the clock starts
    t0 = time.perf_counter()
    ray.get(sched.request.remote(groups))
    ray.get(sched.wait_settled.remote(groups, 600))
    took = time.perf_counter() - t0
    stats = ray.get(sched.stats.remote())
    assert not stats["failures"], f"simulated attempts failed: {stats['failures']}"
    ray.get(sched.stop.remote())
    ray.kill(sched)
    ray.kill(buffer)
    assert stats["groups_buffered"] == groups, stats
    return stats["attempts_dispatched"] / took, stats["attempts_dispatched"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--group-size", type=int, default=4)
    args = parser.parse_args()
    init_ray(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False)
    print(f"{'pods':>6s}{'attempts':>10s}{'attempts/s':>12s}")
    results = {}
    for pods in args.pods:
        rate, n = bench(pods, args.groups, args.group_size)
        results[pods] = rate
        print(f"{pods:6d}{n:10d}{rate:12.1f}", flush=True)
    base = results[args.pods[0]]
    ratios = ", ".join(f"{p} pods {r / base:.2f}x" for p, r in results.items())
    print(f"ratio to the first: {ratios}")
    ray.shutdown()


if __name__ == "__main__":
    asyncio.set_event_loop_policy(None)
    main()
