"""The wall time of one episode through OpenForge against the same harness command run by hand.

Per harness, in one run, interleaved (forge, hand, forge, hand, ...) so drift hits both alike,
against one scripted-oracle Policy deployment:

- *through OpenForge*: ``HarnessPod.run_episode``: a fresh bubblewrap sandbox, the task's files,
  the harness's config files, the harness command through the recording proxy, the verifier,
  the sandbox destroyed;
- *by hand*: the same adapter's config files written into a temp HOME and workspace, and the
  same command run as a plain subprocess against the same Policy served over HTTP
  (``forge serve``'s app), with no sandbox, proxy or verifier; and once more in a session of
  its own, as a shell would run it and as a sandbox's command runs (the kernel's autogroups
  share CPU out by session: under load from other sessions that alone costs time);
- *baseline* (``--baseline DIR``): a HarnessPod imported from another checkout of the code
  (``git worktree add /tmp/base COMMIT``), in the same run, interleaved with the other two, so
  a change is measured side by side with the code before it.

Where the difference goes: each episode is also played by a HarnessPod in this process
(``run_attempt``'s ``stages``: setup, sandbox create, files, the harness's run, close, verify,
destroy, assembly), and the difference between that and the actor is Ray's share. The harness's
run is split by timing an empty Python program (``python3 -c pass``) by hand, in a bare
sandbox, and through the proxy bridge as well. It also times creating and destroying a sandbox,
as the pod's settings make it (``sandbox.disk_mb``: a quota file system, as root) and without a
quota. The target is a ratio under 1.15 (react's 0.1 s episode included).

    .venv/bin/python scripts/bench/episode_overhead.py [--harness react,pi,codex,...] [--reps 5]
        [--baseline /tmp/base]

``PYTHONPATH=/tmp/base`` runs the whole bench on that checkout's code instead (its sandbox and
exec lines, without stages), to alternate with this one's.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import forge  # before ray: a loopback-only local cluster

# isort: split
import ray

from actors.harness_pod import HarnessPod
from forge.cluster import init_ray
from forge.config import PolicyConfig, SandboxConfig
from forge.episode import run_attempt
from forge.harnesses.base import AttemptContext
from forge.harnesses.registry import get_harness
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.bwrap import HOME, require_bwrap, sandbox_path_var
from forge.sandboxes.registry import sandbox_for
from serve.policy import deploy_policy
from serve.server import BackgroundServer, make_app
from tasks.loader import load_suite

try:
    from forge.stages import STAGES
except ImportError:  # a checkout from before the stages were marked (PYTHONPATH=/tmp/base)
    STAGES = ()
STAGED = "stages" in inspect.signature(run_attempt).parameters  # and such a one has none

TASK = "hello_file"  # one tool call, then the answer: the harness's own cost dominates
RUNS = ("forge", "hand", "own", "base", "local")  # what one round times


def by_hand(harness: str, task, url: str, session: bool = False) -> float:
    """One episode of ``harness`` as a user would run it: a plain subprocess on this machine
    (``session``: in a session of its own, as a shell runs it and as every sandbox's command
    runs; with the kernel's autogroups, which share CPU out by session, that costs it time
    when other sessions keep the machine busy)."""
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
            adapter.command(ctx),
            cwd=ws,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            start_new_session=session,
        )
        took = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"{harness} by hand failed: {proc.stderr.decode()[-2000:]}")
        return took


def sandbox_times(config: SandboxConfig, reps: int) -> tuple[list[float], list[float]]:
    """Create and destroy times of ``reps`` sandboxes made as ``config`` makes them."""
    create, destroy = [], []
    for _ in range(reps):
        box = sandbox_for(config, None)
        t0 = time.perf_counter()
        box.create(SandboxSpec(proxy_tcp="127.0.0.1:9"))
        t1 = time.perf_counter()
        box.destroy()
        create.append(t1 - t0)
        destroy.append(time.perf_counter() - t1)
    return create, destroy


EMPTY = ["python3", "-c", "pass"]  # a Python harness's own start, and nothing else


def exec_times(socket_path: str, reps: int) -> dict[str, list[float]]:
    """An empty Python program run as a harness is: by hand, in a bare sandbox, and with the
    proxy's port made in its namespace (served by the pod where it may enter the namespace,
    else relayed by the bridge in front of the command)."""
    names = ("python3 -c pass: by hand", "in a sandbox", "in a sandbox, with its proxy port")
    times: dict[str, list[float]] = {name: [] for name in names}
    config = SandboxConfig(disk_mb=None)
    env = {"PATH": sandbox_path_var(), "LANG": "C.UTF-8"}
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(EMPTY, env=env, check=True)
        times[names[0]].append(time.perf_counter() - t0)
        for name, proxy in ((names[1], None), (names[2], socket_path)):
            box = sandbox_for(config, None)
            box.create(SandboxSpec(proxy_socket=proxy))
            try:
                t0 = time.perf_counter()
                box.exec(EMPTY, 30)
                times[name].append(time.perf_counter() - t0)
            finally:
                box.destroy()
    return times


class LocalPod:
    """A HarnessPod in this process, on its own event loop thread: its episodes report where
    their time went (``run_attempt``'s ``stages``)."""

    def __init__(self, policy: Any) -> None:
        self.pod = HarnessPod(policy, pod_id="bench-local")
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.call(self.pod.start())

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def episode(self, task: Any, harness: str, stages: dict[str, float]) -> Any:
        eid, extra = uuid.uuid4().hex, {"stages": stages} if STAGED else {}
        return self.call(run_attempt(self.pod, task.model_dump(), harness, 0, eid, {}, **extra))

    def stop(self) -> None:
        self.call(self.pod.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def code_root() -> str:
    """The checkout this process imports the project from."""
    return str(Path(forge.__file__).resolve().parent.parent)


def remote_episode(pod: Any, task: Any, harness: str) -> Any:
    """One episode through a HarnessPod actor, as the Scheduler asks for it."""
    return ray.get(pod.run_episode.remote(task.model_dump(), harness))


def checked(name: str, ep: Any) -> None:
    if ep.status != "ok" or ep.reward != 1.0:
        raise RuntimeError(f"{name}: {ep.status} {ep.failure} {ep.harness_log[-2000:]}")


def ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:8.1f} ms"


def result_line(harness: str, runs: dict[str, list[float]]) -> str:
    """The harness's medians and ratios to by hand (the baseline's too, when it ran)."""
    hand = statistics.median(runs["hand"])
    line = f"{harness:16s} {ms(runs['forge'])} {ms(runs['hand'])}"
    line += f"  {statistics.median(runs['forge']) / hand:5.2f}"
    if runs["base"]:
        line += f"  {ms(runs['base'])}  {statistics.median(runs['base']) / hand:5.2f}"
    return line


def session_line(runs: dict[str, list[float]]) -> str:
    """By hand in a session of its own, and OpenForge's ratio to that."""
    own = statistics.median(runs["own"])
    ratio = statistics.median(runs["forge"]) / own
    return f"  by hand in a session of its own: {ms(runs['own']).strip()}, ratio {ratio:.2f}"


def stage_line(runs: dict[str, list[float]], stages: dict[str, list[float]]) -> str:
    """Where an episode's time went: the in-process pod's stages (medians, ms), and Ray's
    share (the actor's median less the in-process pod's)."""
    shown = [f"{s} {statistics.median(stages[s]) * 1000:.1f}" for s in STAGES if s in stages]
    ray_ms = (statistics.median(runs["forge"]) - statistics.median(runs["local"])) * 1000
    local = ms(runs["local"]).strip()
    shown = shown or ["none marked in this checkout"]
    return f"  stages, ms (in-process pod: {local}): {', '.join(shown)}; Ray's share {ray_ms:.1f}"


class BaselinePod:
    """A HarnessPod of another checkout, as an actor whose worker imports that checkout's code
    ahead of this one's (this class travels by value: it names no module of the project)."""

    def __init__(self, checkout: str, policy: Any) -> None:
        import sys

        sys.path.insert(0, checkout)
        import forge.episode
        from actors.harness_pod import HarnessPod

        if not forge.episode.__file__.startswith(checkout):
            raise RuntimeError(f"--baseline {checkout}: imported {forge.episode.__file__}")
        self.pod = HarnessPod(policy, pod_id="bench-base")

    async def start(self) -> str:
        return await self.pod.start()

    async def run_episode(self, task: dict[str, Any], harness: str) -> Any:
        return await self.pod.run_episode(task, harness)

    async def stop(self) -> None:
        await self.pod.stop()


def baseline_pod(policy: Any, checkout: str) -> Any:
    """A :class:`BaselinePod` of ``checkout``, on a worker of its own (its runtime env)."""
    checkout = os.path.abspath(checkout)
    env = {"env_vars": {"FORGE_BENCH_BASELINE": checkout}}
    actor = ray.remote(BaselinePod).options(num_cpus=0.25, runtime_env=env)
    return actor.remote(checkout, policy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--harness", default="react,pi,codex,mini-swe-agent,nanobot,openclaw")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--baseline", help="another checkout, run side by side (worktree)")
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
    base = baseline_pod(policy, args.baseline) if args.baseline else None
    if base is not None:
        ray.get(base.start.remote())
    local = LocalPod(policy)
    workers = ray.get(ray.remote(num_cpus=0)(code_root).remote())
    print(f"code: {code_root()} (Ray's workers: {workers})")
    server = BackgroundServer(make_app(policy, "tiny", None, task.reference_script()))
    configs = {"as the pod makes it": SandboxConfig(), "no quota": SandboxConfig(disk_mb=None)}
    for name, config in configs.items():
        create, destroy = sandbox_times(config, 20)
        print(f"sandbox create {ms(create)}, destroy {ms(destroy)}  ({name}, median of 20)")
    for name, xs in exec_times(local.pod.socket_path, 20).items():
        print(f"{name:33s} {ms(xs)}  (median of 20)")
    head = f"{'harness':16s} {'OpenForge':>11s} {'by hand':>11s}  ratio"
    print(head + (f"  {'baseline':>11s}  ratio" if base else "") + f"  (median of {args.reps})")
    with server as url:
        for h in harnesses:
            runs: dict[str, list[float]] = {k: [] for k in RUNS}
            stages: dict[str, list[float]] = {}
            for rep in range(args.reps + 1):  # the first round warms up and is not counted
                took, ep = timed(remote_episode, pod, task, h)
                checked(f"{h} through OpenForge", ep)
                runs["forge"].append(took)
                runs["hand"].append(by_hand(h, task, url))
                runs["own"].append(by_hand(h, task, url, session=True))
                if base is not None:
                    took, ep = timed(remote_episode, base, task, h)
                    checked(f"{h} through the baseline", ep)
                    runs["base"].append(took)
                spans: dict[str, float] = {}
                took, ep = timed(local.episode, task, h, spans)
                checked(f"{h} in this process", ep)
                runs["local"].append(took)
                for stage, s in spans.items():
                    stages.setdefault(stage, []).append(s)
                if rep == 0:
                    runs = {k: [] for k in runs}
                    stages = {}
            print(result_line(h, runs), flush=True)
            print(session_line(runs), flush=True)
            print(stage_line(runs, stages), flush=True)
    local.stop()
    ray.get(pod.stop.remote())
    if base is not None:
        ray.get(base.stop.remote())


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    require_bwrap()  # the episodes run isolated, as in a training run
    main()
