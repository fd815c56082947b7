"""A token service: a random token made at start, kept only in memory, handed out on /token and
checked on /check?token=... (so only the container the agent worked in can say it is right)."""

import secrets
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse

TOKEN = secrets.token_hex(16)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/health":
            body = "up"
        elif url.path == "/token":
            body = TOKEN
        elif url.path == "/check":
            given = parse_qs(url.query).get("token", [""])[0]
            body = "ok" if secrets.compare_digest(given, TOKEN) else "wrong"
        else:
            self.send_error(404)
            return
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


HTTPServer(("127.0.0.1", 8765), Handler).serve_forever()
