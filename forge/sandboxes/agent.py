"""The sandbox agent: a small HTTP server inside a container that runs commands and moves files.

Standard library only; it runs from a minimal tree (:func:`agent_client.agent_tree`)::

    PYTHONPATH=/opt/forge/agent python3 -m forge.sandboxes.agent --unix /run/forge/agent.sock \
        --token-file F [--workspace /workspace] [--home /home/agent] [--proxy 127.0.0.1:P=SOCK] \
        [--user UID:GID]

Every request needs ``Authorization: Bearer <token>``. ``GET /health``; ``POST /exec`` (JSON
``cmd``, ``timeout_s``, ``env`` (exactly the command's), ``cwd``, ``output_cap``; its process
group is killed on timeout and when it exits); ``PUT``/``GET /file?path=P[&mode=420]``;
``GET /archive?path=P&max_bytes=N``, ``PUT /archive?path=P`` (:mod:`archive`); ``POST /kill``
(every session the agent started and all its descendants). Relative paths are taken from the
workspace; paths (symlinks followed) must stay in the workspace or home. The agent is a child
subreaper (or PID 1) and reaps the orphans it inherits.

With ``--user UID:GID`` (the container backends pass the images' unprivileged harness user) a
root agent keeps itself out of its commands' reach: every exec drops to that user (no
supplementary groups) unless its request names another ``user`` (``root``, a name or
``UID[:GID]``: a verifier's own user); files it writes are created as that user (the thread's
filesystem uid), the workspace and home are handed to it at start, the socket's folder must be
another user's and closed to others (mode 0700), and the agent is not dumpable, so the user can
read neither its memory nor its ``/proc/PID/environ`` (where a token passed in the environment
would otherwise stay).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hmac
import json
import logging
import os
import signal
import socket
import socketserver
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from forge.sandboxes import archive, bridge
from forge.sandboxes.agent_user import User, filesystem_user, keep_out_of_reach, parse_user
from forge.sandboxes.base import ArchiveTooLarge, ExecResult, read_regular, resolve_in
from forge.sandboxes.process import DEFAULT_OUTPUT_CAP, Sessions, become_subreaper

log = logging.getLogger("forge.agent")

MAX_JSON_BODY = 8 << 20  # exec requests (argv and env)
MAX_DATA_BODY = 256 << 20  # a file or an archive
MAX_OUTPUT_CAP = 64 << 20
MAX_TIMEOUT_S = 7 * 86400.0
IDLE_TIMEOUT_S = 300.0  # a kept-alive connection with no request for this long is closed


class HTTPError(Exception):
    def __init__(self, status: int, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.status, self.kind = status, kind or "error"


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str) or "\0" in value:
        raise ValueError(f"field {field!r} must be a string without NUL bytes")
    return value


class Agent:
    """What the endpoints do, apart from HTTP. ``user``: who execs run as and files are
    written as by default (None: this process's own user)."""

    def __init__(self, workspace: str, home: str, user: User | None = None) -> None:
        self.workspace, self.home = Path(workspace), Path(home)
        self.roots = {str(self.workspace): self.workspace, str(self.home): self.home}
        self.procs = Sessions()
        self.user = user if user is not None and os.geteuid() == 0 else None

    def exec_user(self, value: Any) -> User | None:
        """Who an exec runs as: the default user, or the request's ``user`` (None: no switch,
        this process's own user)."""
        if value is None:
            return self.user
        wanted = parse_user(_text(value, "user"))
        if wanted == (os.geteuid(), os.getegid()):
            return None
        if os.geteuid() != 0:
            raise ValueError(f"field 'user': this agent is not root and cannot run as {value!r}")
        return wanted

    def resolve(self, path: str) -> Path:
        """The real path of ``path`` (relative: from the workspace), symlinks followed as the
        sandbox sees them; ValueError when it leaves the workspace and home."""
        return resolve_in(self.roots, str(self.workspace), path)

    def health(self) -> dict[str, Any]:
        return {"ok": True, "pid": os.getpid(), "workspace": str(self.workspace)}

    def exec(self, req: Any) -> dict[str, Any]:
        if not isinstance(req, dict):
            raise ValueError("the body must be a JSON object")
        unknown = set(req) - {"cmd", "timeout_s", "env", "cwd", "output_cap", "user"}
        if unknown:
            raise ValueError(f"unknown field(s): {sorted(unknown)}")
        cmd = req.get("cmd")
        if not isinstance(cmd, list) or not cmd:
            raise ValueError("field 'cmd' must be a non-empty list of strings")
        cmd = [_text(c, "cmd") for c in cmd]
        timeout = req.get("timeout_s")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise ValueError("field 'timeout_s' must be a number")
        if not 0 <= timeout <= MAX_TIMEOUT_S:
            raise ValueError(f"field 'timeout_s' must be within [0, {MAX_TIMEOUT_S:.0f}]")
        env = req.get("env", {})
        if not isinstance(env, dict):
            raise ValueError("field 'env' must be an object of strings")
        env = {_text(k, "env"): _text(v, "env") for k, v in env.items()}
        if any("=" in k or not k for k in env):
            raise ValueError("field 'env' has a name that is empty or contains '='")
        cwd = self.workspace
        if req.get("cwd") is not None:
            cwd = self.resolve(_text(req["cwd"], "cwd"))
            if not cwd.is_dir():
                raise ValueError(f"field 'cwd': {req['cwd']!r} is not a directory")
        cap = req.get("output_cap", DEFAULT_OUTPUT_CAP)
        if isinstance(cap, bool) or not isinstance(cap, int) or not 0 < cap <= MAX_OUTPUT_CAP:
            raise ValueError(f"field 'output_cap' must be an integer in [1, {MAX_OUTPUT_CAP}]")
        user = self.exec_user(req.get("user"))
        try:
            res = self.procs.run(cmd, env, str(cwd), float(timeout), cap, user)
        except OSError as e:  # not found, not executable: as a shell would report it
            code = 127 if isinstance(e, FileNotFoundError) else 126
            res = ExecResult(code, "", f"forge-agent: cannot run {cmd[0]!r}: {e.strerror}\n")
        return dataclasses.asdict(res)

    def put_file(self, path: str, data: bytes, mode: int) -> None:
        host = self.resolve(path)
        if host in self.roots.values():
            raise ValueError(f"path {path!r} is a directory")
        with filesystem_user(self.user):
            host.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(host, flags, mode & 0o777)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                os.fchmod(fd, mode)

    def get_file(self, path: str) -> bytes | None:
        return read_regular(self.resolve(path), path)

    def get_archive(self, path: str, max_bytes: int) -> bytes:
        host = self.resolve(path)
        if not host.is_dir() or host.is_symlink():
            raise NotADirectoryError(f"path {path!r} is not a directory in the sandbox")
        return archive.pack_dir(host, max_bytes=max_bytes)

    def put_archive(self, path: str, data: bytes) -> None:
        with filesystem_user(self.user):
            archive.unpack_into(self.resolve(path), data)


def _int(query: dict[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = query.get(name, str(default))
    if not raw.isdigit() or not lo <= int(raw) <= hi:
        raise ValueError(f"query parameter {name!r} must be an integer in [{lo}, {hi}]")
    return int(raw)


def _path(query: dict[str, str]) -> str:
    path = query.get("path")
    if not path or "\0" in path:
        raise ValueError("query parameter 'path' is required (a non-empty path)")
    return path


_JSON, _BYTES = "application/json", "application/octet-stream"
Route = Callable[[Agent, dict[str, str], bytes], tuple[str, Any]]


def _exec(a: Agent, q: dict[str, str], b: bytes) -> tuple[str, Any]:
    return _JSON, a.exec(json.loads(b or b"0"))


def _put_file(a: Agent, q: dict[str, str], b: bytes) -> tuple[str, Any]:
    a.put_file(_path(q), b, _int(q, "mode", 0o644, 0, 0o7777))
    return _JSON, {}


def _get_archive(a: Agent, q: dict[str, str], b: bytes) -> tuple[str, Any]:
    max_bytes = _int(q, "max_bytes", archive.DEFAULT_MAX_BYTES, 0, 1 << 40)
    return _BYTES, a.get_archive(_path(q), max_bytes)


def _put_archive(a: Agent, q: dict[str, str], b: bytes) -> tuple[str, Any]:
    a.put_archive(_path(q), b)
    return _JSON, {}


ROUTES: dict[tuple[str, str], tuple[int, Route]] = {  # (method, path) -> (body limit, handler)
    ("GET", "/health"): (0, lambda a, q, b: (_JSON, a.health())),
    ("POST", "/exec"): (MAX_JSON_BODY, _exec),
    ("POST", "/kill"): (MAX_JSON_BODY, lambda a, q, b: (_JSON, {"killed": a.procs.kill_all()})),
    ("GET", "/file"): (0, lambda a, q, b: (_BYTES, a.get_file(_path(q)))),
    ("PUT", "/file"): (MAX_DATA_BODY, _put_file),
    ("GET", "/archive"): (0, _get_archive),
    ("PUT", "/archive"): (MAX_DATA_BODY, _put_archive),
}


_ERRORS: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], int, str], ...] = (
    (ArchiveTooLarge, 413, "ArchiveTooLarge"),
    (NotADirectoryError, 409, "NotADirectoryError"),
    ((ValueError, UnicodeError, tarfile.TarError), 400, "ValueError"),  # bad JSON, bad tar
    (OSError, 409, "OSError"),  # a file operation the sandbox's files refused (as local's)
)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_S
    server: AgentHTTPServer

    def setup(self) -> None:
        super().setup()
        if self.connection.family in (socket.AF_INET, socket.AF_INET6):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _length(self) -> int:
        raw = self.headers.get("Content-Length") or "0"
        if "Transfer-Encoding" in self.headers or not raw.isdigit():
            raise HTTPError(411, "send a Content-Length (and no Transfer-Encoding)")
        return int(raw)

    def _body(self, limit: int) -> bytes:
        length = self._length()
        if length > limit:
            raise HTTPError(413, f"request body of {length} bytes exceeds {limit}", "TooLarge")
        return self.rfile.read(length) if length else b""

    def _discard(self) -> bool:
        with contextlib.suppress(HTTPError):
            length = self._length()
            return length <= MAX_JSON_BODY and len(self.rfile.read(length)) == length
        return False

    def _dispatch(self) -> None:
        t0 = time.monotonic()
        url = urlsplit(self.path)
        route = ROUTES.get((self.command, url.path))
        ctype, payload, status = _JSON, None, 200
        body_read = False
        try:
            got = self.headers.get("Authorization", "").encode("latin-1", "replace")
            if not hmac.compare_digest(got, b"Bearer " + self.server.token):
                raise HTTPError(401, "missing or wrong bearer token", "Unauthorized")
            if route is None:
                raise HTTPError(404, f"no endpoint {self.command} {url.path}", "NoEndpoint")
            limit, fn = route
            body = self._body(limit)
            body_read = True
            query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            ctype, payload = fn(self.server.agent, query, body)
            if payload is None and ctype == _BYTES:
                raise HTTPError(404, "no such regular file", "NotFound")
        except HTTPError as e:
            status, payload, ctype = e.status, {"error": str(e), "kind": e.kind}, _JSON
            if not body_read:  # drain a small unread body to keep the connection, or close it
                self.close_connection = self.close_connection or not self._discard()
        except Exception as e:
            status, kind = next(((s, k) for t, s, k in _ERRORS if isinstance(e, t)), (500, ""))
            if status == 500:
                log.exception("%s %s failed", self.command, url.path)
            msg = str(e) if kind else f"{type(e).__name__}: {e}"
            status, payload, ctype = status, {"error": msg, "kind": kind or "Internal"}, _JSON
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        head = [f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}"]
        head += [f"Content-Type: {ctype}", f"Content-Length: {len(data)}"]
        if self.close_connection:
            head.append("Connection: close")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)  # one send: no Nagle
        ms = (time.monotonic() - t0) * 1000
        log.info("%s %s -> %d (%d bytes, %.1f ms)", self.command, url.path, status, len(data), ms)

    do_GET = do_PUT = do_POST = _dispatch

    def log_message(self, format: str, *args: Any) -> None:  # request lines: see _dispatch
        pass

    def log_error(self, format: str, *args: Any) -> None:
        log.warning(format, *args)


class AgentHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256
    agent: Agent
    token: bytes

    def server_bind(self) -> None:  # no getfqdn(): no DNS lookups in a networkless container
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "localhost", 0


class UnixAgentHTTPServer(AgentHTTPServer):
    address_family = socket.AF_UNIX


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="forge-agent", description=__doc__.split("\n\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--unix", help="listen on this Unix socket path")
    where.add_argument("--listen", help="listen on HOST:PORT (port 0: any free port)")
    p.add_argument("--token-file", help="file holding the token (default: $FORGE_AGENT_TOKEN)")
    p.add_argument("--workspace", default="/workspace")
    p.add_argument("--home", default="/home/agent")
    p.add_argument("--proxy", action="append", default=[], metavar="HOST:PORT=SOCKET")
    p.add_argument("--socket-mode", default="600", help="octal mode of the Unix socket")
    p.add_argument("--user", help="UID:GID that execs run as and files are written as")
    p.add_argument("--verbose", action="store_true", help="log every request")
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="forge-agent %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    token = os.environ.get("FORGE_AGENT_TOKEN", "")
    token = (Path(args.token_file).read_text() if args.token_file else token).strip()
    os.environ.pop("FORGE_AGENT_TOKEN", None)
    if not token:
        p.error("no token: pass --token-file or set FORGE_AGENT_TOKEN")
    for d in (args.workspace, args.home):
        os.makedirs(d, exist_ok=True)
    user = parse_user(args.user) if args.user else None
    agent = Agent(os.path.realpath(args.workspace), os.path.realpath(args.home), user)
    if agent.user is not None:
        try:
            keep_out_of_reach(agent.user, agent.home, [agent.workspace, agent.home],
                              [args.unix, args.token_file])  # fmt: skip
        except (OSError, ValueError) as e:
            p.error(str(e))
    relays = []
    for spec in args.proxy:
        listen, sep, sock = spec.partition("=")
        if not sep or not sock:
            p.error(f"--proxy {spec!r}: expected HOST:PORT=SOCKET")
        host, port = bridge.split_host_port(listen)
        relays.append(bridge.Relay(bridge.listen_tcp(host, port), bridge.connect_unix(sock)))
    server: AgentHTTPServer
    if args.unix:
        os.makedirs(os.path.dirname(args.unix) or ".", exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(args.unix)
        server = UnixAgentHTTPServer(args.unix, _Handler)
        os.chmod(args.unix, int(args.socket_mode, 8))
        address = f"unix:{args.unix}"
    else:
        host, port = bridge.split_host_port(args.listen)
        server = AgentHTTPServer((host, port), _Handler)
        address = f"http://{host}:{server.server_address[1]}"
    server.agent, server.token = agent, token.encode()
    stop = threading.Event()

    def on_stop(signum: int, _frame: object) -> None:
        if not stop.is_set():
            stop.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_stop)
    signal.set_wakeup_fd(agent.procs.wake.fd, warn_on_full_buffer=False)  # wakes the reaper
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the fd is written
    subreaper = become_subreaper()
    threading.Thread(target=agent.procs.reaper, args=(stop,), daemon=True).start()
    print(json.dumps({"listening": address, "pid": os.getpid(), "subreaper": subreaper}))
    sys.stdout.flush()
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        stop.set()
        server.server_close()
        agent.procs.kill_all()
        for relay in relays:
            relay.close()
        if args.unix:
            with contextlib.suppress(OSError):
                os.unlink(args.unix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
