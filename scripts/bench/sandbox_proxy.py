"""Proxied calls made from inside a bubblewrap sandbox: the pod serving the sandbox's own
listener, against the relay it replaced, side by side in one run.

A HarnessPod in this process (its event loop on a thread of its own, as in a pod's actor) and
a scripted Policy; a local sandbox (root: its network namespace's listener made by this
process) whose exec runs a Python client making ``--calls`` chat completions one after
another, each on a new connection (as urllib, and many harnesses, make them). Rounds alternate:

- *served*: the pod accepts on the listener bound in the sandbox's namespace
  (:func:`forge.sandboxes.netns.serve_here`);
- *relayed*: the same withdrawn, so each connection costs two threads of this process that
  relay it to the pod's Unix socket (the way before).

Printed: the client's median milliseconds a call and this process's CPU milliseconds a call
(pod, relays and all), with the ratios.

    .venv/bin/python scripts/bench/sandbox_proxy.py [--calls 100] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import uuid

import forge  # noqa: F401  (before ray: a loopback-only local cluster)

# isort: split
import psutil
from episode_overhead import LocalPod

from forge.cluster import init_ray
from forge.config import PolicyConfig, SandboxConfig
from forge.sandboxes import netns
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.bwrap import bwrap_works
from forge.sandboxes.registry import sandbox_for
from serve.policy import deploy_policy

CLIENT = """
import json, sys, time, urllib.request
url, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
body = json.dumps({"model": "tiny", "max_tokens": 8,
                   "messages": [{"role": "user", "content": "Say something."}]}).encode()
headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
took = []
for _ in range(n):
    t0 = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=60) as r:
        r.read()
    took.append((time.perf_counter() - t0) * 1000)
print(json.dumps(took))
"""


def one_round(local: LocalPod, calls: int, served: bool) -> tuple[list[float], float]:
    """``calls`` calls from one sandbox exec: (the client's ms per call, CPU ms per call here)."""
    pod = local.pod
    serve = netns.server_of(pod.socket_path)
    if not served:
        netns.serve_here(pod.socket_path, None)
    episode = uuid.uuid4().hex
    info = pod.open_attempt(episode, 0)
    box = sandbox_for(SandboxConfig(disk_mb=None), None)
    spec = SandboxSpec(proxy_socket=pod.socket_path)
    box.create(spec)
    url = f"http://127.0.0.1:{spec.proxy_port}{info['path']}/v1/chat/completions"
    me = psutil.Process()
    try:
        before = sum(me.cpu_times()[:2])
        r = box.exec(["python3", "-c", CLIENT, url, info["api_key"], str(calls)], 600)
        cpu = sum(me.cpu_times()[:2]) - before
    finally:
        box.destroy()
        pod.close_attempt(episode, 0)
        if serve is not None:
            netns.serve_here(pod.socket_path, serve)
    if r.exit_code != 0:
        raise RuntimeError(f"the client failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout), 1000 * cpu / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100, help="calls per sandbox exec")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each way, alternated")
    args = parser.parse_args()
    if not bwrap_works() or not netns.host_relays_work():
        sys.exit("needs bubblewrap and a process that may enter network namespaces (root)")
    init_ray()
    config = PolicyConfig(engine={"name": "scripted"}, num_cpus=0.25)
    local = LocalPod(deploy_policy(config, "bench-sandbox-proxy"))
    try:
        one_round(local, 10, True)  # warm-up, not counted
        one_round(local, 10, False)
        ways = {"served": ([], []), "relayed": ([], [])}
        for n in range(args.rounds):
            for way in ("served", "relayed") if n % 2 == 0 else ("relayed", "served"):
                took, cpu = one_round(local, args.calls, way == "served")
                ways[way][0].extend(took)
                ways[way][1].append(cpu)
    finally:
        local.stop()
    print(f"{args.rounds} rounds of {args.calls} calls each way, alternated")
    print(f"{'way':8s} {'ms/call p50':>12s} {'p90':>8s} {'CPU ms/call':>12s}")
    stats = {}
    for way, (took, cpu) in ways.items():
        took.sort()
        stats[way] = (statistics.median(took), took[int(0.9 * len(took))], statistics.median(cpu))
        print(f"{way:8s} {stats[way][0]:12.2f} {stats[way][1]:8.2f} {stats[way][2]:12.2f}")
    served, relayed = stats["served"], stats["relayed"]
    print(
        f"relayed / served: latency p50 {relayed[0] / served[0]:.2f}x, "
        f"CPU a call {relayed[2] / served[2]:.2f}x"
    )


if __name__ == "__main__":
    main()
