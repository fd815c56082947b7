"""Byte relays between a TCP port and a Unix socket: the sandbox's one way out to its proxy.

Standard library only: this file is mounted read-only into sandboxes and run there as a program,

    python3 bridge.py 127.0.0.1:PORT /run/forge/proxy.sock -- COMMAND [ARGS...]

which listens on ``127.0.0.1:PORT`` inside the sandbox's private network namespace, relays every
connection to the Unix socket (bind-mounted from the host, where the attempt's proxy serves),
runs COMMAND as its child, forwards SIGTERM/SIGINT/SIGHUP to it and exits with its exit code.

It sits in front of every harness of a local sandbox, so it starts its command as early as it
can: its listening sockets are bound with the interpreter's built-in ``_socket`` and the command
spawned before anything else is imported; the relay's modules (``socket``, ``threading``: some
30 ms of imports) load while the command starts, its connections waiting in the listen backlog
meanwhile. That is why the modules below are imported where they are used.

The host side imports :class:`Relay` from here too (``forge.sandboxes.bridge``) to relay a Unix
socket to a TCP proxy, or a loopback port to a Unix-socket proxy when no isolation is available.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing itself is one of the imports the program saves
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

_CHUNK = 65536


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until EOF, then half-close ``dst`` for writing."""
    import socket

    try:
        while True:
            data = src.recv(_CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        # A reset on either side: tear the whole connection down so the other pump stops too.
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _splice(client: socket.socket, connect: Callable[[], socket.socket]) -> None:
    """Relay one accepted connection to a fresh upstream connection, both ways."""
    import threading

    try:
        upstream = connect()
    except OSError as e:
        print(f"bridge: upstream connect failed: {e}", file=sys.stderr, flush=True)
        client.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def connect_unix(path: str) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        import socket

        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
        except OSError:
            s.close()
            raise
        return s

    return connect


def connect_tcp(host: str, port: int) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        import socket

        s = socket.create_connection((host, port), timeout=30.0)
        s.settimeout(None)  # model calls may take minutes: only the connect is bounded
        return s

    return connect


def _listen_fd(host: str, port: int) -> int:
    """A listening TCP socket's descriptor (not inherited by children), made with the built-in
    ``_socket`` alone: the program binds before it imports ``socket``."""
    import _socket

    s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        s.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        s.listen(128)
    except OSError:
        s.close()
        raise
    return s.detach()


def listen_tcp(host: str, port: int) -> socket.socket:
    import socket

    return socket.socket(fileno=_listen_fd(host, port))


def listen_unix(path: str) -> socket.socket:
    import socket

    if os.path.exists(path):
        os.unlink(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(128)
    return s


def split_host_port(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host or "127.0.0.1", int(port)


class Relay:
    """Accepts on ``listener`` (already bound and listening) and relays each connection to a new
    upstream socket from ``connect``, one thread per direction, until :meth:`close`."""

    def __init__(self, listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
        import threading

        self.listener = listener
        self._connect = connect
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="forge-relay", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """``host:port`` for a TCP listener, the path for a Unix one."""
        addr = self.listener.getsockname()
        return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)

    def _serve(self) -> None:
        import threading

        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                if self._closed:
                    return
                continue
            threading.Thread(target=_splice, args=(client, self._connect), daemon=True).start()

    def close(self) -> None:
        import socket

        self._closed = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()


def run_bridged(pairs: list[tuple[str, str]], cmd: list[str]) -> int:
    """Listen on each ``HOST:PORT`` relaying to its Unix socket, run ``cmd``, return its exit
    status. ``cmd`` starts once the ports listen and before the relays' modules are loaded."""
    import _signal

    fds = [_listen_fd(*split_host_port(listen)) for listen, _ in pairs]
    try:  # as subprocess would: SIGPIPE and SIGXFSZ back to their defaults (Python ignores them)
        pid = os.posix_spawnp(cmd[0], cmd, os.environ, setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ))
    except OSError as e:
        print(f"bridge: cannot run {cmd[0]!r}: {e}", file=sys.stderr, flush=True)
        return 127
    reaped = False

    def forward(signum: int, _frame: object) -> None:
        if not reaped:
            os.kill(pid, signum)

    for sig in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(sig, forward)
    import socket  # the command is starting meanwhile

    relays = [
        Relay(socket.socket(fileno=fd), connect_unix(path))
        for fd, (_, path) in zip(fds, pairs, strict=True)
    ]
    _, status = os.waitpid(pid, 0)
    reaped = True
    for relay in relays:
        relay.close()
    rc = os.waitstatus_to_exitcode(status)
    return 128 - rc if rc < 0 else rc


def main(argv: list[str]) -> int:
    sep = argv.index("--") if "--" in argv else -1
    pairs = argv[:sep] if sep > 0 else []
    if not pairs or len(pairs) % 2 or len(argv) <= sep + 1:
        print(
            "usage: bridge.py HOST:PORT UNIX_SOCKET [HOST:PORT UNIX_SOCKET ...] -- COMMAND [ARGS]",
            file=sys.stderr,
        )
        return 2
    return run_bridged(list(zip(pairs[::2], pairs[1::2], strict=True)), argv[sep + 1 :])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
