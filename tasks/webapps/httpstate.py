"""What the task state servers (``server.py``, ``miniwob_server.py``) share: the state file
written atomically, and a request handler that answers with bytes or JSON and reads a JSON
object body. Standard library only: it runs inside the sandbox, mounted beside them."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

MAX_BODY = 1 << 20  # bytes of a request body


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

    def json_body(self, limit: int = MAX_BODY) -> dict[str, Any]:
        """The request's JSON object ({} when empty); ValueError when it is not one."""
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 <= length <= limit:
            raise ValueError(f"the body is at most {limit} bytes")
        body = json.loads(self.rfile.read(length) or b"{}")
        if not isinstance(body, dict):
            raise ValueError("the body is a JSON object")
        return body
