"""DockerSandbox: one container per attempt, driven through the sandbox agent inside it.

The Docker API is the control plane only (create, inspect, remove); every exec and file
transfer goes to the agent (:mod:`forge.sandboxes.agent`) over a Unix socket in a per-sandbox
host folder bind-mounted at ``/run/forge``, authenticated by a random per-sandbox token.

A container runs from ``openforge/<harness>:<version>-<base>`` when that image is present (the
harness's files are in it, at the sandbox paths its ``ro_mounts()`` names), else from the base
image with those files bind-mounted read-only (the GUI harnesses' base is ``openforge/gui``);
a verifier's sandbox (harness None) uses the base. A task's services (web apps, the launcher)
are bind-mounted read-only like a harness's files.
It has no network (``network_mode=none``): its only way out is the attempt's proxy, whose Unix
socket is bind-mounted at ``/run/forge/proxy.sock`` and relayed by the agent to
``127.0.0.1:<proxy_port>`` inside. The harness runs as the images' unprivileged user
(:data:`~forge.sandboxes.agent_boot.HARNESS_UID`), which cannot enter ``/run/forge`` (the
host folder: mode 0700, not its own), so it can neither read the token nor replace the
agent's socket; the agent (root) refuses to start otherwise (in a task's own image: its
``agent_user``, else root, as Harbor runs agents). The image's root is read-only and
the writable places (workspace, home, /tmp, /var/tmp) are tmpfs mounts of ``disk_mb`` each:
``yes > f`` ends in ENOSPC, never on the host's disk. A task's own image (Harbor) keeps a
writable root and its workdir on the container's layer, with the files the image put there
(Docker copies nothing into a tmpfs): no quota there but the daemon's own. CPU, memory and
pids limits come from :class:`SandboxConfig`;
labels name the run, HarnessPod, episode, attempt and a deadline (epoch seconds), so
:func:`~forge.sandboxes.docker_api.reap_containers` finds leaked ones. The workspace and home
live in the container. With ``sandbox.warm_pool`` an attempt takes over a container made ahead
(:mod:`forge.sandboxes.warm_pool`; labelled ``warm`` instead of an episode and attempt, which
its host folder's ``attempt.json`` then records).
A task that brings its own Dockerfile (a Harbor task) runs from its own image
(:mod:`forge.images.task`) with the harness's files mounted, in the Dockerfile's workdir, with
the environment its Dockerfile set; its compose services start in its network namespace, its
``ENTRYPOINT`` runs beside the agent, and its health checks pass before the attempt starts
(:mod:`forge.sandboxes.task_services`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import secrets
import socket
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge.config import SandboxConfig
from forge.images import builder
from forge.images import tags as images
from forge.sandboxes import bridge, task_services, warm_pool
from forge.sandboxes.agent_boot import (
    DEFAULT_PATH,
    HARNESS_GID,
    HARNESS_UID,
    HOME,
    WORKSPACE,
    agent_command,
)
from forge.sandboxes.agent_client import AgentClient, AgentUnavailable
from forge.sandboxes.agent_sandbox import AgentSandbox
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.docker_api import LABEL, _remove, client_for, require_image
from forge.sandboxes.egress import EGRESS_PORT
from forge.sandboxes.orphans import dir_name, pid_start, rmtree
from forge.sandboxes.tmproot import private_root

log = logging.getLogger(__name__)

RUN_DIR = "/run/forge"  # the per-sandbox host folder, inside the container
AGENT_SOCKET = f"{RUN_DIR}/agent.sock"
PROXY_SOCKET = f"{RUN_DIR}/proxy.sock"
EGRESS_SOCKET = f"{RUN_DIR}/egress.sock"
TOKEN_FILE = f"{RUN_DIR}/token"
CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"]


def image_and_binds(
    client: Any, config: SandboxConfig, harness: str | None, ro_mounts: dict[str, str]
) -> tuple[str, dict[str, str]]:
    """The image a sandbox runs and the host paths to bind-mount read-only (host -> sandbox):
    the harness's image when present (without the mounts it already holds), else the base."""
    if config.image:
        require_image(client, config.image, None)
        return config.image, dict(ro_mounts)
    if harness is not None:
        try:
            tag, baked = images.harness_tag(harness), images._harness_sources(harness)
        except Exception:  # a harness with no image of its own (its files come from options)
            tag, baked = None, {}
        if tag is not None and builder.has_image(client, tag):
            return tag, {h: t for h, t in ro_mounts.items() if baked.get(h) != t}
    base = images.base_for(harness)  # the gui base (Chromium, Xvfb) for the GUI harnesses
    require_image(client, base, harness or "base")
    return base, dict(ro_mounts)


@dataclass
class _State:
    """What cleanup needs; kept apart from the sandbox so ``weakref.finalize`` can hold it."""

    client: Any = None
    container_id: str | None = None
    dir: Path | None = None
    agent: AgentClient | None = None
    relays: list[bridge.Relay] = field(default_factory=list)
    services: list[str] = field(default_factory=list)  # a task's compose services' containers
    destroyed: bool = False


def _cleanup(state: _State) -> None:
    state.destroyed = True
    if state.agent is not None:
        state.agent.close()
    for service in state.services if state.client is not None else []:
        _remove(state.client, service)
    state.services = []
    if state.container_id is not None and state.client is not None:
        _remove(state.client, state.container_id)
    for relay in state.relays:
        relay.close()
    state.relays = []
    if state.dir is not None:
        rmtree(state.dir)


class DockerSandbox(AgentSandbox):
    """The Sandbox protocol in a Docker container; see the module docstring."""

    workspace = WORKSPACE

    def __init__(self, config: SandboxConfig | None = None, harness: str | None = None) -> None:
        self.config = config or SandboxConfig(backend="docker")
        self.harness = harness
        self.spec = SandboxSpec()
        self.image = ""
        self.name = ""
        self.deadline = 0.0
        self._proxy_addr: str | None = None
        self.service_session: int | None = None  # the session of its image's ENTRYPOINT
        self._path = DEFAULT_PATH
        self._state = _State()
        self._finalizer = weakref.finalize(self, _cleanup, self._state)

    # -- lifecycle ------------------------------------------------------------------------

    def create(self, spec: SandboxSpec) -> None:
        if self._state.dir is not None:
            raise RuntimeError("sandbox already created")
        warm = warm_pool.take(self, spec)
        if warm is not None:  # made ahead: a handover, no container created now
            warm_pool.hand_over(self, warm, spec)
            self._proxy_addr, self._path = warm._proxy_addr, warm._path
            record = {"labels": spec.labels, "deadline": self.deadline, "since": time.time()}
            try:  # the attempt's identity, which the container's labels cannot take now
                (self._state.dir / "attempt.json").write_text(json.dumps(record))
            except BaseException:
                self._finalizer()
                raise
            return
        client = client_for(self.config.docker_host)
        self._state.client = client
        for host in spec.ro_mounts:
            if not os.path.exists(host):
                raise FileNotFoundError(f"read-only mount source does not exist: {host}")
        if spec.environment:  # a task's own image: built when missing, the harness mounted
            from forge.images import task as task_images

            image = task_images.ensure(
                client,
                spec.environment,
                self.config.image_aliases,
                network=task_images.build_network(self.config),
            )
            binds = dict(spec.ro_mounts)
            self.workspace = spec.environment["workdir"]
        else:
            image, binds = image_and_binds(client, self.config, self.harness, spec.ro_mounts)
        self.spec, self.image = spec, image
        try:
            self._start(client, spec, binds)
        except BaseException:  # leave no container or folder behind a failed create
            self._finalizer()
            raise

    def warm_key(self) -> tuple[Any, ...]:
        """What fixes this sandbox besides its spec: a warm pool's kind."""
        return (self.config.model_dump_json(), self.harness)

    def warm_factory(self) -> functools.partial[DockerSandbox]:
        """New sandboxes made as this one (a warm pool's)."""
        return functools.partial(DockerSandbox, self.config, self.harness)

    def _start(self, client: Any, spec: SandboxSpec, binds: dict[str, str]) -> None:
        d = self._make_dir(spec)
        token = secrets.token_hex(32)
        fd = os.open(d / "token", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token)
        mounts = [_bind(str(d), RUN_DIR, read_only=False)]
        mounts += [_bind(h, t, read_only=True) for h, t in sorted(binds.items())]
        proxies = {}
        socket_path = self._proxy_socket(spec, d)
        if socket_path is not None:
            mounts.append(_bind(socket_path, PROXY_SOCKET, read_only=False))
            proxies[f"127.0.0.1:{spec.proxy_port}"] = PROXY_SOCKET
            self._proxy_addr = f"127.0.0.1:{spec.proxy_port}"
        if spec.egress_socket:  # the phase's way out: the run's egress proxy
            mounts.append(_bind(spec.egress_socket, EGRESS_SOCKET, read_only=False))
            proxies[f"127.0.0.1:{EGRESS_PORT}"] = EGRESS_SOCKET
        extra = [] if os.geteuid() == 0 else ["--socket-mode", "666"]
        command = agent_command(
            unix=AGENT_SOCKET,
            token_file=TOKEN_FILE,
            workspace=self.workspace,
            proxies=proxies,
            extra=extra + harness_user_args(spec.environment),
        )
        self.deadline = time.time() + spec.deadline_s
        self.name = f"forge-{dir_name(spec.labels)}-{secrets.token_hex(3)}"
        cfg, task = self.config, spec.environment or {}
        cpus, memory_mb = task.get("cpus") or cfg.cpus, task.get("memory_mb") or cfg.memory_mb
        container = client.api.create_container(
            self.image,
            entrypoint=command[:1],  # the agent, never the image's own entrypoint (started later)
            command=command[1:],
            healthcheck=task_services.docker_healthcheck(task.get("healthcheck")),
            name=self.name,
            hostname="sandbox",
            working_dir=self.workspace,
            labels=self.labels(spec, d),
            environment={"PATH": DEFAULT_PATH, "HOME": HOME, "LANG": "C.UTF-8", "TZ": "UTC"},
            host_config=client.api.create_host_config(
                # a task's compose services share its loopback: their names lead there
                extra_hosts={s["name"]: "127.0.0.1" for s in task.get("services") or []},
                mounts=mounts,
                tmpfs=tmpfs_mounts(  # in memory_mb
                    task.get("storage_mb") or cfg.disk_mb, None if task else self.workspace
                ),
                read_only=not spec.environment,
                network_mode="none",
                init=True,
                nano_cpus=int(cpus * 1e9),
                mem_limit=memory_mb << 20,
                memswap_limit=memory_mb << 20,
                pids_limit=cfg.pids,
                cap_drop=["ALL"],
                cap_add=CAPS,
                security_opt=["no-new-privileges"],
            ),
        )
        self._state.container_id = container["Id"]
        client.api.start(container["Id"])
        base_env = {"PATH": DEFAULT_PATH, "HOME": HOME, "TZ": "UTC", "LANG": "C.UTF-8"}
        if spec.environment:  # what the task's Dockerfile set (ENV), and its own variables
            from forge.images.task import image_env

            task_env = {**image_env(client, self.image), **spec.environment.get("env", {})}
            base_env.update({k: v for k, v in task_env.items() if k != "HOME"})
            self._path = base_env["PATH"]
        base_env.update(spec.env)
        agent = AgentClient(f"unix:{d / 'agent.sock'}", token, base_env=base_env)
        self._state.agent = agent
        self._wait_ready(agent, client, container["Id"])
        if spec.environment:  # its ENTRYPOINT's services, then its health, as Harbor has them
            self._task_services(client, spec, container["Id"])

    def _task_services(self, client: Any, spec: SandboxSpec, cid: str) -> None:
        """A task image's compose services beside it, its ENTRYPOINT, then its health."""
        env, cfg = spec.environment or {}, self.config
        if env.get("services"):
            from forge.images import task as task_images

            network = task_images.build_network(cfg)
            tags = task_images.service_images(client, env, cfg.image_aliases, network=network)
            limits = {"mem_limit": cfg.memory_mb << 20, "pids_limit": cfg.pids,
                      "cap_drop": ["ALL"], "cap_add": CAPS,
                      "security_opt": ["no-new-privileges"]}  # fmt: skip
            labels = client.api.inspect_container(cid)["Config"]["Labels"]
            task_services.start_compose(
                client, cid, env["services"], tags, labels, limits, self._state.services,
                cfg.start_timeout_s,
            )  # fmt: skip
        entrypoint = client.images.get(self.image).attrs["Config"].get("Entrypoint") or []
        self.service_session = task_services.start_entrypoint(self, entrypoint)
        task_services.wait_healthy(client, cid, cfg.start_timeout_s)

    def _make_dir(self, spec: SandboxSpec) -> Path:
        root = Path(self.config.root) if self.config.root else Path(tempfile.gettempdir())
        root = root / "openforge-docker"
        if len(str(root)) > 60:  # Unix socket paths are limited to ~108 bytes
            root = Path(tempfile.gettempdir()) / "openforge-docker"
        private_root(root)  # never a folder another user made or can write into
        d = Path(tempfile.mkdtemp(prefix=dir_name(spec.labels)[:24] + "-", dir=root))
        self._state.dir = d
        return d

    def _proxy_socket(self, spec: SandboxSpec, d: Path) -> str | None:
        """The host Unix socket of the attempt's proxy (a relay to ``proxy_tcp`` if needed)."""
        if spec.proxy_socket:
            return spec.proxy_socket
        if spec.proxy_tcp:
            path = str(d / "proxy-relay.sock")
            host, port = bridge.split_host_port(spec.proxy_tcp)
            relay = bridge.Relay(bridge.listen_unix(path), bridge.connect_tcp(host, port))
            self._state.relays.append(relay)
            return path
        return None

    def labels(self, spec: SandboxSpec, d: Path) -> dict[str, str]:
        out = {f"{LABEL}.{k}": str(v) for k, v in spec.labels.items()}
        out.setdefault(f"{LABEL}.run", "")
        pid = os.getpid()
        out.update(
            {
                f"{LABEL}.deadline": str(int(self.deadline) + 1),
                f"{LABEL}.host": socket.gethostname(),
                f"{LABEL}.creator": f"{pid} {pid_start(pid)}",
                f"{LABEL}.dir": str(d),
                f"{LABEL}.harness": self.harness or "",
            }
        )
        return out

    def _wait_ready(self, agent: AgentClient, client: Any, cid: str) -> None:
        end = time.monotonic() + self.config.start_timeout_s
        while True:
            try:
                agent.wait_ready(timeout_s=min(1.0, max(0.05, end - time.monotonic())))
                return
            except AgentUnavailable as e:
                state = client.api.inspect_container(cid)["State"]
                if not state.get("Running") or time.monotonic() >= end:
                    logs = client.api.logs(cid, tail=20).decode(errors="replace")
                    why = f"exited with {state.get('ExitCode')}" if not state.get("Running") else e
                    raise AgentUnavailable(
                        f"container {self.name} ({self.image}): the sandbox agent did not start "
                        f"({why}):\n{logs}"
                    ) from e

    def default_path(self) -> str:
        return self._path  # a task image's own PATH (its ENV), else the system's

    def changed_paths(self) -> list[tuple[str, str]]:
        """``(kind, path)`` of what changed in the container against its image: ``A``dded,
        ``C``hanged or ``D``eleted (tmpfs mounts are not in it)."""
        self._agent()
        diff = self._state.client.api.diff(self._state.container_id) or []
        return [("CAD"[d["Kind"]], d["Path"]) for d in diff]

    def destroy(self) -> None:
        """Remove the container (killing everything in it) and its host folder; idempotent."""
        self._finalizer()

    def proxy_host_port(self) -> str:
        self._agent()
        if self._proxy_addr is None:
            raise RuntimeError("sandbox has no proxy: set spec.proxy_socket or spec.proxy_tcp")
        return self._proxy_addr


def harness_user_args(environment: dict[str, Any] | None) -> list[str]:
    """The agent's ``--user``: the images' unprivileged user; in a task's own image (Harbor)
    the task's ``agent_user`` when it names one, else none (root, as Harbor runs its agents and
    oracles: the residual risk docs/harbor.md states)."""
    if not environment:
        return ["--user", f"{HARNESS_UID}:{HARNESS_GID}"]
    who = environment.get("agent_user")
    return ["--user", str(who)] if who and str(who) not in ("root", "0", "0:0") else []


def tmpfs_mounts(disk_mb: int | None, workspace: str | None) -> dict[str, str]:
    """The container's writable places, each a tmpfs of ``disk_mb`` (None: unbounded, but for
    the memory limit): the workspace (None: a task image's workdir, whose files Docker would
    not copy into a tmpfs, stays on the container's own layer) and home, handed to the
    harness's user by the agent, and the shared temp folders (noexec, as Docker's default)."""
    size = f",size={disk_mb}m" if disk_mb is not None else ""
    out = {p: f"rw,nosuid,nodev,mode=1777{size}" for p in ("/tmp", "/var/tmp")}
    out.update({p: f"rw,exec,nosuid,nodev,mode=0755{size}" for p in (workspace, HOME) if p})
    return out


def _bind(source: str, target: str, read_only: bool) -> Any:
    from docker.types import Mount

    return Mount(target=target, source=source, type="bind", read_only=read_only)
