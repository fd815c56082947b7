"""A page application's address inside the sandbox, passed on to the HarnessPod that keeps it.

Standard library only: it runs inside the sandbox as the task's service, from the read-only
mount ``/opt/forge/webapps`` (``tasks.webapps.hosted.relayed`` writes its command)::

    FORGE_PAGE_KEY=KEY python3 /opt/forge/webapps/relay.py --port 8765 \\
        --to http://127.0.0.1:PROXY/episodes/E/attempts/N/page/8765

It listens on ``127.0.0.1:PORT`` and answers each ``GET`` and ``POST`` with what the upstream
answers to the same path and query under ``--to``, sending the attempt's key (the environment's
``FORGE_PAGE_KEY``) as a bearer token and only the request's method, path, body and
``Content-Type``. It keeps nothing: the application, its state and any secret live upstream.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

if __package__:  # imported from the tasks package (tests)
    from tasks.webapps.httpstate import JsonHandler, serve_until_stopped
else:  # run as a program: httpstate.py is beside it, and its folder is on sys.path
    from httpstate import JsonHandler, serve_until_stopped

TIMEOUT_S = 60.0
KEY_ENV = "FORGE_PAGE_KEY"


def make_handler(upstream: str, key: str) -> type[BaseHTTPRequestHandler]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    class Handler(JsonHandler):
        def _relay(self, body: bytes | None) -> None:
            if not self.path.startswith("/"):
                return self.send(400, b"bad path\n", "text/plain")
            headers = {"Authorization": f"Bearer {key}"}
            if body is not None:
                headers["Content-Type"] = self.headers.get("Content-Type") or "application/json"
            req = urllib.request.Request(upstream + self.path, body, headers, method=self.command)
            try:
                with opener.open(req, timeout=TIMEOUT_S) as resp:
                    code, data, ctype = resp.status, resp.read(), resp.headers.get_content_type()
            except urllib.error.HTTPError as e:
                code, data, ctype = e.code, e.read(), e.headers.get_content_type()
            except OSError as e:
                return self.send(502, f"relay: {e}\n".encode(), "text/plain")
            if ctype.startswith("text/"):
                ctype += "; charset=utf-8"
            self.send(code, data, ctype)

        def do_GET(self) -> None:
            self._relay(None)

        def do_POST(self) -> None:
            try:
                body = self.read_body()
            except ValueError as e:
                return self.send(400, f"{e}\n".encode(), "text/plain")
            self._relay(body)

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--to", required=True, help="the upstream URL (no trailing /)")
    args = parser.parse_args(argv)
    key = os.environ.get(KEY_ENV, "")
    server = ThreadingHTTPServer((args.host, args.port), make_handler(args.to.rstrip("/"), key))
    return serve_until_stopped(server, f"relay on http://{args.host}:{args.port}/ -> {args.to}")


if __name__ == "__main__":
    sys.exit(main())
