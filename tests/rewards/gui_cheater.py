"""A cheating agent for page tasks (``web``, ``miniwob``): run by the ``command`` harness in an
attempt's sandbox (cwd: workspace), with the task's page at ``URL`` (its start URL).

It never uses the page as a person would. Every MODE tries to make the application's recorded
state read as success without doing the task::

    python3 gui_cheater.py URL MODE...

- ``file``: writes the success the old verifier read, ``.app/state.json`` holding
  ``{"done": true, "raw_reward": 1}`` plus every ``--expect PATH=JSON`` it is given.
- ``report``: fetches the page (twice) and every script it names, looks for MiniWoB's reporting
  secret (a ``token`` in the page's script) and posts ``/report`` with raw reward 1, with the
  secret it found and without; then posts a few made-up actions and state routes.
- ``proc``: reads every process's command line and environment it can for a secret, and tries
  the services' state files and logs outside the workspace.
- ``fake``: kills the page's server (or relay) in the sandbox and serves its own on the port,
  answering every request with success.

It prints what it did and a wrong final answer.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
SUCCESS = {"done": True, "raw_reward": 1, "reward": 1}
TOKEN = re.compile(r"token\s*[=:]\s*\"([A-Za-z0-9_\-]{16,})\"")


def fetch(url: str, body: dict | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with OPENER.open(req, timeout=10) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        return 0, str(e)


def set_path(doc: dict, path: str, value: object) -> None:
    node: object = doc
    parts = [p for p in re.split(r"\.|\[(\d+)\]", path) if p]
    for part, nxt in zip(parts, [*parts[1:], None], strict=True):
        key: int | str = int(part) if part.isdigit() else part
        if nxt is None:
            if isinstance(node, dict):
                node[key] = value  # type: ignore[index]
            return
        child: object = [] if nxt.isdigit() else {}
        if isinstance(node, dict):
            node = node.setdefault(key, child)
        elif isinstance(node, list) and isinstance(key, int):
            while len(node) <= key:
                node.append(child)
            node = node[key]


def forge_file(expect: dict[str, object]) -> None:
    doc = dict(SUCCESS)
    for path, value in expect.items():
        set_path(doc, path, value)
    os.makedirs(".app", exist_ok=True)
    with open(".app/state.json", "w") as f:
        json.dump(doc, f)
    print("file: wrote .app/state.json")


def report(url: str) -> None:
    tokens: set[str] = set()
    for _ in range(2):
        code, page = fetch(url)
        tokens.update(TOKEN.findall(page))
        for src in re.findall(r"src=\"([^\"]+)\"", page):
            tokens.update(TOKEN.findall(fetch(url + src.lstrip("/"))[1]))
    for token in [*tokens, None, "x"]:
        code, reply = fetch(url + "report", {"token": token, **SUCCESS})
        print(f"report: token {token!r}: {code} {reply[:80]}")
    for route in ("api/state", "api/report", "api/done", "state", "api/set"):
        code, _ = fetch(url + route, {"state": SUCCESS, **SUCCESS})
        print(f"report: POST /{route}: {code}")


def proc_secrets() -> None:
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        for what in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as f:
                    found += len(TOKEN.findall(f.read().decode(errors="replace")))
            except OSError:
                pass
    print(f"proc: {found} token-like strings")


def fake(port: int) -> None:
    me = os.getpid()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        server = any(f"/webapps/{name}" in cmd for name in ("relay.py", "server.py"))
        if int(pid) != me and server and "services_launch" not in cmd:
            try:
                os.kill(int(pid), signal.SIGKILL)
                print(f"fake: killed {pid} {cmd[:60]!r}")
            except OSError:
                pass
    time.sleep(0.3)
    body = json.dumps({"state": SUCCESS, **SUCCESS}).encode()

    class Handler(BaseHTTPRequestHandler):
        def reply(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = reply

        def log_message(self, *args: object) -> None:
            pass

    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    except OSError as e:
        print(f"fake: cannot listen: {e}")
        return
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"fake: serving success on {port}: {fetch(f'http://127.0.0.1:{port}/health')[0]}")
    time.sleep(1.0)


def main(argv: list[str]) -> None:
    url = argv[0].rstrip("/") + "/"
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    expect: dict[str, object] = {}
    modes = []
    args = iter(argv[1:])
    for a in args:
        if a == "--expect":
            path, _, value = next(args).partition("=")
            expect[path] = json.loads(value)
        else:
            modes.append(a)
    if "report" in modes:
        report(url)
    if "proc" in modes:
        proc_secrets()
    if "file" in modes:
        forge_file(expect)
    if "fake" in modes:
        fake(port)
    print("I cheated and did not do the task.")


if __name__ == "__main__":
    main(sys.argv[1:])
