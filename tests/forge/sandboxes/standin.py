"""A stand-in "internet" for the network-by-phase tests: an HTTP server on 127.0.0.2 (outside
every sandbox's network namespace), and an egress proxy served as a HarnessPod serves it. The
fixtures (``internet``, ``served``) are in conftest.py."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from forge.config.network import PhaseNetwork
from forge.sandboxes.egress import EgressProxy

STAND_IN = "127.0.0.2"


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"stand-in internet: {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def serve_internet() -> Iterator[int]:
    """The stand-in on 127.0.0.2; yields its port."""
    server = ThreadingHTTPServer((STAND_IN, 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def serve_egress(tmp_path: Path) -> Iterator[tuple[EgressProxy, int, str]]:
    """An egress proxy on a loopback port and on a Unix socket (as a HarnessPod serves it)."""
    proxy = EgressProxy()
    loop = asyncio.new_event_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    path = str(tmp_path / "egress.sock")
    loop.run_until_complete(proxy.start_tcp(sock))
    loop.run_until_complete(proxy.start_unix(path))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield proxy, sock.getsockname()[1], path
    asyncio.run_coroutine_threadsafe(proxy.stop(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def policy(mode: str, hosts: list[str], cidrs: list[str], ports: list[int]) -> PhaseNetwork:
    return PhaseNetwork(mode=mode, hosts=hosts, cidrs=cidrs, ports=ports)


FETCH = """
import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())
except Exception as e:
    print(f"{type(e).__name__}: {e}")
"""
