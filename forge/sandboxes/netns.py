"""A bubblewrap sandbox's way out to its proxy: relayed by this process, or by ``bridge.py``.

Each exec of a local sandbox gets a private network namespace with only loopback; its one way
out is a listener on ``127.0.0.1:PORT`` in that namespace that leads to the attempt's proxy (and
in a phase that has one, the egress proxy's). Where this process may enter other network
namespaces (``CAP_SYS_ADMIN``: root, as the disk quota also needs), it makes those listeners
itself: bwrap reports its child's pid (``--info-fd``) and waits (``--block-fd``) while a
short-lived thread of this process enters the child's network namespace (``setns`` acts on the
calling thread alone), binds the listeners and ends; threads of this process relay their
connections (:class:`forge.sandboxes.bridge.Relay`); only then does the command start. A port
whose Unix socket this very process serves (the HarnessPod's proxy, :func:`serve_here`) is not
relayed at all: its listener is handed to that server, which accepts on it directly (a relay
costs each connection two threads and two more socket hops: ~0.6 ms of this process's CPU and
as much latency per proxied call).
Elsewhere ``bridge.py`` runs inside the sandbox in front of the command and does the same from
there, at the cost of an interpreter's start (~20 ms of CPU) per exec.

Either way the sandbox reaches nothing but those ports; here it does not even see the proxy's
socket file.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import select
import subprocess
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forge.sandboxes import bridge
from forge.sandboxes.bridge import Relay, listen_tcp
from forge.sandboxes.bwrap import host_python

if TYPE_CHECKING:
    import socket

SOCKETS = "/run/forge"  # where the bridge sees the host sockets it relays to, bound in
BRIDGE = "/opt/forge/bridge.py"  # the bridge program as the sandbox sees it
_BRIDGE_HOST = str(Path(bridge.__file__).resolve())
CLONE_NEWNET = 0x40000000
START_TIMEOUT_S = 30.0  # how long bwrap may take to report its child
END_WAIT_S = 2.0  # how long a bwrap whose child is gone may take to end
_probe_lock = threading.Lock()
_works: bool | None = None
# given a listener bound in a sandbox's network namespace, a server serves it too and returns
# what stops that, or None when it cannot (the listener is then relayed)
Serve = Callable[["socket.socket"], Callable[[], None] | None]
_served: dict[str, Serve] = {}  # host Unix socket -> this process's server of it


def serve_here(path: str, serve: Serve | None) -> None:
    """Declare (``serve``) or withdraw (None) this process's server of Unix socket ``path``: a
    sandbox port that leads to ``path`` is then served on its own listener by ``serve``, not
    relayed to the socket."""
    if serve is None:
        _served.pop(path, None)
    else:
        _served[path] = serve


def server_of(path: str) -> Serve | None:
    """This process's server of Unix socket ``path`` (:func:`serve_here`), if any."""
    return _served.get(path)


def serve_on_loop(
    loop: asyncio.AbstractEventLoop,
    start: Callable[[socket.socket], Coroutine[Any, Any, asyncio.AbstractServer]],
) -> Serve:
    """A :data:`Serve` for a server on ``loop``: ``start(listener)`` serves it there (awaited
    from the exec's thread), closing that server stops it. None, and the listener is relayed,
    when called on ``loop``'s own thread (it could not wait there) or once ``loop`` is closed."""

    def serve(listener: socket.socket) -> Callable[[], None] | None:
        with contextlib.suppress(RuntimeError):  # raised where no loop runs: an exec's thread
            if asyncio.get_running_loop() is loop:
                return None
        if loop.is_closed():
            return None
        server = asyncio.run_coroutine_threadsafe(start(listener), loop).result()

        def stop() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone, and its servers
                loop.call_soon_threadsafe(server.close)

        return stop

    return serve


def _libc_call(name: str, *args: int) -> None:
    """``setns``/``unshare`` through libc (os.setns and os.unshare are Python 3.12's)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


def _in_thread(fn: Callable[[], object]) -> object:
    """``fn()`` in a thread of its own, which ends after it (with whatever namespace it entered);
    its result, or what it raised."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # handed to the caller
            out.append(e)

    thread = threading.Thread(target=run, name="forge-netns")
    thread.start()
    thread.join()
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


class _BwrapEnded(OSError):
    """bwrap closed its info pipe without reporting: it is ending, and will say why."""


def _exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, left unreaped (its process group stays its own)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _ends(pid: int, within_s: float) -> bool:
    """Whether child ``pid`` exits (left unreaped) within ``within_s``."""
    end = time.monotonic() + within_s
    while not _exited(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


def host_relays_work() -> bool:
    """Whether this process can make listeners in a sandbox's network namespace (it may create
    one: the same capability); probed once per process in a throwaway thread."""
    global _works
    with _probe_lock:
        if _works is None:
            try:
                _in_thread(lambda: _libc_call("unshare", CLONE_NEWNET))
                _works = True
            except (OSError, AttributeError):
                _works = False
        return _works


def listen_in(pid: int, port: int, alive: Callable[[], bool] = lambda: True) -> socket.socket:
    """A listener on ``127.0.0.1:port`` in the network namespace of process ``pid``. bwrap's
    child brings loopback up while bwrap reports it: a bind that comes first is tried again
    (while ``alive()``, at most ``START_TIMEOUT_S``)."""
    ns = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:

        def bind() -> socket.socket:
            _libc_call("setns", ns, CLONE_NEWNET)
            end, pause = time.monotonic() + START_TIMEOUT_S, 0.0005
            while True:
                try:
                    return listen_tcp("127.0.0.1", port)
                except OSError as e:
                    if e.errno != errno.EADDRNOTAVAIL or time.monotonic() > end or not alive():
                        raise
                time.sleep(pause)
                pause = min(pause * 2, 0.01)

        return _in_thread(bind)  # type: ignore[return-value]
    finally:
        os.close(ns)


class HostRelays:
    """One exec's ports (sandbox port -> host Unix socket) relayed or served from the host:
    ``bwrap_args`` and ``child_fds`` go to bwrap; :meth:`start` (given the started bwrap) makes
    the listeners and lets the command run; :meth:`close` after the exec."""

    def __init__(self, ports: list[tuple[int, str]]) -> None:
        self.ports = ports
        self._info_r, self._info_w = os.pipe()
        self._block_r, self._block_w = os.pipe()
        self._open = {self._info_r, self._info_w, self._block_r, self._block_w}
        self.relays: list[Relay] = []
        self._stops: list[Callable[[], None]] = []  # the listeners this process serves

    @property
    def child_fds(self) -> tuple[int, int]:
        return self._info_w, self._block_r

    def bwrap_args(self) -> list[str]:
        return ["--info-fd", str(self._info_w), "--block-fd", str(self._block_r)]

    def start(self, proc: subprocess.Popen[bytes]) -> None:
        """Once bwrap has made its child: the listeners in the child's namespace, relayed; then
        the command may start. A bwrap that ended on its own (a mount it could not make) is
        left to report its status; OSError when it stalls, or the relays cannot be made."""
        self._close(*self.child_fds)  # bwrap's copies only: EOF on the info pipe when it exits
        try:
            pid = self._child_pid()
            for port, path in self.ports:
                listener = listen_in(pid, port, lambda: not _exited(proc.pid))
                stop = self._serve(path, listener)
                if stop is None:
                    self.relays.append(Relay(listener, bridge.connect_unix(path)))
                else:
                    self._stops.append(stop)
            os.write(self._block_w, b"x")
        except _BwrapEnded:
            return
        except OSError:  # its child gone (a mount it could not make): bwrap ends and says why
            if not _ends(proc.pid, END_WAIT_S):
                raise

    @staticmethod
    def _serve(path: str, listener: socket.socket) -> Callable[[], None] | None:
        serve = server_of(path)
        if serve is None:
            return None
        try:
            listener.setblocking(False)  # an event loop's now
            stop = serve(listener)
        except BaseException:
            listener.close()
            raise
        if stop is None:
            listener.setblocking(True)
        return stop

    def _child_pid(self) -> int:
        data = b""
        while True:
            ready, _, _ = select.select([self._info_r], [], [], START_TIMEOUT_S)
            if not ready:
                raise OSError(f"bwrap did not report its sandbox in {START_TIMEOUT_S:g}s")
            chunk = os.read(self._info_r, 4096)
            data += chunk
            try:
                return int(json.loads(data)["child-pid"])
            except (ValueError, KeyError, TypeError):
                if not chunk:
                    raise _BwrapEnded("bwrap ended before reporting its sandbox") from None

    def _close(self, *fds: int) -> None:
        for fd in fds:
            if fd in self._open:  # once only: a closed number may be another file's by now
                self._open.discard(fd)
                os.close(fd)

    def close(self) -> None:
        for stop in self._stops:
            stop()
        for relay in self.relays:
            relay.close()
        self._stops, self.relays = [], []
        self._close(*list(self._open))


@dataclass
class WayOut:
    """How one exec reaches its ports: the command to run (``bridge.py`` in front of it, or as
    given), what bwrap mounts for that, and the relays this process runs (None: the bridge's)."""

    cmd: list[str]
    ro_mounts: dict[str, str] = field(default_factory=dict)
    binds: dict[str, str] = field(default_factory=dict)
    relays: HostRelays | None = None


def way_out(ports: dict[int, str], cmd: list[str]) -> WayOut:
    """The way out of a sandbox whose ``127.0.0.1:PORT`` leads to host Unix socket ``ports[PORT]``
    (none: no network at all): relayed from this process where it can, else by the bridge."""
    if not ports:
        return WayOut(cmd)
    if host_relays_work():
        return WayOut(cmd, relays=HostRelays(list(ports.items())))
    inside = {port: f"{SOCKETS}/{port}.sock" for port in ports}
    pairs = [a for port in ports for a in (f"127.0.0.1:{port}", inside[port])]
    # -I -S: the relay needs only the standard library (skipping site: ~15 ms less)
    bridged = [host_python(), "-I", "-S", BRIDGE, *pairs, "--", *cmd]
    binds = {host: inside[port] for port, host in ports.items()}
    return WayOut(bridged, {_BRIDGE_HOST: BRIDGE}, binds)
