"""One pod pool for a harness mix, or a pool per harness: episodes per second side by side.

The same E episodes (half through one harness, half through another, one smoke task, the
scripted oracle) run on P HarnessPods in two arms, alternated R times in one sitting:

- ``shared``: every pod takes the next episode whatever its harness (what ``forge run`` does:
  the harness travels with each attempt);
- ``split``: P/2 pods serve only the first harness and P/2 only the second.

Each pod runs one episode at a time. It prints each round's wall time and episodes per second
and the ratio shared / split.

    .venv/bin/python scripts/bench/harness_pools.py [--harness react,pi] [--pods 4]
        [--episodes 16] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import deque

import forge  # noqa: F401  (before ray: a loopback-only local cluster)

# isort: split
import ray

from actors.harness_pod import HarnessPod
from forge.cluster import init_ray
from forge.config import PolicyConfig
from forge.harnesses.registry import get_harness
from serve.policy import deploy_policy
from tasks.loader import load_suite

TASK = "hello_file"


def drain(pods: list, queues: list[deque], task: dict) -> int:
    """Run every queued harness name as an episode; pod i takes from ``queues[i]``. Returns
    the episodes that passed."""
    running = {}
    for i, pod in enumerate(pods):
        if queues[i]:
            running[pod.run_episode.remote(task, queues[i].popleft())] = i
    passed = 0
    while running:
        [done], _ = ray.wait(list(running))
        i = running.pop(done)
        passed += ray.get(done).reward == 1.0
        if queues[i]:
            running[pods[i].run_episode.remote(task, queues[i].popleft())] = i
    return passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--harness", default="react,pi", help="two harnesses, comma-separated")
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    first, second = args.harness.split(",")
    for name in (first, second):
        get_harness(name).ro_mounts()  # stops now if one is not installed
    task = next(t for t in load_suite("smoke") if t.id == TASK).model_dump()
    init_ray()
    policy = deploy_policy(
        PolicyConfig(engine={"name": "scripted", "mode": "oracle"}, num_cpus=0.1), "bench-pools"
    )
    pods = [
        ray.remote(HarnessPod).options(num_cpus=0.1).remote(policy, pod_id=f"pool-{i}")
        for i in range(args.pods)
    ]
    ray.get([p.start.remote() for p in pods])
    half = args.episodes // 2
    mix = [first, second] * half
    drain(pods, [deque([first, second]) for _ in pods], task)  # warm: each pod, each harness
    rates: dict[str, list[float]] = {"shared": [], "split": []}
    for r in range(args.rounds):
        for arm in ("shared", "split"):
            if arm == "shared":
                shared = deque(mix)
                queues = [shared] * len(pods)  # one queue: any pod, any harness
            else:
                own = {first: deque([first] * half), second: deque([second] * half)}
                queues = [own[first if i < len(pods) // 2 else second] for i in range(len(pods))]
            t0 = time.perf_counter()
            passed = drain(pods, queues, task)
            wall = time.perf_counter() - t0
            rates[arm].append(len(mix) / wall)
            print(f"round {r + 1} {arm:6s}: {len(mix)} episodes ({passed} passed) in "
                  f"{wall:6.1f} s, {len(mix) / wall:5.2f} episodes/s", flush=True)  # fmt: skip
    ray.get([p.stop.remote() for p in pods])
    shared, split = statistics.mean(rates["shared"]), statistics.mean(rates["split"])
    print(f"{args.harness} on {args.pods} pods: shared {shared:.2f} episodes/s, split "
          f"{split:.2f}: shared / split = {shared / split:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
