"""The HarnessPod proxy's TCP listening socket: the first free port of a range.

On Kubernetes the run's NetworkPolicy lets sandbox pods reach the HarnessPods' pods on
``sandbox.kubernetes.proxy_ports`` only, so each proxy must listen on one of those ports;
several HarnessPods share a Ray pod (one network namespace), and each takes the first port no
one else holds. Elsewhere the range is ``(0, 0)``: any free port.

The socket is made with ``IPPROTO_TCP`` as its protocol: asyncio sets ``TCP_NODELAY`` on the
connections it accepts only then (a socket made with protocol 0, then handed to uvicorn, costs
~40 ms per call to delayed ACKs).
"""

from __future__ import annotations

import errno
import socket


class NoFreePort(OSError):
    """Every port of the configured range is taken on this host."""


def _family(host: str) -> socket.AddressFamily:
    infos = socket.getaddrinfo(host or None, 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    return infos[0][0]


def listen_tcp(
    host: str, ports: tuple[int, int], field: str = "ports", backlog: int = 2048
) -> socket.socket:
    """A listening TCP socket on ``host`` at the first free port of ``ports`` (inclusive;
    ``(0, 0)``: one the kernel picks). Binding and listening are one step per port, so two
    processes never end up sharing one (``SO_REUSEADDR`` lets two sockets bind the same port
    until one listens). :class:`NoFreePort`, naming ``field``, when every port is taken."""
    first, last = ports
    family = _family(host)
    for port in range(first, last + 1):
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(backlog)
        except OSError as e:
            sock.close()
            if e.errno == errno.EADDRINUSE:
                continue
            raise
        sock.setblocking(False)
        return sock
    n = last - first + 1
    raise NoFreePort(
        errno.EADDRINUSE,
        f"no free port for the proxy on {host}: all {n} of {field} [{first}, {last}] are in use "
        f"(more HarnessPods in one pod than ports, or other listeners there): widen {field}",
    )
