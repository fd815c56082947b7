"""The host side of the sandbox agent (:mod:`forge.sandboxes.agent`): its client.

A backend puts the agent in its container and starts it (:mod:`forge.sandboxes.agent_boot`),
then talks to it with :class:`AgentClient` over a Unix socket (``unix:/path/agent.sock``, e.g.
bind-mounted out of a container without network) or TCP (``http://pod-ip:port``). Transport
failures, a wrong token and server errors raise :class:`AgentUnavailable` (an infrastructure
failure, not the harness's). Every reply is bounded: the status line and headers by
``http.client`` (64 KiB a line, 100 lines), the body by what the request can legitimately bring
back (:func:`reply_limit`); a longer one raises :class:`AgentReplyTooLarge` before it is read,
never a hang or a memory blow-up.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from forge.sandboxes.agent_boot import DEFAULT_PATH, HOME
from forge.sandboxes.base import MAX_FILE_BYTES, ArchiveTooLarge, ExecResult
from forge.sandboxes.process import DEFAULT_OUTPUT_CAP

EXEC_GRACE_S = 15.0  # beyond an exec's timeout_s: the kill grace and the transfer of its output
IDLE_RECONNECT_S = 60.0  # a connection idle this long is replaced (the agent drops them at 300 s)
MAX_BODY = 256 << 20  # the agent's limit on a file or an archive sent to it
MAX_SMALL_REPLY = 1 << 20  # health, kill, errors, put acknowledgements
ARCHIVE_ENTRY_OVERHEAD = 12 << 10  # tar header, pax records for a long name and link, padding


class AgentUnavailable(RuntimeError):
    """The agent could not be reached, or failed, or refused the token: infrastructure."""


class AgentAuthError(AgentUnavailable):
    """The agent refused the token (401)."""


class AgentReplyTooLarge(AgentUnavailable):
    """The agent's reply is longer than the request could bring back: infrastructure (an agent
    that misbehaves, or something else answering on its socket)."""


def reply_limit(method: str, path: str, output_cap: int | None = None) -> int:
    """The most bytes a well-behaved agent's reply body to ``method path`` can have: an exec's
    two output tails JSON-escaped (up to 6 bytes each, as ``\\ufffd``), a file's
    ``MAX_FILE_BYTES``, an archive's ``max_bytes`` plus per-entry tar overhead."""
    from forge.sandboxes.archive import DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES

    route, _, query = path.partition("?")
    if route == "/exec":
        return 2 * 6 * (output_cap or DEFAULT_OUTPUT_CAP) + MAX_SMALL_REPLY
    if route == "/file" and method == "GET":
        return MAX_FILE_BYTES + MAX_SMALL_REPLY
    if route == "/archive" and method == "GET":
        got = parse_qs(query).get("max_bytes", [str(DEFAULT_MAX_BYTES)])[-1]
        max_bytes = int(got) if got.isdigit() else DEFAULT_MAX_BYTES
        return max_bytes + DEFAULT_MAX_ENTRIES * ARCHIVE_ENTRY_OVERHEAD + MAX_SMALL_REPLY
    return MAX_SMALL_REPLY


def _read_bounded(resp: http.client.HTTPResponse, limit: int) -> bytes:
    """The body of ``resp``, refused (:class:`AgentReplyTooLarge`) past ``limit`` bytes: from
    its Content-Length before reading, else after reading at most ``limit + 1`` bytes."""
    if resp.length is not None:  # http.client parsed a Content-Length
        if resp.length > limit:
            raise AgentReplyTooLarge(f"reply of {resp.length} bytes exceeds the limit of {limit}")
        return resp.read()
    out = bytearray()  # chunked or delimited by close: in pieces (read(n) allocates n at once)
    while chunk := resp.read(min(1 << 20, limit + 1 - len(out))):
        out += chunk
        if len(out) > limit:
            raise AgentReplyTooLarge(f"reply longer than the limit of {limit} bytes")
    return bytes(out)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class _TCPConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class AgentClient:
    """Talks to one sandbox agent; thread-safe, one kept-alive connection per thread.

    ``base_env`` is the environment every exec starts from (PATH, HOME, TZ=UTC, LANG=C.UTF-8;
    a backend adds the spec's env to it); an exec's ``env`` is laid over it, and the command
    gets exactly the result. ``timeout_s`` bounds every request but an exec, whose bound is its
    own ``timeout_s`` plus ``exec_grace_s``.
    """

    def __init__(
        self,
        address: str,
        token: str,
        *,
        timeout_s: float = 120.0,
        exec_grace_s: float = EXEC_GRACE_S,
        base_env: dict[str, str] | None = None,
    ) -> None:
        if address.startswith("unix:"):
            self._unix: str | None = address[len("unix:") :]
            self._host, self._port = "localhost", 0
        elif address.startswith("http://"):
            url = urlsplit(address)
            if not url.hostname or not url.port:
                raise ValueError(f"agent address {address!r}: expected http://HOST:PORT")
            self._unix, self._host, self._port = None, url.hostname, url.port
        else:
            raise ValueError(f"agent address {address!r}: expected unix:PATH or http://HOST:PORT")
        self.address = address
        self.timeout_s = timeout_s
        self.exec_grace_s = exec_grace_s
        self.base_env = dict(
            base_env
            if base_env is not None
            else {"PATH": DEFAULT_PATH, "HOME": HOME, "TZ": "UTC", "LANG": "C.UTF-8"}
        )
        self._auth = f"Bearer {token}"
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: set[http.client.HTTPConnection] = set()

    def __repr__(self) -> str:  # never shows the token
        return f"AgentClient({self.address!r})"

    # -- transport ------------------------------------------------------------------------

    def _connection(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and time.monotonic() - self._local.used > IDLE_RECONNECT_S:
            self._drop(conn)
            conn = None
        reused = conn is not None
        if conn is None:
            if self._unix is not None:
                conn = _UnixConnection(self._unix, timeout)
            else:
                conn = _TCPConnection(self._host, self._port, timeout=timeout)
            self._local.conn = conn
            with self._lock:
                self._conns.add(conn)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, reused

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            self._conns.discard(conn)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        timeout_s: float | None = None,
        idempotent: bool = True,
        max_reply: int | None = None,
    ) -> tuple[int, bytes]:
        """(status, body) of one request; AgentUnavailable when it cannot be completed. A
        kept-alive connection found broken is retried once on a new one (idempotent only).
        A reply body over ``max_reply`` (default :func:`reply_limit`) raises
        :class:`AgentReplyTooLarge` without being read."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        limit = reply_limit(method, path) if max_reply is None else max_reply
        if body is not None and len(body) > MAX_BODY:
            raise ValueError(f"{len(body)} bytes is more than the agent accepts ({MAX_BODY})")
        headers = {"Authorization": self._auth}
        if body is not None:
            headers["Content-Type"] = "application/octet-stream"
        for attempt in (0, 1):
            conn, reused = self._connection(timeout)
            try:
                try:
                    conn.request(method, path, body=body, headers=headers)
                except ConnectionError:  # the agent may have answered (401, 413) and closed
                    if conn.sock is None:
                        raise
                    resp = conn.getresponse()
                else:
                    resp = conn.getresponse()
                data = _read_bounded(resp, limit)
            except AgentReplyTooLarge as e:
                self._drop(conn)
                raise AgentReplyTooLarge(
                    f"sandbox agent at {self.address}: {method} {path.split('?')[0]}: {e}"
                ) from None
            except (OSError, http.client.HTTPException) as e:
                self._drop(conn)
                stale = isinstance(e, (ConnectionError, http.client.RemoteDisconnected))
                if attempt == 0 and reused and stale and idempotent:
                    continue
                what = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                raise AgentUnavailable(
                    f"sandbox agent at {self.address}: {method} {path.split('?')[0]}: {what}"
                ) from e
            self._local.used = time.monotonic()
            if resp.will_close:
                self._drop(conn)
            return resp.status, data
        raise AssertionError("unreachable")

    def _call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        timeout_s: float | None = None,
        idempotent: bool = True,
        not_found: bool = False,
        max_reply: int | None = None,
    ) -> bytes | None:
        status, data = self.request(
            method, path, body, timeout_s=timeout_s, idempotent=idempotent, max_reply=max_reply
        )
        if status == 200:
            return data
        try:
            info = json.loads(data)
            msg, kind = str(info.get("error", "")), str(info.get("kind", ""))
        except (ValueError, AttributeError):
            msg, kind = data[:500].decode(errors="replace"), ""
        if status == 404 and not_found and kind == "NotFound":
            return None
        if status == 401:
            raise AgentAuthError(f"sandbox agent at {self.address} refused the token: {msg}")
        if kind == "ArchiveTooLarge":
            raise ArchiveTooLarge(msg)
        if kind == "NotADirectoryError":
            raise NotADirectoryError(msg)
        if kind == "OSError":
            raise OSError(msg)
        if status in (400, 413):
            raise ValueError(msg)
        raise AgentUnavailable(
            f"sandbox agent at {self.address}: {method} {path.split('?')[0]}: HTTP {status}: {msg}"
        )

    def close(self) -> None:
        """Close every connection (any thread's); later calls open new ones."""
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for conn in conns:
            conn.close()
        self._local = threading.local()

    # -- the agent's API ------------------------------------------------------------------

    def health(self, timeout_s: float | None = None) -> dict[str, Any]:
        data = self._call("GET", "/health", timeout_s=timeout_s)
        return json.loads(data or b"{}")

    def wait_ready(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Poll ``/health`` until the agent answers; AgentUnavailable with the last failure
        when it does not within ``timeout_s`` (a wrong token fails at once)."""
        end = time.monotonic() + timeout_s
        pause, last = 0.005, "no attempt"
        while True:
            try:
                return self.health(timeout_s=max(0.1, min(2.0, end - time.monotonic())))
            except AgentAuthError:
                raise
            except AgentUnavailable as e:
                last = str(e)
            left = end - time.monotonic()
            if left <= 0:
                raise AgentUnavailable(
                    f"sandbox agent at {self.address} not ready after {timeout_s:.1f}s: {last}"
                )
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.2)

    def exec(
        self,
        cmd: list[str],
        timeout_s: float,
        env: dict[str, str] | None = None,
        *,
        cwd: str | None = None,
        output_cap: int | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run ``cmd``; ``user`` (``root``, a name, ``UID[:GID]``): as that user instead of
        the agent's default one (the harness's)."""
        req: dict[str, Any] = {
            "cmd": list(cmd),
            "timeout_s": timeout_s,
            "env": {**self.base_env, **(env or {})},
        }
        if cwd is not None:
            req["cwd"] = cwd
        if output_cap is not None:
            req["output_cap"] = output_cap
        if user is not None:
            req["user"] = user
        data = self._call(
            "POST",
            "/exec",
            json.dumps(req).encode(),
            timeout_s=max(timeout_s, 0.0) + self.exec_grace_s,
            idempotent=False,
            max_reply=reply_limit("POST", "/exec", output_cap),
        )
        out = json.loads(data or b"{}")
        return ExecResult(
            exit_code=int(out["exit_code"]),
            stdout=out["stdout"],
            stderr=out["stderr"],
            timed_out=bool(out["timed_out"]),
            duration_s=float(out.get("duration_s", 0.0)),
        )

    def put_file(self, path: str, content: bytes | str, mode: int = 0o644) -> None:
        data = content.encode() if isinstance(content, str) else content
        self._call("PUT", f"/file?path={quote(path, safe='')}&mode={mode}", data)

    def get_file(self, path: str) -> bytes | None:
        """The file's bytes, or None when it does not exist or is not a regular file."""
        return self._call("GET", f"/file?path={quote(path, safe='')}", not_found=True)

    def get_archive(self, path: str, max_bytes: int = 64 << 20) -> bytes:
        q = f"path={quote(path, safe='')}&max_bytes={max_bytes}"
        return self._call("GET", f"/archive?{q}") or b""

    def put_archive(self, path: str, data: bytes) -> None:
        self._call("PUT", f"/archive?path={quote(path, safe='')}", data)

    def kill(self) -> int:
        """Kill every process the agent started (and their descendants); how many."""
        data = self._call("POST", "/kill", b"{}")
        return int(json.loads(data or b"{}").get("killed", 0))
