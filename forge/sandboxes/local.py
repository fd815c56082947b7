"""LocalSandbox: a host directory run under bubblewrap, or a plain process group when asked.

Layout on the host, one directory per sandbox under ``root``::

    <root>/<run>-<pod>-<attempt>-<random>/
        .forge-labels.json   labels, creator pid (and its start time), host, deadline
        workspace/           /workspace inside the sandbox
        home/                /home/agent inside (kept between execs of one sandbox)
        proxy.sock           host-side relay to a TCP proxy, when one is needed

With ``isolation="required"`` (the default) every exec runs under bwrap with private user, pid,
net, ipc and uts namespaces; it sees the system directories and the real Python read-only, of
the host's /etc only an allowlist (``bwrap.ETC_ALLOW``, copied: ``etc_tree.py``), its own
workspace and home read-write, a private /tmp, and a network with only loopback. Its one way
out is the attempt's proxy (the host Unix socket ``spec.proxy_socket``) on
``127.0.0.1:{spec.proxy_port}``, relayed from this process or by ``bridge.py`` in front of the
command (:mod:`forge.sandboxes.netns`). Where bwrap cannot work, constructing the sandbox
raises :class:`IsolationUnavailable` saying how to install it. Only ``isolation="none"`` runs
the command as a plain process group in the host workspace, sharing the host's network and
files (with a warning).

With ``disk_mb`` (``sandbox.disk_mb``) the workspace, home and /tmp live on a file system of
that size loop-mounted at ``<dir>/disk`` (:mod:`forge.sandboxes.quota`; root only, else a
warning and no quota): a command that fills it gets ENOSPC, the host's disk is untouched. Such
disks are made ahead and released behind the attempt (:mod:`forge.sandboxes.disk_pool`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal

from forge.sandboxes import archive, bridge, disk_pool, quota
from forge.sandboxes.base import ExecResult, SandboxSpec, read_regular, resolve_in
from forge.sandboxes.bwrap import (
    HOME,
    WORKSPACE,
    IsolationUnavailable,
    bwrap_argv,
    require_bwrap,
    sandbox_path_var,
)
from forge.sandboxes.egress import EGRESS_PORT
from forge.sandboxes.etc_tree import etc_mounts
from forge.sandboxes.netns import HostRelays, way_out
from forge.sandboxes.orphans import (
    LABELS_FILE,
    default_root,
    dir_name,
    pid_start,
    reap_orphans,
)
from forge.sandboxes.process import DEFAULT_OUTPUT_CAP, kill_group, run_in_group
from forge.sandboxes.tmproot import private_root

log = logging.getLogger(__name__)

_warned: set[str] = set()
ISOLATION = ("required", "none")
UNISOLATED_WARNING = (
    "sandbox.isolation=none: harnesses run unisolated, as plain host processes that share "
    "this host's network (any port: the Ray dashboard, GCS, other attempts' proxies) and can "
    "read whatever this user can"
)
__all__ = ["IsolationUnavailable", "LocalSandbox", "SandboxExpired", "reap_orphans"]


def _warn_once(key: str, msg: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(msg)


class SandboxExpired(RuntimeError):
    """The sandbox's deadline has passed: it accepts no more commands."""


@dataclass
class _State:
    """What cleanup needs; kept apart from the sandbox so ``weakref.finalize`` can hold it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    dirs: list[Path] = field(default_factory=list)
    procs: set[subprocess.Popen[bytes]] = field(default_factory=set)
    relays: list[bridge.Relay] = field(default_factory=list)
    destroyed: bool = False


def _cleanup(state: _State) -> None:
    with state.lock:
        state.destroyed = True
        procs = [p for p in state.procs if p.returncode is None]
        relays, state.relays = state.relays, []
    for p in procs:
        kill_group(p.pid, signal.SIGKILL)
    for r in relays:
        r.close()
    for d in state.dirs:  # a disk quota's file system released behind, once renamed away
        disk_pool.discard(d)


class LocalSandbox:
    """The Sandbox protocol on this machine; see the module docstring.

    ``isolation``: ``"required"`` runs every exec under bwrap and raises
    :class:`IsolationUnavailable` at once (saying how to install it) when bwrap cannot work
    here; ``"none"`` never uses it: the commands share the host's network and files.
    """

    def __init__(
        self,
        root: str | Path | None = None,
        isolation: Literal["required", "none"] = "required",
        output_cap: int = DEFAULT_OUTPUT_CAP,
        kill_grace_s: float = 2.0,
        disk_mb: int | None = None,
    ) -> None:
        if isolation not in ISOLATION:
            raise ValueError(f"isolation must be one of {ISOLATION}, not {isolation!r}")
        self.root = Path(root) if root is not None else default_root()
        if isolation == "required":
            require_bwrap()
        else:
            _warn_once("unisolated", UNISOLATED_WARNING)
        self.isolated = isolation == "required"
        self.output_cap = output_cap
        self.kill_grace_s = kill_grace_s
        self.disk_mb = disk_mb
        if disk_mb is not None and quota.quota_problem():
            _warn_once("quota", f"local sandboxes get no disk quota: {quota.quota_problem()}")
            self.disk_mb = None
        self._data: Path | None = None  # where workspace, home (and tmp) live
        self.spec = SandboxSpec()
        self.dir: Path | None = None
        self.deadline = 0.0
        self._socket: str | None = None  # host Unix socket bound at PROXY_SOCKET (isolated)
        self._proxy_addr: str | None = None  # proxy host:port as commands see it
        self._state = _State()
        self._finalizer = weakref.finalize(self, _cleanup, self._state)

    # -- layout ---------------------------------------------------------------------------

    @property
    def host_workspace(self) -> Path:
        return self._data_dir() / "workspace"

    @property
    def host_home(self) -> Path:
        return self._data_dir() / "home"

    def _data_dir(self) -> Path:
        """The sandbox folder, or with a disk quota the file system mounted in it."""
        d = self._require()
        return self._data if self._data is not None else d

    @property
    def workspace(self) -> str:
        """``/workspace`` under bwrap; the host workspace directory otherwise."""
        return WORKSPACE if self.isolated else str(self.host_workspace)

    def default_path(self) -> str:
        return sandbox_path_var()

    def path_map(self) -> dict[str, str]:
        if self.isolated:
            return {}
        mapping = {WORKSPACE: str(self.host_workspace), HOME: str(self.host_home)}
        mapping.update({target: host for host, target in self.spec.ro_mounts.items()})
        return mapping

    def _require(self) -> Path:
        if self.dir is None:
            raise RuntimeError("sandbox not created")
        if self._state.destroyed:
            raise RuntimeError("sandbox destroyed")
        return self.dir

    # -- lifecycle ------------------------------------------------------------------------

    def create(self, spec: SandboxSpec) -> None:
        if self.dir is not None:
            raise RuntimeError("sandbox already created")
        if spec.environment:
            raise ValueError(
                "a task with its own image (a Harbor task) needs sandbox.backend=docker"
            )
        for host in spec.ro_mounts:
            if not os.path.exists(host):
                raise FileNotFoundError(f"read-only mount source does not exist: {host}")
        private_root(self.root)  # never a folder another user made or can write into
        size = self.disk_mb  # with a quota: a folder whose disk is mounted already, when ready
        spare = disk_pool.take(self.root, dir_name(spec.labels), size) if size else None
        d = spare or Path(tempfile.mkdtemp(prefix=dir_name(spec.labels) + "-", dir=self.root))
        self._state.dirs.append(d)
        self.dir, self.spec = d, spec
        self.deadline = time.time() + spec.deadline_s
        pid = os.getpid()
        record = {
            "labels": spec.labels,
            "pid": pid,
            "pid_start": pid_start(pid),
            "host": socket.gethostname(),
            "created": time.time(),
            "deadline": self.deadline,
            "isolated": self.isolated,
        }
        tmp = d / (LABELS_FILE + ".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(d / LABELS_FILE)
        if size is not None:  # workspace, home and /tmp on a file system of that size
            self._data = d / quota.DISK if spare else quota.mount_disk(d, size)
        if not spare:  # a spare's disk has its folders already
            keep_tmp = self._data is not None or not self.isolated
            for sub in disk_pool.FOLDERS if keep_tmp else disk_pool.FOLDERS[:2]:
                (self._data_dir() / sub).mkdir()
        self._setup_proxy(spec, d)

    def _setup_proxy(self, spec: SandboxSpec, d: Path) -> None:
        if self.isolated:
            if spec.proxy_socket:
                self._socket = spec.proxy_socket
            elif spec.proxy_tcp:  # relay a private Unix socket to the TCP proxy
                sock_dir = d
                if len(str(d)) > 90:  # Unix socket paths are limited to ~108 bytes
                    sock_dir = Path(tempfile.mkdtemp(prefix="forge-sock-"))
                    self._state.dirs.append(sock_dir)
                path = str(sock_dir / "proxy.sock")
                host, port = bridge.split_host_port(spec.proxy_tcp)
                relay = bridge.Relay(bridge.listen_unix(path), bridge.connect_tcp(host, port))
                self._state.relays.append(relay)
                self._socket = path
            if self._socket:
                self._proxy_addr = f"127.0.0.1:{spec.proxy_port}"
            return
        if spec.proxy_tcp:
            self._proxy_addr = spec.proxy_tcp
        elif spec.proxy_socket:  # serve the Unix-socket proxy on a host loopback port
            listener = bridge.listen_tcp("127.0.0.1", 0)
            relay = bridge.Relay(listener, bridge.connect_unix(spec.proxy_socket))
            self._state.relays.append(relay)
            self._proxy_addr = relay.address

    def proxy_host_port(self) -> str:
        self._require()
        if self._proxy_addr is None:
            raise RuntimeError("sandbox has no proxy: set spec.proxy_socket or spec.proxy_tcp")
        return self._proxy_addr

    def destroy(self) -> None:
        """Kill every process group this sandbox started and remove its directories."""
        self._finalizer()

    # -- exec -----------------------------------------------------------------------------

    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        env = {
            "PATH": sandbox_path_var(),
            "HOME": HOME if self.isolated else str(self.host_home),
            "TZ": "UTC",
            "LANG": "C.UTF-8",
        }
        if not self.isolated:
            env["TMPDIR"] = str(self._data_dir() / "tmp")
        env.update(self.spec.env)
        env.update(extra or {})
        return env

    def exec(
        self, cmd: list[str], timeout_s: float, env: dict[str, str] | None = None
    ) -> ExecResult:
        d = self._require()
        remaining = self.deadline - time.time()
        if remaining <= 0:
            raise SandboxExpired(
                f"sandbox {d.name} passed its deadline {-remaining:.1f}s ago; not running {cmd!r}"
            )
        if not cmd:
            raise ValueError("empty command")
        if self.isolated:
            (argv, relays), cwd = self._bwrap(cmd, d), str(d)
        else:
            argv, cwd, relays = list(cmd), str(self.host_workspace), None
        try:
            return run_in_group(
                argv,
                env=self._env(env),
                cwd=cwd,
                timeout_s=min(timeout_s, remaining),
                output_cap=self.output_cap,
                grace_s=self.kill_grace_s,
                on_start=self._started if relays is None else partial(self._relayed, relays),
                on_end=self._ended,
                pass_fds=relays.child_fds if relays is not None else (),
            )
        finally:
            if relays is not None:
                relays.close()

    def _bwrap(self, cmd: list[str], d: Path) -> tuple[list[str], HostRelays | None]:
        """One exec's bwrap command line, and the relays this process runs for it (None: no
        proxy, or ``bridge.py`` relays from inside: :func:`forge.sandboxes.netns.way_out`)."""
        ports: dict[int, str] = {}  # port in the sandbox -> host socket it leads to
        if self._socket:
            if not os.path.exists(self._socket):
                raise RuntimeError(f"proxy socket {self._socket} does not exist")
            ports[self.spec.proxy_port] = self._socket
        if self.spec.egress_socket:  # the phase's way out: the run's egress proxy
            ports[EGRESS_PORT] = self.spec.egress_socket
        way = way_out(ports, cmd)
        if self._data is not None:  # /tmp inside the quota too (bwrap's own is unbounded)
            way.binds[str(self._data / "tmp")] = "/tmp"
        mounts = {**self.spec.ro_mounts, **way.ro_mounts}
        argv = bwrap_argv(
            workspace=str(self.host_workspace),
            home=str(self.host_home),
            ro_mounts=mounts,
            binds=way.binds,
            **etc_mounts(d / "etc", [*mounts.values(), *way.binds.values()]),
        )
        argv[1:1] = way.relays.bwrap_args() if way.relays is not None else []
        return argv + way.cmd, way.relays

    def _relayed(self, relays: HostRelays, proc: subprocess.Popen[bytes]) -> None:
        """:meth:`_started`, then the relays; bwrap is killed when they cannot be made."""
        self._started(proc)
        try:
            relays.start(proc)
        except BaseException:
            kill_group(proc.pid, signal.SIGKILL)
            proc.wait()
            self._ended(proc)
            raise

    def _started(self, proc: subprocess.Popen[bytes]) -> None:
        with self._state.lock:
            self._state.procs.add(proc)
            destroyed = self._state.destroyed
        if destroyed:
            kill_group(proc.pid, signal.SIGKILL)

    def _ended(self, proc: subprocess.Popen[bytes]) -> None:
        with self._state.lock:
            self._state.procs.discard(proc)

    # -- files ----------------------------------------------------------------------------

    def _roots(self) -> dict[str, Path]:
        ws, home = self.host_workspace, self.host_home
        roots = {WORKSPACE: ws, HOME: home}
        if not self.isolated:
            roots.update({str(ws): ws, str(home): home})
        return roots

    def resolve(self, path: str) -> Path:
        """The host path of sandbox path ``path`` (relative: from the workspace), following
        symlinks the way the sandbox would see them. ValueError when it leaves the workspace
        and home (``..``, other absolute paths, symlinks pointing out)."""
        return resolve_in(self._roots(), WORKSPACE, path)

    def put_file(self, path: str, content: bytes | str, mode: int = 0o644) -> None:
        host = self.resolve(path)
        if host in self._roots().values():
            raise ValueError(f"path {path!r} is a directory")
        host.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode() if isinstance(content, str) else content
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(host, flags, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(fd, mode)

    def get_file(self, path: str) -> bytes | None:
        """The file's bytes, or None when it does not exist or is not a regular file."""
        return read_regular(self.resolve(path), path)

    # -- archives -------------------------------------------------------------------------

    def get_archive(self, path: str, max_bytes: int = archive.DEFAULT_MAX_BYTES) -> bytes:
        """A tar of directory ``path`` (see :mod:`forge.sandboxes.archive`: no link is
        followed on the host; FIFOs and devices are left out)."""
        host = self.resolve(path)
        if not host.is_dir() or host.is_symlink():
            raise NotADirectoryError(f"path {path!r} is not a directory in the sandbox")
        return archive.pack_dir(host, max_bytes=max_bytes)

    def put_archive(self, path: str, data: bytes) -> None:
        """Extract tar ``data`` into directory ``path`` (created if missing)."""
        archive.unpack_into(self.resolve(path), data)
