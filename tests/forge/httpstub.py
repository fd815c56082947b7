"""A tiny threaded HTTP server on loopback TCP or a Unix socket, for tests (stdlib only)."""

from __future__ import annotations

import json
import os
import socketserver
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (method, path, headers, parsed JSON body or raw bytes) -> (status, payload, extra headers)
Handler = Callable[[str, str, dict[str, str], Any], tuple[int, Any, dict[str, str]]]


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _RequestHandler(BaseHTTPRequestHandler):
    server: Any

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.stub.requests.append((self.command, self.path, headers, body))
        status, payload, extra = self.server.stub.handler(self.command, self.path, headers, body)
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


class StubServer:
    """Serves ``handler`` on ``unix_path`` when given, else on an ephemeral 127.0.0.1 port;
    every request is appended to ``requests``."""

    def __init__(self, handler: Handler, unix_path: str | None = None) -> None:
        self.handler = handler
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.server: socketserver.BaseServer
        if unix_path is not None:
            if os.path.exists(unix_path):
                os.unlink(unix_path)
            self.server = _UnixHTTPServer(unix_path, _RequestHandler)
            self.address = unix_path
        else:
            self.server = ThreadingHTTPServer(("127.0.0.1", 0), _RequestHandler)
            self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.server.stub = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
