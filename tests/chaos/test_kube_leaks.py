"""Leak-proof with ``sandbox.backend=kubernetes`` (issue 12, item 6; the docker half is
test_docker_leaks.py): real ``forge run``s (react harness, the tiny model, the letters suite)
whose sandboxes are pods in kmock (an emulated API server served by this test process on a
loopback port, which the ``forge run`` subprocess reaches like any API server) made real by the
test-only controller (:class:`DockerKubelet`: each pod a container of the test dockerd), with a
fault in the middle:

1. a HarnessPod killed mid-episode (SIGKILL of the ``ray::HarnessPod`` process holding a
   connection to a running sandbox pod's agent): the run finishes, and no pod labelled
   ``openforge.run=<run>`` (nor its container) is left;
2. the driver SIGKILLed with its whole local Ray cluster mid-collection (once pods of the run
   exist): its pods are left behind (nothing of the run survives to delete them), and
   ``forge run --resume`` (its reconcile pass at start) deletes every one, and with them their
   containers.

What is left is read from kmock's store and the daemon itself, not from the run's records; the
counts before and after the reconcile pass are printed.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chaos import runner
from tests.chaos.procs import all_procs, poll, session, wait_for
from tests.chaos.test_docker_leaks import RUN_TIMEOUT_S, STEPS, _alive
from tests.forge.sandboxes.conftest import docker_daemon, docker_images  # noqa: F401 (fixtures)
from tests.forge.sandboxes.kube_controller import DockerKubelet, KMock

pytestmark = [pytest.mark.k8s, pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]
AGENT_PORT = 18957  # host network: an unusual port, apart from other tests' kubelets
HEARTBEAT_S = 2.0  # the Lease's TTL is max(30 s, 6 beats): 30 s


class Cluster:
    """kmock, its namespace, and the kubelet that runs its pods as containers."""

    def __init__(self, kube: KMock, ns: str, kubelet: DockerKubelet, docker: Any) -> None:
        self.kube, self.ns, self.kubelet, self.docker = kube, ns, kubelet, docker

    def pods(self, run: str) -> dict[str, dict[str, Any]]:
        """Live pods of ``run`` in kmock, by name."""
        return {
            name: pod
            for name, pod in self.kube.objects("v1/pods", self.ns).items()
            if ((pod.get("metadata") or {}).get("labels") or {}).get("openforge.run") == run
        }

    def containers(self, names: set[str] | None = None) -> list[dict[str, Any]]:
        """The kubelet's containers of this namespace (of the pods ``names``, if given)."""
        found = self.docker.api.containers(
            all=True, filters={"label": f"openforge.kubelet.ns={self.ns}"}
        )
        return [
            c
            for c in found
            if names is None or (c.get("Labels") or {}).get("openforge.kubelet") in names
        ]


@pytest.fixture
def cluster(
    request: pytest.FixtureRequest,
    docker_daemon: Any,  # noqa: F811
    docker_images: dict[str, str],  # noqa: F811
) -> Iterator[Cluster]:
    import docker

    ns = "leaks-" + re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[-40:].strip("-")
    kube = KMock()
    dc = docker.DockerClient(base_url=docker_daemon.host, timeout=120)
    kubelet = DockerKubelet(kube, ns, dc)
    try:
        yield Cluster(kube, ns, kubelet, dc)
    finally:
        kubelet.close()
        for c in dc.api.containers(all=True, filters={"label": f"openforge.kubelet.ns={ns}"}):
            dc.api.remove_container(c["Id"], force=True)
        dc.close()
        kube.close()


def _args(tmp: Path, name: str, c: Cluster) -> list[str]:
    return [
        str(runner.QUICKSTART),
        *runner.overrides(tmp, name, steps=STEPS),
        "sandbox.backend=kubernetes",
        f"sandbox.kubernetes.api_url={c.kube.url}",
        f"sandbox.kubernetes.namespace={c.ns}",
        f"sandbox.kubernetes.agent_port={AGENT_PORT}",
        "sandbox.kubernetes.pod_start_timeout_s=60",
        f"sandbox.kubernetes.heartbeat_s={HEARTBEAT_S}",
    ]


def _running_attempts(pods: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The Running pods of an attempt's harness (not verifiers), by name."""
    return {
        n: p
        for n, p in pods.items()
        if (p.get("status") or {}).get("phase") == "Running"
        and (p["metadata"].get("labels") or {}).get("openforge.kind") == "harness"
        and (p["metadata"].get("labels") or {}).get("openforge.episode")
    }


def _describe(pods: dict[str, dict[str, Any]]) -> list[str]:
    out = []
    for n, p in pods.items():
        lab = p["metadata"].get("labels") or {}
        out.append(
            f"{n} {(p.get('status') or {}).get('phase')} ip={(p.get('status') or {}).get('podIP')} "
            f"pod={lab.get('openforge.pod')} episode={lab.get('openforge.episode')} "
            f"attempt={lab.get('openforge.attempt')} kind={lab.get('openforge.kind')}"
        )
    return out


def _addr(ip: str, port: int) -> str:
    """``ip:port`` as /proc/net/tcp writes it (the address in host byte order, hex)."""
    return f"{struct.unpack('=I', socket.inet_aton(ip))[0]:08X}:{port:04X}"


def _agent_holders(ips: set[str]) -> dict[int, set[str]]:
    """``ray::HarnessPod`` processes with an open connection to the agent of a pod at one of
    ``ips``: pid -> those IPs (the sandbox clients keep their connection between calls)."""
    wanted = {_addr(ip, AGENT_PORT): ip for ip in ips}
    try:
        rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return {}
    by_inode: dict[str, str] = {}
    for row in rows:
        cols = row.split()
        if len(cols) > 9 and cols[2] in wanted and cols[3] == "01":  # ESTABLISHED
            by_inode[cols[9]] = wanted[cols[2]]
    out: dict[int, set[str]] = {}
    for pid, p in all_procs().items():
        if not (p.argv and p.argv[0].startswith("ray::HarnessPod")):
            continue
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                link = fd.readlink().name
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in by_inode:
                out.setdefault(pid, set()).add(by_inode[link[8:-1]])
    return out


def _deleted_by(c: Cluster, pod: str) -> str:
    """Which pass deleted ``pod``, from kmock's request log: the reaper LISTs the run's pods
    (a label selector) and, in an orphan sweep only, the heartbeat Leases, then DELETEs."""
    log = c.kube.requests()
    dels = [i for i, r in enumerate(log) if r[0] == "DELETE" and r[1].endswith(f"/pods/{pod}")]
    if not dels:
        return "nothing (never deleted)"
    lists = [
        j
        for j, r in enumerate(log[: dels[0]])
        if r[0] == "GET" and r[1].endswith("/pods") and "labelSelector" in r[2]
    ]
    if not lists:
        return "its own HarnessPod or an unknown client"
    if any(r[0] == "GET" and r[1].endswith("/leases") for r in log[lists[-1] : dels[0]]):
        return "an orphan sweep (the pool replacing its HarnessPod, or an expired Lease)"
    return "a full pass over the run's pods (the run's end or start)"


@pytest.mark.full  # ~45 s: -m full; the same kill in docker (test_docker_leaks.py) and the
# Kubernetes reconciler's own chaos (test_reconcile.py) are in CI
def test_kube_pod_killed_mid_episode_leaves_no_pod(tmp_path: Path, cluster: Cluster) -> None:
    name = "kube-pod-killed"
    t0 = time.monotonic()
    first = runner.ForgeRun(_args(tmp_path, name, cluster), tmp_path / "run.log")
    try:

        def victim() -> tuple[int, dict[str, dict[str, Any]]] | None:
            _alive(first)
            running = _running_attempts(cluster.pods(name))
            ips = {(p.get("status") or {}).get("podIP") for p in running.values()} - {None}
            for pid, held in _agent_holders(ips).items():  # type: ignore[arg-type]
                mine = {n: p for n, p in running.items() if p["status"]["podIP"] in held}
                return pid, mine
            return None

        pod_pid, held = wait_for(
            "a running attempt's pod and its HarnessPod", victim, RUN_TIMEOUT_S
        )
        os.kill(pod_pid, signal.SIGKILL)  # the HarnessPod actor's worker, mid-episode
        killed_at = time.monotonic()
        print(f"\n[kube leaks] killed HarnessPod pid {pod_pid} holding {len(held)} pod(s):")
        for line in _describe(held):
            print(f"[kube leaks]   {line}")
        # The pool replaces the dead HarnessPod and deletes its pods by name at once; failing
        # that, the reconcile loop does once its Lease has expired, or the run's end does.
        gone = poll(
            lambda: not (set(held) & set(cluster.pods(name))) or first.proc.poll() is not None,
            90,
            every=0.5,
        )
        still = set(held) & set(cluster.pods(name))
        print(
            f"[kube leaks] {time.monotonic() - killed_at:.1f}s after the kill: the killed "
            f"HarnessPod's pods left: {len(still)}/{len(held)}" + ("" if gone else " (after 90s)")
        )
        rc = first.wait(RUN_TIMEOUT_S)
    finally:
        first.kill_session()
    out = first.text()
    assert rc == 0, out[-3000:]
    time.sleep(3)  # the kubelet removes a deleted pod's container at its next watch event
    left = cluster.pods(name)
    containers = cluster.containers()
    print(
        f"[kube leaks] pod killed: run finished rc={rc} in {time.monotonic() - t0:.0f}s; "
        f"pods of the run left: {len(left)}, their containers left: {len(containers)}"
    )
    for pod in held:
        print(f"[kube leaks] {pod} deleted by {_deleted_by(cluster, pod)}")
    assert left == {}, _describe(left)
    assert containers == [], [c["Names"] for c in containers]


@pytest.mark.full  # two runs (killed, resumed) in containers: -m full; the local one is in CI
def test_kube_driver_sigkilled_then_resume_reaps_pods(tmp_path: Path, cluster: Cluster) -> None:
    name = "kube-driver-killed"
    run_dir = tmp_path / name
    t0 = time.monotonic()
    first = runner.ForgeRun(_args(tmp_path, name, cluster), tmp_path / "first.log")
    try:

        def collecting_step_2() -> dict[str, dict[str, Any]]:
            _alive(first)
            ckpt = run_dir / "checkpoints" / "step_1" / "trainer_state.json"
            return ckpt.exists() and _running_attempts(cluster.pods(name))

        running = wait_for("step 2's attempts in pods", collecting_step_2, RUN_TIMEOUT_S)
        print(f"\n[kube leaks] killing the driver's session with {len(running)} attempt pod(s) on")
        # SIGKILL to the driver and its whole local Ray cluster at once: no finally, no atexit.
        first.kill_session()
        quiet = poll(lambda: not session(first.proc.pid), 120, every=0.5)
        assert quiet, f"processes of the killed run still alive: {session(first.proc.pid)}"
    finally:
        first.kill_session()
    before = cluster.pods(name)
    before_c = cluster.containers(set(before))
    print(
        f"[kube leaks] left by the killed driver: {len(before)} pod(s) of the run, "
        f"{len(before_c)} container(s) of them"
    )
    for line in _describe(before):
        print(f"[kube leaks]   {line}")
    assert before, "the driver was killed mid-attempt: its pods should be left behind"
    assert before_c, "the kubelet should still run the left pods' containers"

    t1 = time.monotonic()
    out = runner.resume(run_dir, tmp_path / "resumed.log", STEPS, RUN_TIMEOUT_S)
    reaped = re.search(r"reaped (\d+) orphaned sandbox", out)
    after = cluster.pods(name)
    after_c = poll(lambda: not cluster.containers(set(before)), 15, every=0.5)
    after_c = cluster.containers(set(before))
    all_c = cluster.containers()
    print(
        f"[kube leaks] resumed run finished in {time.monotonic() - t1:.0f}s "
        f"(test {time.monotonic() - t0:.0f}s); reconcile said: "
        f"{reaped.group(0) if reaped else 'nothing'}; pods of the run before: {len(before)}, "
        f"after: {len(after)}; containers of the left pods before: {len(before_c)}, after: "
        f"{len(after_c)} (all of the namespace now: {len(all_c)})"
    )
    assert "resumed from" in out, out[-3000:]
    assert reaped and int(reaped.group(1)) >= len(before), out[-3000:]
    assert after == {}, _describe(after)
    assert after_c == [] and all_c == [], [c["Names"] for c in all_c]
