"""A task image's own services, as Harbor runs them (issue 32).

Harbor starts a task's container with the image's ``ENTRYPOINT`` and the command ``sh -c "sleep
infinity"``: an entrypoint that starts a service (a DNS filter, a database) and then runs its
arguments keeps the container up with the service running. OpenForge's container runs its
sandbox agent instead, so once the agent answers, :func:`start_entrypoint` starts the image's
entrypoint with Harbor's command, as root, in a session of its own (its output in
:data:`ENTRY_LOG`). Its session id is kept: the verifier's sweep of leftover processes spares that
session alone (no process the agent starts can join it), so the task's services run on while its
tests do, as in Harbor.

A health check (the task's ``[environment.healthcheck]``, or the image's own ``HEALTHCHECK``) is
run by the Docker daemon; :func:`wait_healthy` holds the attempt until it passes. One that never
passes fails the sandbox's start: an infrastructure failure, retried, never the agent's.

A task's compose services (``docker-compose.yaml``: :mod:`tasks.harbor_compose`) are containers
of their own started by :func:`start_compose` in the agent's network namespace (which has no
network but its loopback), so the agent reaches each at ``NAME:PORT`` (its name maps to
127.0.0.1) and nothing else is reachable from them either; each is healthy before the attempt
starts and is removed with the sandbox (labelled as it is, so the reaper finds leftovers).
"""

from __future__ import annotations

import time
from typing import Any

ENTRY_LOG = "/var/log/forge-entrypoint.log"
HARBOR_COMMAND = ["sh", "-c", "sleep infinity"]  # what Harbor hands the image's ENTRYPOINT
# $1: the log; the rest: the entrypoint and its arguments. Prints the new session's id once the
# child has left the exec's process group (the agent kills that group when this shell ends).
_START = r"""
log=$1; shift
python3 -Ic 'import os, sys; os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])' "$@" \
  </dev/null >>"$log" 2>&1 &
pid=$!
i=0
while [ $i -lt 200 ]; do
  s=$(cat /proc/$pid/stat 2>/dev/null) || break
  s=${s##*) }; set -- $s
  [ "$4" = "$pid" ] && break
  i=$((i + 1)); sleep 0.02
done
echo $pid
"""


def start_entrypoint(sandbox: Any, entrypoint: list[str]) -> int | None:
    """Start ``entrypoint`` (the image's) with Harbor's command in ``sandbox`` as root, in a
    session of its own; returns that session's id (None when the image has no entrypoint)."""
    if not entrypoint:
        return None
    argv = ["sh", "-c", _START, "entrypoint", ENTRY_LOG, *entrypoint, *HARBOR_COMMAND]
    r = sandbox.exec(argv, 30.0, user="root")
    if r.exit_code != 0 or not r.stdout.strip().isdigit():
        raise RuntimeError(f"starting the image's ENTRYPOINT {entrypoint}: {r.stderr.strip()}")
    return int(r.stdout.strip())


def docker_healthcheck(check: dict[str, Any] | None) -> dict[str, Any] | None:
    """A :class:`tasks.environment.Healthcheck` as the Docker API's ``Healthcheck`` (None: the
    image's own, if any)."""
    if not check:
        return None
    ns = 1_000_000_000
    return {
        "test": ["CMD-SHELL", check["command"]],
        "interval": int(check.get("interval_s", 5.0) * ns),
        "timeout": int(check.get("timeout_s", 30.0) * ns),
        "start_period": int(check.get("start_period_s", 0.0) * ns),
        "retries": int(check.get("retries", 3)),
    }


def wait_healthy(client: Any, container_id: str, timeout_s: float) -> None:
    """Return once the container's health check passes (at once when it has none); raise with
    the check's last output when it is unhealthy or still starting after ``timeout_s`` (at
    least as long as the check itself may take)."""
    state = client.api.inspect_container(container_id)
    check = (state.get("Config") or {}).get("Healthcheck") or {}
    ns = 1e9
    own = check.get("StartPeriod", 0) / ns + (check.get("Retries") or 3) * (
        (check.get("Interval") or 30 * ns) / ns + (check.get("Timeout") or 30 * ns) / ns
    )
    end = time.monotonic() + max(timeout_s, own + 5.0)
    while True:
        health = state["State"].get("Health")
        status = health.get("Status") if health else "healthy"
        if status == "healthy":
            return
        if status == "unhealthy" or time.monotonic() > end:
            last = (health.get("Log") or [{}])[-1] if health else {}
            output = str(last.get("Output", "")).strip()[-500:]
            raise RuntimeError(
                f"the task's health check did not pass ({status}; exit "
                f"{last.get('ExitCode')}): {output}"
            )
        time.sleep(0.2)
        state = client.api.inspect_container(container_id)


def start_compose(
    client: Any,
    main_id: str,
    services: list[dict[str, Any]],
    images: dict[str, str],
    labels: dict[str, str],
    host_config: dict[str, Any],
    started: list[str],
    timeout_s: float,
) -> None:
    """Start each of ``services`` (from ``images``) in the network namespace of container
    ``main_id``, their ids appended to ``started`` as they are made (for the caller's
    cleanup), then wait until each is healthy."""
    for svc in services:
        container = client.api.create_container(
            images[svc["name"]],
            command=svc.get("command"),
            entrypoint=svc.get("entrypoint"),
            environment=svc.get("env") or {},
            labels={**labels, "openforge.service": svc["name"]},
            healthcheck=docker_healthcheck(svc.get("healthcheck")),
            host_config=client.api.create_host_config(
                network_mode=f"container:{main_id}", **host_config
            ),
        )
        started.append(container["Id"])
        client.api.start(container["Id"])
    for cid in started:
        wait_healthy(client, cid, timeout_s)
