"""The wall time of one episode through OpenForge against the same harness command run by hand.

Per harness, in one run, interleaved (forge, hand, forge, hand, ...) so drift hits both alike,
against one scripted-oracle Policy deployment:

- *through OpenForge*: ``HarnessPod.run_episode``: a fresh bubblewrap sandbox, the task's files,
  the harness's config files, the harness command through the recording proxy, the verifier,
  the sandbox destroyed;
- *by hand*: the same adapter's config files written into a temp HOME and workspace, and the
  same command run as a plain subprocess against the same Policy served over HTTP
  (``forge serve``'s app), with no sandbox, proxy or verifier.

It also times creating and destroying a bare sandbox. The target is a ratio under 1.15 for
harnesses whose own run takes over 1 s.

    .venv/bin/python scripts/bench/episode_overhead.py [--harness react,pi,codex,...] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import forge  # noqa: F401  (before ray: a loopback-only local cluster)

# isort: split
import ray

from actors.harness_pod import HarnessPod
from forge.cluster import init_ray
from forge.config import PolicyConfig
from forge.harnesses.base import AttemptContext
from forge.harnesses.registry import get_harness
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.bwrap import HOME, require_bwrap, sandbox_path_var
from forge.sandboxes.registry import make_sandbox
from serve.policy import deploy_policy
from serve.server import BackgroundServer, make_app
from tasks.loader import load_suite

TASK = "hello_file"  # one tool call, then the answer: the harness's own cost dominates


def by_hand(harness: str, task, url: str) -> float:
    """One episode of ``harness`` as a user would run it: a plain subprocess on this machine."""
    adapter = get_harness(harness)
    with tempfile.TemporaryDirectory(prefix="forge-hand-") as tmp:
        home, ws = Path(tmp, "home"), Path(tmp, "workspace")
        home.mkdir()
        ws.mkdir()
        paths = {HOME: str(home), "/workspace": str(ws)}
        paths.update({target: host for host, target in adapter.ro_mounts().items()})
        for name, content in task.files.items():
            Path(ws, name).parent.mkdir(parents=True, exist_ok=True)
            Path(ws, name).write_text(content)
        ctx = AttemptContext(
            base_url=f"{url}/v1",
            anthropic_base_url=url,
            api_key="hand",
            model="tiny",
            instruction=task.instruction,
            workspace=str(ws),
            max_turns=task.limits.max_turns,
            paths=paths,
        )
        t0 = time.perf_counter()
        for path, content in adapter.files(ctx).items():
            host = Path(ctx.path(path))
            host.parent.mkdir(parents=True, exist_ok=True)
            host.write_text(content)
        env = {"PATH": sandbox_path_var(), "HOME": str(home), "TZ": "UTC", "LANG": "C.UTF-8"}
        env.update(adapter.env(ctx))
        proc = subprocess.run(
            adapter.command(ctx), cwd=ws, env=env, stdin=subprocess.DEVNULL, capture_output=True
        )
        took = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{harness} by hand failed: {proc.stderr.decode()[-2000:]}")
        return took


def sandbox_times(reps: int) -> tuple[list[float], list[float]]:
    create, destroy = [], []
    for _ in range(reps):
        box = make_sandbox("local")
        t0 = time.perf_counter()
        box.create(SandboxSpec(proxy_tcp="127.0.0.1:9"))
        t1 = time.perf_counter()
        box.destroy()
        create.append(t1 - t0)
        destroy.append(time.perf_counter() - t1)
    return create, destroy


def ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:8.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--harness", default="react,pi,codex,mini-swe-agent,nanobot,openclaw")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    harnesses = [h for h in args.harness.split(",") if h]
    for h in harnesses:
        get_harness(h).ro_mounts()  # stops now if one is not installed

    task = next(t for t in load_suite("smoke") if t.id == TASK)
    init_ray()
    policy = deploy_policy(
        PolicyConfig(engine={"name": "scripted", "mode": "oracle"}, num_cpus=0.25), "bench-ep"
    )
    pod = ray.remote(HarnessPod).options(num_cpus=0.25).remote(policy, pod_id="bench")
    ray.get(pod.start.remote())
    server = BackgroundServer(make_app(policy, "tiny", None, task.reference_script()))
    create, destroy = sandbox_times(20)
    print(f"sandbox (bubblewrap) create {ms(create)}, destroy {ms(destroy)} (median of 20)")
    print(f"{'harness':16s} {'OpenForge':>11s} {'by hand':>11s}  ratio  (median of {args.reps})")
    with server as url:
        for h in harnesses:
            forge_s, hand_s = [], []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                ep = ray.get(pod.run_episode.remote(task.model_dump(), h))
                forge_s.append(time.perf_counter() - t0)
                if ep.status != "ok" or ep.reward != 1.0:
                    raise RuntimeError(f"{h} through OpenForge: {ep.status} {ep.failure}")
                hand_s.append(by_hand(h, task, url))
            ratio = statistics.median(forge_s) / statistics.median(hand_s)
            print(f"{h:16s} {ms(forge_s)} {ms(hand_s)}  {ratio:5.2f}", flush=True)
    ray.get(pod.stop.remote())


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    require_bwrap()  # the episodes run isolated, as in a training run
    main()
