"""A private Docker daemon, started and stopped by pid, for image builds, the docker tests and
hosts without a system daemon.

Everything lives under one root (default ``~/.cache/openforge/dockerd``)::

    sock   the daemon's API socket (``unix://<root>/sock``)
    data   its data root (images, containers): images built here persist across starts
    exec   its exec root (containerd's sockets and state)
    pid    its pidfile
    log    its output
    owner  "<pid> <start time>" of the process that started it

It runs as ``dockerd --iptables=false --ip-forward=false --bridge=none``: it never touches the
host's firewall, forwarding or bridges, and containers get no network unless given one (the
docker sandbox uses ``network_mode=none``). A daemon left running by a process that crashed
(its owner is dead) is stopped by its pid before a new one starts at the same root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from forge.sandboxes.orphans import pid_start
from serve.models import cache_dir

DOCKERD_PATHS = ("/usr/sbin/dockerd", "/usr/bin/dockerd")  # looked at when it is not on PATH
DOCKERD_ARGS = ("--iptables=false", "--ip-forward=false", "--bridge=none")
INSTALL_HINT = (
    "install Debian's docker.io (apt-get install docker.io), or point docker_host at a daemon"
)


class DaemonError(RuntimeError):
    """The private daemon cannot be started (dockerd missing, it died, it never answered)."""


def default_root() -> Path:
    return cache_dir() / "dockerd"


@dataclass
class Daemon:
    """A running private daemon. ``started``: this process started it (and should stop it)."""

    root: Path
    pid: int
    started: bool = True

    @property
    def socket(self) -> Path:
        return self.root / "sock"

    @property
    def host(self) -> str:
        """The ``base_url`` / ``DOCKER_HOST`` of the daemon."""
        return f"unix://{self.socket}"

    @property
    def log(self) -> Path:
        return self.root / "log"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (our own child not yet reaped) is not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _is_dockerd_of(pid: int, root: Path) -> bool:
    """Whether ``pid`` is the dockerd serving ``root`` (never a reused pid of something else)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return bool(argv) and os.path.basename(argv[0]) == "dockerd" and f"unix://{root}/sock" in argv


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _owner_alive(root: Path) -> bool:
    try:
        pid_text, start = (root / "owner").read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return False
    return _alive(pid) and pid_start(pid) in (None, start)


def answers(sock: Path, timeout_s: float = 2.0) -> bool:
    """Whether a Docker API answers ``GET /_ping`` with OK on Unix socket ``sock``."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(str(sock))
            s.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            reply = s.recv(4096)
    except OSError:
        return False
    return reply.startswith(b"HTTP/1.") and b" 200 " in reply.split(b"\r\n", 1)[0] + b" "


def running(root: str | Path | None = None) -> Daemon | None:
    """The daemon at ``root`` when one is running there (by its pidfile), else None."""
    root = Path(root).absolute() if root is not None else default_root()
    pid = _read_pid(root / "pid")
    if pid is None or not _alive(pid) or not _is_dockerd_of(pid, root):
        return None
    return Daemon(root=root, pid=pid, started=False)


def start_daemon(
    root: str | Path | None = None, timeout_s: float = 60.0, reuse: bool = False
) -> Daemon:
    """Start a private dockerd under ``root`` and wait until it answers.

    A daemon already running there is reused when ``reuse`` is set and it answers; otherwise it
    is stopped first when its owner is dead (a crashed run left it), and a live owner's daemon
    is refused with :class:`DaemonError`. Raises :class:`DaemonError` when dockerd is missing,
    exits, or does not answer within ``timeout_s`` (with the tail of its log).
    """
    root = Path(root).absolute() if root is not None else default_root()
    old = running(root)
    if old is not None:
        if reuse and answers(old.socket):
            return old
        if _owner_alive(root) and not reuse:
            raise DaemonError(
                f"a dockerd (pid {old.pid}) at {root} is in use by a live process; use its "
                f"socket {old.host} or another root"
            )
        stop_daemon(old)
    exe = shutil.which("dockerd") or next((p for p in DOCKERD_PATHS if os.access(p, os.X_OK)), None)
    if exe is None:
        raise DaemonError(f"dockerd not found: {INSTALL_HINT}")
    if os.geteuid() != 0:
        raise DaemonError("a private dockerd needs root; run as root or use an existing daemon")
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name in ("sock", "pid"):
        with contextlib.suppress(FileNotFoundError):
            (root / name).unlink()
    me = os.getpid()
    (root / "owner").write_text(f"{me} {pid_start(me)}\n")
    argv = [
        exe,
        *DOCKERD_ARGS,
        "-H",
        f"unix://{root}/sock",
        "--data-root",
        str(root / "data"),
        "--exec-root",
        str(root / "exec"),
        "--pidfile",
        str(root / "pid"),
    ]
    with open(root / "log", "ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    daemon = Daemon(root=root, pid=proc.pid)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DaemonError(f"dockerd exited with {proc.returncode}:\n{_tail(daemon.log)}")
        if answers(daemon.socket, timeout_s=1.0):
            return daemon
        time.sleep(0.1)
    stop_daemon(daemon)
    raise DaemonError(f"dockerd did not answer within {timeout_s:.0f}s:\n{_tail(daemon.log)}")


def stop_daemon(daemon: Daemon, timeout_s: float = 30.0) -> None:
    """Stop ``daemon`` by its pid: SIGTERM (it stops its containers and its containerd), then
    SIGKILL past ``timeout_s``; then the containerd it leaves behind, if any. Idempotent."""
    pid = daemon.pid
    if _alive(pid) and _is_dockerd_of(pid, daemon.root):
        _signal_and_wait(pid, timeout_s)
    containerd = _read_pid(daemon.root / "exec" / "containerd" / "containerd.pid")
    if containerd is not None and _is_containerd_of(containerd, daemon.root):
        _signal_and_wait(containerd, 10.0)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)  # our own child: no zombie left behind
    if not _alive(pid):
        _unmount_under(daemon.root)


def _unmount_under(root: Path) -> None:
    """Lazily unmount what a stopped daemon leaves mounted in its folder (its network
    namespace file under ``exec/netns``, its data root's private bind), so the folder can go."""
    prefix = str(root.resolve()) + "/"
    with contextlib.suppress(OSError):
        lines = Path("/proc/self/mounts").read_text().splitlines()
        points = [line.split()[1] for line in lines if len(line.split()) > 1]
        for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _is_containerd_of(pid: int, root: Path) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return "containerd" in argv.split("\0")[0] and str(root / "exec") in argv


def _signal_and_wait(pid: int, timeout_s: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        if not _alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        if not _alive(pid):
            return
        time.sleep(0.1)


def sweep_stale(parent: str | Path) -> int:
    """Stop the daemons of roots directly under ``parent`` whose owner process is dead (test
    sessions that crashed), and delete those roots; returns how many were swept."""
    parent = Path(parent)
    swept = 0
    for root in parent.iterdir() if parent.is_dir() else ():
        if not (root / "owner").exists() or _owner_alive(root):
            continue
        daemon = running(root)
        if daemon is not None:
            stop_daemon(daemon)
        shutil.rmtree(root, ignore_errors=True)
        swept += 1
    return swept


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
