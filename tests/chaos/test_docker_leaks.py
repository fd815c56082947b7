"""Leak-proof with ``sandbox.backend=docker`` (issue 12, item 6): real ``forge run``s (react
harness, the tiny model, the letters suite, as the rest of the chaos suite) whose sandboxes are
containers in the test session's private Docker daemon, with a fault in the middle:

1. a HarnessPod killed mid-episode (SIGKILL of the very process that created a running
   container, read from its ``openforge.creator`` label): the run finishes, and no container
   labelled ``openforge.run=<run>`` is left;
2. the driver SIGKILLed with its whole local Ray cluster mid-collection (once containers of the
   run exist): its containers are left behind (nothing of the run survives to remove them), and
   ``forge run --resume`` (its reconcile pass at start) removes every one.

What is left is read from the daemon itself (the Docker API), not from the run's records; the
counts before and after the reconcile pass are printed.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.chaos import runner
from tests.chaos.procs import all_procs, poll, session, wait_for
from tests.forge.sandboxes.conftest import docker_daemon, docker_images  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]
STEPS = 2
RUN_TIMEOUT_S = 400


def _args(tmp: Path, name: str, host: str, steps: int = STEPS) -> list[str]:
    return [
        str(runner.QUICKSTART),
        *runner.overrides(tmp, name, steps=steps),
        "sandbox.backend=docker",
        f"sandbox.docker_host={host}",
    ]


def _containers(client: Any, run: str, running: bool = False) -> list[dict[str, Any]]:
    """Containers of ``run`` in the daemon (all states, or only running ones)."""
    return client.api.containers(all=not running, filters={"label": f"openforge.run={run}"})


def _harness_containers(client: Any, run: str) -> list[dict[str, Any]]:
    """Running containers of ``run`` of an attempt (an episode label), not verifiers."""
    return [
        c
        for c in _containers(client, run, running=True)
        if (c.get("Labels") or {}).get("openforge.episode")
        and (c.get("Labels") or {}).get("openforge.harness")
    ]


def _describe(cs: list[dict[str, Any]]) -> list[str]:
    out = []
    for c in cs:
        lab = c.get("Labels") or {}
        out.append(
            f"{c['Id'][:12]} {c.get('State')} pod={lab.get('openforge.pod')} "
            f"episode={lab.get('openforge.episode')} attempt={lab.get('openforge.attempt')}"
        )
    return out


def _alive(run: runner.ForgeRun) -> None:
    if run.proc.poll() is not None:
        raise AssertionError(f"forge run ended early:\n{run.text()[-3000:]}")


@pytest.mark.full  # ~50 s: -m full; in CI the same kill on the local backend
# (tests/chaos/test_in_process.py)
# and the docker backend's reaping (tests/forge/sandboxes/test_docker.py)
def test_docker_pod_killed_mid_episode_leaves_no_container(
    tmp_path: Path,
    docker_daemon: Any,  # noqa: F811
    docker_images: dict[str, str],  # noqa: F811
) -> None:
    from forge.sandboxes.docker_api import client_for

    name = "docker-pod-killed"
    client = client_for(docker_daemon.host)
    t0 = time.monotonic()
    # One step: the pod is killed in it (at its first running container), the step retries the
    # attempt on another pod, and the run finishes; a second step would add nothing to this.
    args = _args(tmp_path, name, docker_daemon.host, steps=1)
    first = runner.ForgeRun(args, tmp_path / "run.log")
    try:

        def victim() -> tuple[dict[str, Any], int] | None:
            _alive(first)
            for c in _harness_containers(client, name):
                pid = int(c["Labels"]["openforge.creator"].split()[0])
                proc = all_procs().get(pid)
                if proc and proc.argv and proc.argv[0].startswith("ray::HarnessPod"):
                    return c, pid
            return None

        container, pod_pid = wait_for("a running attempt's container", victim, RUN_TIMEOUT_S)
        labels = container["Labels"]
        os.kill(pod_pid, signal.SIGKILL)  # the HarnessPod actor's worker, mid-episode
        killed_at = time.monotonic()
        print(f"\n[docker leaks] killed HarnessPod pid {pod_pid} ({_describe([container])[0]})")
        # The pool replaces the dead pod and reaps what it left (its creator is dead).
        gone = poll(
            lambda: not client.api.containers(all=True, filters={"id": container["Id"]}),
            120,
            every=0.5,
        )
        print(
            "[docker leaks] the killed pod's container "
            + (
                f"removed {time.monotonic() - killed_at:.1f}s after the kill"
                f" (run still going: {first.proc.poll() is None})"
                if gone
                else "still there after 120s"
            )
        )
        rc = first.wait(RUN_TIMEOUT_S)
    finally:
        first.kill_session()
    out = first.text()
    assert rc == 0, out[-3000:]
    left = _containers(client, name)
    print(
        f"[docker leaks] pod killed (pod={labels.get('openforge.pod')} "
        f"episode={labels.get('openforge.episode')}): run finished rc={rc} in "
        f"{time.monotonic() - t0:.0f}s; containers of the run left: {len(left)}"
    )
    assert left == [], _describe(left)
    assert gone, "the killed pod's container was not reaped"
    folder = labels.get("openforge.dir", "")
    assert folder and not os.path.exists(folder), f"the killed pod's host folder left: {folder}"


@pytest.mark.full  # two runs (killed, resumed) in containers: -m full; the local one is in CI
def test_docker_driver_sigkilled_then_resume_reaps_containers(
    tmp_path: Path,
    docker_daemon: Any,  # noqa: F811
    docker_images: dict[str, str],  # noqa: F811
) -> None:
    from forge.sandboxes.docker_api import client_for

    name = "docker-driver-killed"
    run_dir = tmp_path / name
    client = client_for(docker_daemon.host)
    t0 = time.monotonic()
    first = runner.ForgeRun(_args(tmp_path, name, docker_daemon.host), tmp_path / "first.log")
    try:

        def collecting_step_2() -> list[dict[str, Any]]:
            _alive(first)
            ckpt = run_dir / "checkpoints" / "step_1" / "trainer_state.json"
            return ckpt.exists() and _harness_containers(client, name)

        running = wait_for("step 2's attempts in containers", collecting_step_2, RUN_TIMEOUT_S)
        print(f"\n[docker leaks] killing the driver's session with {len(running)} attempt(s) on")
        # SIGKILL to the driver and its whole local Ray cluster at once: no finally, no atexit.
        first.kill_session()
        quiet = poll(lambda: not session(first.proc.pid), 120, every=0.5)
        assert quiet, f"processes of the killed run still alive: {session(first.proc.pid)}"
    finally:
        first.kill_session()
    before = _containers(client, name)
    print(f"[docker leaks] containers of the run left by the killed driver: {len(before)}")
    for line in _describe(before):
        print(f"[docker leaks]   {line}")
    assert before, "the driver was killed mid-attempt: its containers should be left behind"

    t1 = time.monotonic()
    out = runner.resume(run_dir, tmp_path / "resumed.log", STEPS, RUN_TIMEOUT_S)
    after = _containers(client, name)
    reaped = re.search(r"reaped (\d+) orphaned sandbox", out)
    print(
        f"[docker leaks] resumed run finished in {time.monotonic() - t1:.0f}s "
        f"(test {time.monotonic() - t0:.0f}s); reconcile said: "
        f"{reaped.group(0) if reaped else 'nothing'}; containers before: {len(before)}, "
        f"after: {len(after)}"
    )
    assert "resumed from" in out, out[-3000:]
    assert reaped and int(reaped.group(1)) >= len(before), out[-3000:]
    assert after == [], _describe(after)
    ids = {c["Id"] for c in before}
    folders = [c["Labels"].get("openforge.dir", "") for c in before]
    assert all(folders) and not [f for f in folders if os.path.exists(f)], folders
    assert not [c for c in client.api.containers(all=True) if c["Id"] in ids]
