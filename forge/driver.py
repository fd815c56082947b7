"""The driver behind ``forge run``.

For now it builds the serving spine and plays recorded episodes: Policy (Serve) -> HarnessPod
(proxy + sandbox) -> harness -> verifier, and writes every episode to ``runs/<name>/``. The
training loop (Scheduler, ReplayBuffer, Trainer, WeightSync) plugs in here next.
"""

from __future__ import annotations

import json
import time
import uuid

import yaml

from forge.cluster import init_ray
from forge.config import RunConfig
from forge.types import Episode
from tasks.loader import TaskError, load_suite


def select_tasks(config: RunConfig) -> list:
    tasks = load_suite(config.tasks)
    if not config.task_ids:
        return tasks[:1]
    by_id = {t.id: t for t in tasks}
    missing = [i for i in config.task_ids if i not in by_id]
    if missing:
        raise TaskError(f"task_ids: not in suite {config.tasks!r}: {', '.join(missing)}")
    return [by_id[i] for i in config.task_ids]


def write_episode(run_dir, episode: Episode) -> None:
    with open(run_dir / "episodes.jsonl", "a") as f:
        f.write(json.dumps(episode.to_dict()) + "\n")


def main(config: RunConfig) -> int:
    import ray

    from actors.harness_pod import HarnessPod
    from serve.policy import deploy_policy

    try:
        tasks = select_tasks(config)
    except TaskError as e:
        print(f"forge run: {e}")
        return 2
    run_dir = config.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config.model_dump(), sort_keys=False))
    mode = init_ray()
    print(f"[forge] Ray: {mode} cluster; run directory {run_dir}", flush=True)
    t0 = time.perf_counter()
    policy = deploy_policy(config.policy)
    print(
        f"[forge] Policy ready ({config.policy.engine.name}:{config.policy.engine.model}) "
        f"in {time.perf_counter() - t0:.1f}s",
        flush=True,
    )
    pod = (
        ray.remote(HarnessPod)
        .options(num_cpus=0.5)
        .remote(
            policy,
            pod_id="pod-0",
            run=config.name,
            model=config.policy.engine.model,
            proxy=config.proxy.model_dump(),
            sandbox=config.sandbox.model_dump(),
        )
    )
    ray.get(pod.start.remote())
    rewards = []
    for task in tasks:
        episode_id = uuid.uuid4().hex[:16]
        print(
            f"[forge] episode {episode_id}: task {task.id} in harness {config.harness} ...",
            flush=True,
        )
        ep: Episode = ray.get(
            pod.run_episode.remote(
                task.model_dump(),
                config.harness,
                episode_id=episode_id,
                temperature=config.temperature,
            )
        )
        write_episode(run_dir, ep)
        rewards.append(ep.reward)
        tokens = sum(len(t.completion_ids) for t in ep.turns)
        status = ep.status if ep.failure is None else f"failed ({ep.failure})"
        print(
            f"[forge]   {status}, reward {ep.reward:.2f}, {len(ep.turns)} turns, "
            f"{tokens} sampled tokens, {len(ep.segments)} segment(s), "
            f"{ep.duration_s:.1f}s",
            flush=True,
        )
    ray.get(pod.stop.remote())
    mean = sum(rewards) / len(rewards)
    print(
        f"[forge] done: {len(rewards)} episode(s), mean reward {mean:.2f}; "
        f"episodes in {run_dir / 'episodes.jsonl'}",
        flush=True,
    )
    return 0
