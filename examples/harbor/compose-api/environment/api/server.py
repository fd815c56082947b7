"""The api service: a word chosen at start, kept in memory, handed out on /word."""

import secrets
from http.server import BaseHTTPRequestHandler, HTTPServer

WORD = secrets.choice(["amber", "basalt", "cobalt", "dune", "ember"]) + secrets.token_hex(3)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path != "/word":
            self.send_error(404)
            return
        data = WORD.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


HTTPServer(("0.0.0.0", 5000), Handler).serve_forever()
