"""What the task state servers (``server.py``, ``miniwob_server.py``) share: replies as
(status, body, content type), a JSON object body parsed, the state file written atomically (for
the development tools that run a server on their own), and a request handler. Standard library
only: the HarnessPod imports the servers (:mod:`tasks.webapps.hosted`), and the development
tools run them as programs, this file beside them."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MAX_BODY = 1 << 20  # bytes of a request body
Reply = tuple[int, bytes, str]
"""An answer: HTTP status, body, content type."""
NOT_FOUND: Reply = (404, b"not found\n", "text/plain")


def json_reply(code: int, value: Any) -> Reply:
    return code, json.dumps(value).encode(), "application/json"


MAX_DEPTH = 16  # containers within containers in a request body


def depth(value: Any) -> int:
    """How deeply lists and objects nest in ``value`` (0 for a scalar), without recursion."""
    most, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, (dict, list)):
            most = max(most, level)
            todo.extend((child, level + 1) for child in children)
    return most


def parse_object(body: bytes) -> dict[str, Any]:
    """A request body as a JSON object ({} when empty) nested at most :data:`MAX_DEPTH` deep
    (the state it may end up in stays easy to copy and check); ValueError otherwise."""
    try:
        value = json.loads(body or b"{}")
    except (ValueError, RecursionError) as e:
        raise ValueError("the body is a JSON object") from e
    if not isinstance(value, dict):
        raise ValueError("the body is a JSON object")
    if depth(value) > MAX_DEPTH:
        raise ValueError(f"the body nests at most {MAX_DEPTH} deep")
    return value


def write_atomic(path: Path, data: dict[str, Any]) -> None:
    """``data`` as JSON at ``path``, replaced in one step (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".state-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class JsonHandler(BaseHTTPRequestHandler):
    """Logs one line a request to stderr; never cached; ``path`` without query or fragment."""

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"{self.command} {self.path}\n")

    @property
    def route(self) -> str:
        return self.path.split("?", 1)[0].split("#", 1)[0]

    def send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, code: int, value: Any) -> None:
        self.send(code, json.dumps(value).encode(), "application/json")

    def not_found(self) -> None:
        self.send(404, b"not found\n", "text/plain")

    def read_body(self, limit: int = MAX_BODY) -> bytes:
        """The request's body; ValueError when it is longer than ``limit`` bytes."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise ValueError("Content-Length is a number") from None
        if not 0 <= length <= limit:
            raise ValueError(f"the body is at most {limit} bytes")
        return self.rfile.read(length)

    def json_body(self, limit: int = MAX_BODY) -> dict[str, Any]:
        """The request's JSON object ({} when empty); ValueError when it is not one."""
        return parse_object(self.read_body(limit))


def serve_until_stopped(server: ThreadingHTTPServer, banner: str) -> int:
    """Serve on ``server`` (its request threads daemons) until interrupted; 0. ``banner``: the
    line written to stderr once it listens."""
    server.daemon_threads = True
    print(banner, file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
