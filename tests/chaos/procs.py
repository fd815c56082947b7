"""Sandbox processes and directories of one test's sandbox root, found from the host's /proc.

A local sandbox's outer ``bwrap`` carries the host path of its sandbox directory in its argv
(``--bind <root>/<dir>/workspace /workspace``); everything inside the sandbox (the bridge, the
harness, its tools) descends from it. So "the processes of sandboxes under ``root``" are the
processes whose argv names ``root`` and all their descendants, and each one's sandbox labels are
read from ``<root>/<dir>/.forge-labels.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from forge.sandboxes.orphans import LABELS_FILE

T = TypeVar("T")


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: str  # kernel start time: (pid, start) names one process, whatever pid reuse does
    argv: tuple[str, ...]
    sandbox: str | None = None  # the sandbox directory's name under the root, when known

    @property
    def cmd(self) -> str:
        return " ".join(self.argv)


def _stat(pid: int) -> tuple[int, str, str, str] | None:
    """(ppid, start time, state, comm) of ``pid``; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    cut = text.rfind(")")
    fields = text[cut + 2 :].split()
    return int(fields[1]), fields[19], fields[0], text[text.find("(") + 1 : cut]


def _argv(pid: int) -> tuple[str, ...]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ()
    return tuple(x.decode(errors="replace") for x in raw.split(b"\0") if x)


_argv_cache: dict[tuple[int, str, str], tuple[str, ...]] = {}


def all_procs() -> dict[int, Proc]:
    procs: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        st = _stat(pid)
        if st is None:
            continue
        key = (pid, st[1], st[3])  # comm changes on exec, and with it the argv
        argv = _argv_cache.get(key)
        if not argv:
            argv = _argv_cache[key] = _argv(pid)
        procs[pid] = Proc(pid, st[0], st[1], argv)
    return procs


def sandbox_procs(root: Path) -> list[Proc]:
    """Live processes of sandboxes under ``root``: those whose argv names it, and descendants."""
    procs = all_procs()
    prefix = str(root).rstrip("/") + "/"
    owner: dict[int, str] = {}
    for p in procs.values():
        for arg in p.argv:
            if arg.startswith(prefix):
                owner[p.pid] = arg[len(prefix) :].split("/", 1)[0]
                break
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out: dict[int, Proc] = {}
    stack = [(pid, box) for pid, box in owner.items()]
    while stack:
        pid, box = stack.pop()
        if pid in out or pid not in procs:
            continue
        p = procs[pid]
        out[pid] = Proc(p.pid, p.ppid, p.start, p.argv, box)
        stack.extend((c, box) for c in children.get(pid, []))
    return sorted(out.values(), key=lambda p: p.pid)


def session(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid``."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            text = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(name))
    return out


def alive(p: Proc) -> bool:
    st = _stat(p.pid)  # a zombie (Z) has exited: it only waits for its parent to reap it
    return st is not None and st[1] == p.start and st[2] != "Z"


def labels(root: Path, sandbox: str | None) -> dict[str, Any]:
    """The labels (run, pod, episode, attempt) of sandbox directory ``sandbox`` ({} if gone)."""
    if not sandbox:
        return {}
    try:
        return json.loads((root / sandbox / LABELS_FILE).read_text()).get("labels", {})
    except (OSError, ValueError):
        return {}


def runs_react(argv: list[str]) -> bool:
    """Whether ``argv`` is a python running ``react_agent.py`` (not the bwrap that mounts it,
    nor the bridge that starts it: they name it too, and a fault meant for the harness that hit
    the sandbox's own init, stopped, left that init behind for good)."""
    if not argv or "python" not in os.path.basename(argv[0]):
        return False
    args = [a for a in argv[1:] if not a.startswith("-")]
    return bool(args) and args[0].endswith("react_agent.py")


def harness_procs(root: Path) -> list[tuple[Proc, dict[str, Any]]]:
    """The react harness processes (``react_agent.py``) running in sandboxes under ``root``,
    with their sandbox's labels."""
    out = []
    for p in sandbox_procs(root):
        if runs_react(p.argv):
            found = labels(root, p.sandbox)
            if found:
                out.append((p, found))
    return out


def _proxy_sockets(p: Proc) -> list[tuple[str, int, str]]:
    """(TCP state, unread bytes, inode) of each connection ``p`` (a harness, in its sandbox's
    network namespace) has to its proxy's port: one per model call."""
    from forge.sandboxes.base import SandboxSpec

    port = f"{SandboxSpec().proxy_port:04X}"
    try:
        table = Path(f"/proc/{p.pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return []
    out = []
    for row in table:
        cols = row.split()
        # remote address (hex ip:port), state, tx_queue:rx_queue, ..., inode: the client's side
        if len(cols) > 9 and cols[2].endswith(":" + port):
            out.append((cols[3], int(cols[4].split(":")[1], 16), cols[9]))
    return out


def _proxy_connections(p: Proc) -> list[tuple[str, int]]:
    return [(state, unread) for state, unread, _ in _proxy_sockets(p)]


def peek_answer(p: Proc) -> bytes | None:
    """The unread answer in harness ``p``'s socket to its proxy, read without consuming it (a
    copy of its socket through pidfd_getfd, then MSG_PEEK); None where that cannot be done."""
    import ctypes
    import socket

    inodes = {inode for state, unread, inode in _proxy_sockets(p) if unread > 0}
    fd_dir = Path(f"/proc/{p.pid}/fd")
    try:
        fds = [int(f.name) for f in fd_dir.iterdir() if os.readlink(f)[8:-1] in inodes]
    except OSError:
        return None
    if not fds:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        pidfd = os.pidfd_open(p.pid)
    except OSError:
        return None
    try:
        dup = libc.syscall(438, pidfd, fds[0], 0)  # pidfd_getfd (same number on every arch)
        if dup < 0:
            return None
        with socket.socket(fileno=dup) as sock:
            try:
                return sock.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except OSError:
                return None
    finally:
        os.close(pidfd)


def calling_model(p: Proc) -> bool:
    """Whether harness ``p`` has a model call in flight (a connection ESTABLISHED, 01)."""
    return any(state == "01" for state, _ in _proxy_connections(p))


def answer_waiting(p: Proc) -> bool:
    """Whether the answer to a model call of harness ``p`` sits unread in its socket (the
    proxy may have closed its side already: CLOSE_WAIT, 08)."""
    return any(state in ("01", "08") and unread > 0 for state, unread in _proxy_connections(p))


def signal_proc(p: Proc, sig: int = signal.SIGKILL) -> bool:
    """Send ``sig`` to ``p`` if it is still that process; True when it was delivered."""
    if not alive(p):
        return False
    try:
        os.kill(p.pid, sig)
    except ProcessLookupError:
        return False
    return True


def poll(check: Callable[[], T | None], timeout_s: float, every: float = 0.05) -> T | None:
    """Call ``check`` until it returns something truthy (returned) or ``timeout_s`` passes
    (its last value is returned)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


def wait_for(what: str, check: Callable[[], T | None], timeout_s: float, every: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` at the deadline."""
    value = poll(check, timeout_s, every)
    if not value:
        raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
    return value


@dataclass
class Observer:
    """Watches a sandbox root from outside while a run goes on: every attempt that got a
    sandbox (its labels) and every sandbox process it saw. The run cannot hide from it: it
    reads the file system and /proc, not the run's own records."""

    root: Path
    every: float = 0.1
    attempts: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    procs: dict[tuple[int, str], Proc] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def scan(self) -> None:
        if self.root.is_dir():
            for d in list(self.root.iterdir()):
                found = labels(self.root, d.name)
                if "episode" in found and "attempt" in found:
                    self.attempts.setdefault((found["episode"], int(found["attempt"])), found)
        for p in sandbox_procs(self.root):
            self.procs.setdefault((p.pid, p.start), p)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                self.scan()
            self._stop.wait(self.every)

    def __enter__(self) -> Observer:
        self._thread = threading.Thread(target=self._loop, name="chaos-observer", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with contextlib.suppress(OSError, ValueError):
            self.scan()

    def leaked(self) -> list[str]:
        """Sandbox processes and directories still there (what a finished run must not leave)."""
        out = [f"process {p.pid} ({p.cmd[:120]})" for p in self.procs.values() if alive(p)]
        seen = {(p.pid, p.start) for p in self.procs.values()}
        out += [
            f"process {p.pid} ({p.cmd[:120]})"
            for p in sandbox_procs(self.root)
            if (p.pid, p.start) not in seen
        ]
        if self.root.is_dir():
            out += [f"sandbox directory {d}" for d in sorted(self.root.iterdir())]
        return out
