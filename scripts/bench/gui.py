"""What GUI episodes cost on this machine: browser and desktop sandboxes at once, memory per
sandbox, screenshot-to-action latency, and one episode through OpenForge against the same steps
run by hand, side by side in one run.

Two tasks, each solved by its reference steps: ``web/booking_tuesday_ten`` (the ``browser``
harness: the booking app's server and Chromium through Playwright; 4 actions) and
``desktop/xedit_append_item`` (the ``desktop`` harness: Xvfb, openbox, xedit, xdotool; 3 actions).

- *OpenForge*: N HarnessPods on one scripted-oracle Policy run N episodes at once, each the
  real stack: a fresh bubblewrap sandbox, the task's services under the launcher, the harness
  sending each screenshot through the recording proxy to the Policy and carrying out the tool
  call it gets back, the verifier in a fresh sandbox, the sandbox destroyed.
- *by hand*: N subprocesses at once (``gui_hand.py``), each the same steps as a plain script: the
  app's server (or Xvfb + openbox + xedit) started directly, Chromium through Playwright (or
  xdotool), per step a screenshot (PNG, base64-encoded as an agent would send it), the action,
  the same settle pause as the harness (``--settle-s``), then the same verifier on the files.
  No Ray, proxy, policy or sandbox. They run at the HarnessPods' niceness (Ray starts its
  workers, and so every sandbox, at niceness 15), and their clock starts after their imports.

Memory: every 0.5 s the process trees of each sandbox (the outer ``bwrap`` processes under a
HarnessPod's actor process and everything below them) and of each by-hand subprocess are summed,
from ``/proc/PID/smaps_rollup``: PSS (shared pages split among the processes that map them:
Chromium's processes share most of theirs, and other jobs' Chromiums share the binary), USS
(private pages: what one more sandbox costs) and RSS (shared pages counted in every process);
the peak per sandbox and the peak PSS of all together. A HarnessPod's own process (the proxy)
is not in them; its PSS is printed once.

Latency, from the proxy's Turn records (``started_at``, ``latency_s``) and the episode's start
and end: *start-up* (call to the first request at the proxy: sandbox, services, browser or
display, first screenshot), per step the *policy* round trip as the proxy saw it and the
*harness side* (answer back to the harness, the action, the settle pause, the harness's
screenshots and encoding, the request up to the proxy), and *end* (last answer to the Episode
back in this process: harness exit, services stopped, verifier, sandbox destroyed). By hand the
step splits into screenshot, encode, action and settle. Ten calls with one of the episode's
screenshots from this process straight to a pod's proxy split a call into the proxy's own
handling and the policy. The default run takes about 3 minutes on 2 cores (measured at load
40-60); ``--n 1,2,4,8 --hand-n 1,4,8`` about 6.

    .venv/bin/python scripts/bench/gui.py [--kinds browser,desktop] [--n 1,2,4] [--hand-n 1]
        [--reps 2] [--settle-s 0.3]
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import forge  # noqa: F401  (before ray: a loopback-only local cluster)

# isort: split
import psutil

from tasks.loader import load_suite
from tasks.schema import Task

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its parts, however it is loaded

# isort: split
from gui_memory import MIB, MemoryWatch, sandbox_roots, tree_memory

TASKS = {"browser": ("web", "booking_tuesday_ten"), "desktop": ("desktop", "xedit_append_item")}


def load_task(kind: str) -> Task:
    suite, task_id = TASKS[kind]
    return next(t for t in load_suite(suite) if t.id == task_id)


# -- one round: N episodes at once ------------------------------------------------------------


@dataclass
class Round:
    kind: str
    way: str  # "OpenForge" or "by hand"
    n: int
    wall_s: float = 0.0
    passed: int = 0
    failures: list[str] = field(default_factory=list)
    start_s: list[float] = field(default_factory=list)  # per episode
    end_s: list[float] = field(default_factory=list)
    total_s: list[float] = field(default_factory=list)
    step_parts: list[list[float]] = field(default_factory=list)  # per step
    peak: list[list[int]] = field(default_factory=list)  # [RSS, PSS, USS] per sandbox or tree
    all_pss: int = 0
    unread: set[str] = field(default_factory=set)
    png: bytes = b""  # a screenshot the harness sent (OpenForge rounds)


def hand_round(kind: str, n: int, settle_s: float, nice: int = 0) -> Round:
    """``n`` by-hand episodes at once, each a ``gui_hand.py`` subprocess at niceness ``nice``
    (the HarnessPods': Ray runs its workers, and so the sandboxes, at niceness 15)."""
    r = Round(kind, "by hand", n)
    argv = [sys.executable, str(Path(__file__).with_name("gui_hand.py")), kind]
    argv += ["--settle-s", str(settle_s)]
    task = load_task(kind).model_dump_json()
    t0 = time.perf_counter()
    procs = []
    for _ in range(n):
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            preexec_fn=lambda: os.nice(max(0, nice - os.nice(0))),
        )  # fmt: skip
        assert proc.stdin is not None
        proc.stdin.write(task)
        proc.stdin.close()
        procs.append(proc)
    live = {p.pid: [psutil.Process(p.pid)] for p in procs}
    with MemoryWatch(lambda: {k: v for k, v in live.items() if v[0].is_running()}) as mem:
        outs = [p.stdout.read() if p.stdout else "" for p in procs]
        for p in procs:
            p.wait()
        r.wall_s = time.perf_counter() - t0
    for proc, out in zip(procs, outs, strict=True):
        if proc.returncode != 0 or not out.strip():
            r.failures.append(f"exit {proc.returncode}")
            continue
        rec = json.loads(out.strip().splitlines()[-1])
        r.passed += rec["reward"] == 1.0
        r.start_s.append(rec["start"])
        r.end_s.append(rec["end"])
        r.total_s.append(rec["total"])
        r.step_parts += rec["steps"]
    r.peak = list(mem.peak.values())
    r.all_pss, r.unread = mem.all_pss, mem.unread
    return r


def stack_round(pods: list[Any], pids: list[int], kind: str, n: int, settle_s: float) -> Round:
    import ray

    r = Round(kind, "OpenForge", n)
    task = load_task(kind).model_dump()
    groups = {pid: [] for pid in pids[:n]}

    def roots() -> dict[Any, list[psutil.Process]]:
        return {pid: sandbox_roots(pid) for pid in groups}

    opts = {"settle_s": settle_s}
    with MemoryWatch(roots) as mem:
        t0, p0 = time.time(), time.perf_counter()
        pending = [p.run_episode.remote(task, kind, harness_options=opts) for p in pods[:n]]
        ended: dict[Any, float] = {}
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            ended[done[0]] = time.time()
        r.wall_s = time.perf_counter() - p0
    for ref, t_end in ended.items():
        ep = ray.get(ref)
        if ep.status != "ok" or not ep.turns:
            r.failures.append(ep.failure or ep.truncated or "no turns")
            continue
        r.passed += ep.reward == 1.0
        r.png = r.png or next((i.data for i in ep.images.values() if i.data), b"")
        turns = sorted(ep.turns, key=lambda t: t.index)
        r.start_s.append(turns[0].started_at - t0)
        for a, b in itertools.pairwise(turns):
            r.step_parts.append([a.latency_s, b.started_at - (a.started_at + a.latency_s)])
        r.end_s.append(t_end - (turns[-1].started_at + turns[-1].latency_s))
        r.total_s.append(t_end - t0)
    r.peak = [v for v in mem.peak.values() if v[0]]
    r.all_pss, r.unread = mem.all_pss, mem.unread
    return r


def proxy_calls(pod: Any, png: bytes, reps: int = 10) -> list[tuple[float, float]]:
    """``reps`` chat calls with ``png`` and the GUI tools, from this process to the pod's proxy
    (TCP, no sandbox): (the client's round trip, the policy's part as the proxy recorded it)."""
    import ray

    from forge.harnesses import gui_actions

    url = "data:image/png;base64," + base64.b64encode(png).decode()
    content = [{"type": "text", "text": "Do it."}, {"type": "image_url", "image_url": {"url": url}}]
    body = {"model": "tiny", "messages": [{"role": "user", "content": content}]}
    body = json.dumps({**body, "tools": gui_actions.tools(), "max_tokens": 32}).encode()
    script = {"task_id": "bench", "steps": [], "answer": "ok"}
    eid = f"bench-proxy-{os.urandom(4).hex()}"
    att = ray.get(pod.open_attempt.remote(eid, 0, script))
    head = {"Authorization": f"Bearer {att['api_key']}", "Content-Type": "application/json"}
    client = []
    for _ in range(reps):
        req = urllib.request.Request(att["base_url"] + "/chat/completions", body, head)
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=120) as resp:
            resp.read()
        client.append(time.perf_counter() - t0)
    turns = ray.get(pod.close_attempt.remote(eid, 0)).turns
    return [(c, t.latency_s) for c, t in zip(client, turns, strict=True)]


# -- printing --------------------------------------------------------------------------------


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def ms(parts: list[list[float]], i: int | None = None) -> str:
    """The median (ms) of column ``i`` of per-step parts, or of their sums."""
    return f"{med([p[i] if i is not None else sum(p) for p in parts]) * 1000:5.0f}"


def mib(peaks: list[list[int]], i: int, how: Callable[[list[int]], float] = med) -> str:
    return f"{how([p[i] for p in peaks]) / MIB:.0f}" if peaks else "-"


HEADER = (
    "kind      N way        wall s eps/min pass  ep s  step ms PSS max PSS med USS med RSS max "
    " all PSS  load\n"
    + " " * 45
    + "(median)     (MiB per sandbox or by-hand tree)     (MiB) (1 min)"
)


def print_round(r: Round) -> None:
    notes = [f"failed: {', '.join(r.failures)}"] if r.failures else []
    if r.unread:
        notes.append(f"RSS for PSS of {', '.join(sorted(r.unread))}")
    print(
        f"{r.kind:8s} {r.n:2d} {r.way:9s} {r.wall_s:7.1f} {60 * r.n / r.wall_s:7.1f} "
        f"{r.passed:2d}/{r.n:<2d} {med(r.total_s):5.1f} {ms(r.step_parts):>8s} "
        f"{mib(r.peak, 1, max):>7s} {mib(r.peak, 1):>7s} {mib(r.peak, 2):>7s} "
        f"{mib(r.peak, 0, max):>7s} {r.all_pss / MIB:8.0f} "
        f"{os.getloadavg()[0]:5.0f}  {'; '.join(notes)}",
        flush=True,
    )


def print_split(kind: str, rounds: list[Round], calls: list[tuple[float, float]]) -> None:
    """Medians over the N=1 rounds: start-up, the parts of a step, end, the whole episode; and
    of ``calls`` (:func:`proxy_calls`)."""
    ways = {}
    for way in ("OpenForge", "by hand"):
        of = [r for r in rounds if r.way == way]
        ways[way] = (
            [x for r in of for x in r.start_s], [p for r in of for p in r.step_parts],
            [x for r in of for x in r.end_s], [x for r in of for x in r.total_s],
        )  # fmt: skip
    (start, parts, end, total), (h_start, h_parts, h_end, h_total) = ways.values()
    print(
        f"{kind:8s} OpenForge start-up {med(start) * 1000:5.0f} ms | per step {ms(parts)} ms: "
        f"policy round trip {ms(parts, 0)} + harness side {ms(parts, 1)} | end "
        f"{med(end) * 1000:5.0f} ms | episode {med(total):5.2f} s ({len(total)} episodes)"
    )
    if h_total:
        print_hand(kind, (start, parts, end, total), (h_start, h_parts, h_end, h_total))
    if calls:
        size = len(next(r.png for r in rounds if r.png)) / 1024
        print(
            f"{kind:8s} one call with its {size:.0f} KiB screenshot, host to proxy: "
            f"{ms([[c] for c, _ in calls])} ms = proxy's HTTP, JSON and image handling "
            f"{ms([[c - p] for c, p in calls])} + policy {ms([[p] for _, p in calls])} "
            f"(median of {len(calls)})"
        )


def print_hand(kind: str, stack: tuple[list[Any], ...], hand: tuple[list[Any], ...]) -> None:
    (start, parts, end, total), (h_start, h_parts, h_end, h_total) = stack, hand
    print(
        f"{kind:8s} by hand   start-up {med(h_start) * 1000:5.0f} ms | per step {ms(h_parts)} ms: "
        f"screenshot {ms(h_parts, 0)} + encode {ms(h_parts, 1)} + action {ms(h_parts, 2)} + "
        f"settle {ms(h_parts, 3)} | end {med(h_end) * 1000:5.0f} ms | episode "
        f"{med(h_total):5.2f} s ({len(h_total)} episodes)"
    )
    extra = [
        med(start) - med(h_start),
        med([sum(p) for p in parts]) - med([sum(p) for p in h_parts]),
    ]
    print(
        f"{kind:8s} OpenForge / by hand: episode {med(total) / med(h_total):.2f}; OpenForge's "
        f"extra: start-up {extra[0] * 1000:+.0f} ms, per step {extra[1] * 1000:+.0f} ms, end "
        f"{(med(end) - med(h_end)) * 1000:+.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="browser,desktop")
    parser.add_argument("--n", default="1,2,4", help="episodes at once through OpenForge")
    parser.add_argument("--hand-n", default="1", help="episodes at once by hand")
    parser.add_argument("--reps", type=int, default=2, help="rounds at N=1 (interleaved)")
    parser.add_argument("--settle-s", type=float, default=0.3, help="pause after each action")
    parser.add_argument("--no-warmup", action="store_true")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    ns = [int(x) for x in args.n.split(",") if x]
    hand_ns = [int(x) for x in args.hand_n.split(",") if x]
    run(kinds, ns, hand_ns, args.reps, args.settle_s, not args.no_warmup)


def start_pods(n: int, app: str = "bench-gui") -> tuple[Any, list[Any], list[int]]:
    """A scripted-oracle Policy and ``n`` started HarnessPods on it, with their actors' PIDs."""
    import ray

    from actors.harness_pod import HarnessPod
    from forge.config import PolicyConfig
    from serve.policy import deploy_policy

    config = PolicyConfig(engine={"name": "scripted", "mode": "oracle"}, num_cpus=0.1)
    policy = deploy_policy(config, app)
    pod = ray.remote(HarnessPod).options(num_cpus=0.01)
    pods = [pod.remote(policy, pod_id=f"{app}-{i}") for i in range(n)]
    ray.get([p.start.remote() for p in pods])
    pids = ray.get([p.__ray_call__.remote(lambda self: os.getpid()) for p in pods])
    return policy, pods, pids


def run(
    kinds: list[str], ns: list[int], hand_ns: list[int], reps: int, settle_s: float, warmup: bool
) -> list[Round]:
    """The whole bench; prints as it goes and returns every round."""
    import ray

    from forge.cluster import init_ray
    from forge.sandboxes.bwrap import require_bwrap

    require_bwrap()  # the episodes run isolated, as in a training run
    init_ray()
    _, pods, pids = start_pods(max([*ns, 1]))
    pod_pss = med([tree_memory(psutil.Process(pid), set(), False)[1] for pid in pids])
    load = os.getloadavg()
    print(
        f"{psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, load "
        f"average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the start; settle {settle_s:g} s; "
        f"a HarnessPod's own process (proxy, not in the columns below): PSS {pod_pss / MIB:.0f} MiB"
    )
    nice = psutil.Process(pids[0]).nice()  # the sandboxes' too; by hand runs at the same
    print(f"niceness of the HarnessPods, their sandboxes and the by-hand runs: {nice}")
    print(HEADER)
    rounds: list[Round] = []

    def add(r: Round) -> None:
        print_round(r)
        rounds.append(r)

    try:
        for kind in kinds:
            if warmup:  # first starts read Chromium and the X programs from disk
                stack_round(pods, pids, kind, 1, settle_s)
                hand_round(kind, 1, settle_s, nice)
            for _ in range(reps if 1 in ns else 0):
                add(stack_round(pods, pids, kind, 1, settle_s))
                if 1 in hand_ns:
                    add(hand_round(kind, 1, settle_s, nice))
            for i, n in enumerate(sorted({*ns, *hand_ns} - {1})):
                ways = [("OpenForge", ns), ("by hand", hand_ns)][:: -1 if i % 2 else 1]
                for way, wanted in ways:  # which goes first alternates: the load drifts
                    if n in wanted and way == "OpenForge":
                        add(stack_round(pods, pids, kind, n, settle_s))
                    elif n in wanted:
                        add(hand_round(kind, n, settle_s, nice))
        print()
        for kind in kinds:
            ones = [r for r in rounds if r.kind == kind and r.n == 1]
            png = next((r.png for r in ones if r.png), b"")
            print_split(kind, ones, proxy_calls(pods[0], png) if png else [])
        load = os.getloadavg()
        print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end")
    finally:
        ray.get([p.stop.remote() for p in pods])
        for p in pods:
            ray.kill(p)
    return rounds


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    main()
