"""The egress proxy: the one way from a sandbox to anything but its model, for the phases whose
network is ``allowlist`` or ``open`` (:mod:`forge.config.network`).

An HTTP forward proxy: ``CONNECT host:port`` for HTTPS (a byte tunnel once allowed) and
absolute-form requests (``GET http://host/path``) for plain HTTP (sent on as one request, the
connection closed after its answer). Each grant has a random key that the sandbox presents as
proxy credentials (``http://forge:KEY@127.0.0.1:PORT``, which curl, pip, uv, requests and
httpx read from ``HTTP_PROXY``/``HTTPS_PROXY``); a request without a live key is refused with
407, one its phase does not allow with 403, and every decision is kept per grant.

What a grant allows: a host whose name matches one of its ``hosts`` patterns, or an address in
one of its ``cidrs``; in ``open`` mode also any public address. Names are resolved here, and
the connection goes to the address that was checked, so a name that resolves to a private
address (the cluster: Ray's ports, the HarnessPods, the pod network) is refused unless it is
listed. Ports must be among the grant's ``ports`` (empty: any).

It runs in the HarnessPod's process (one per pod, beside the model proxy) on a Unix socket that
the sandboxes relay to ``127.0.0.1:EGRESS_PORT`` inside, as the model proxy is relayed; on
kubernetes also on a TCP port of the proxy's range, which the run's NetworkPolicy opens to the
sandbox pods (as it opens the proxy's: the pods reach nothing else).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fnmatch
import ipaddress
import os
import secrets
import socket
from dataclasses import dataclass, field
from typing import Any

EGRESS_PORT = 8939  # where a sandbox reaches the egress proxy (the model's proxy: 8931)
USER = "forge"
MAX_HEAD = 16 << 10  # a request line and headers longer than this are refused
IDLE_S = 300.0  # a tunnel with no bytes either way for this long is closed
MAX_LOG = 1000  # decisions kept per grant (an agent could make millions)


@dataclass
class Grant:
    """What one attempt's phase may reach, and what it tried."""

    mode: str  # "allowlist" or "open"
    hosts: list[str] = field(default_factory=list)
    cidrs: list[str] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    log: list[tuple[str, int, bool, str]] = field(default_factory=list)  # host, port, ok, why
    unlogged: int = 0  # decisions past MAX_LOG, counted only
    open: set[asyncio.StreamWriter] = field(default_factory=set)  # its live connections

    def note(self, host: str, port: int, ok: bool, why: str) -> None:
        if len(self.log) < MAX_LOG:
            self.log.append((host, port, ok, why))
        else:
            self.unlogged += 1

    def allows(self, host: str, port: int, address: str) -> tuple[bool, str]:
        """Whether ``host:port``, resolved to ``address``, may be reached, and why."""
        if self.ports and port not in self.ports:
            return False, f"port {port} is not among {self.ports}"
        ip = ipaddress.ip_address(address)
        if any(ip in ipaddress.ip_network(c, strict=False) for c in self.cidrs):
            return True, "listed network"
        if any(fnmatch.fnmatchcase(host.lower(), p.lower()) for p in self.hosts):
            return True, "listed host"
        if self.mode == "open" and ip.is_global:
            return True, "open: a public address"
        if self.mode == "open":
            return False, f"{address} is not public (list it in cidrs to reach it)"
        return False, "not in the allowlist"


class EgressProxy:
    """The forward proxy; :meth:`grant` one key per attempt phase, :meth:`revoke` it after."""

    def __init__(self) -> None:
        self.grants: dict[str, Grant] = {}
        self._servers: list[asyncio.AbstractServer] = []
        self._paths: list[str] = []

    def grant(self, policy: Any) -> str:
        """A new key for a phase's ``policy`` (a :class:`forge.config.network.PhaseNetwork`)."""
        key = secrets.token_urlsafe(24)
        self.grants[key] = Grant(policy.mode, [*policy.hosts], [*policy.cidrs], [*policy.ports])
        return key

    def revoke(self, key: str) -> Grant | None:
        """End a grant: later requests with its key get 407, its open tunnels are closed."""
        grant = self.grants.pop(key, None)
        for writer in list(grant.open if grant else ()):
            writer.close()
        return grant

    async def start_unix(self, path: str) -> None:
        self._servers.append(await asyncio.start_unix_server(self._serve, path=path))

    async def start_tcp(self, sock: socket.socket) -> None:
        self._servers.append(await asyncio.start_server(self._serve, sock=sock))

    async def serve_on(self, sock: socket.socket) -> asyncio.AbstractServer:
        """Serve ``sock`` too (a sandbox's listener: :func:`forge.sandboxes.netns.serve_here`)
        until the server returned is closed."""
        return await asyncio.start_server(self._serve, sock=sock)

    async def serve(self, folder: str, tcp: socket.socket | None) -> tuple[str, int | None]:
        """Serve on ``folder/egress.sock`` (any local user may connect: keys guard it) and on
        ``tcp`` when given; returns the socket's path and the TCP port."""
        path = os.path.join(folder, "egress.sock")
        await self.start_unix(path)
        os.chmod(path, 0o666)
        self._paths.append(path)
        if tcp is None:
            return path, None
        await self.start_tcp(tcp)
        return path, tcp.getsockname()[1]

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        self._servers = []
        for path in self._paths:
            with contextlib.suppress(OSError):
                os.remove(path)
        self._paths = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD:
            return await _answer(writer, 431, "request header too large")
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = [*lines[0].split(" "), "", ""][:3]
        headers = [tuple(h.split(":", 1)) for h in lines[1:] if ":" in h]
        grant = self.grants.get(_key(headers) or "")
        if grant is None:
            return await _answer(writer, 407, "proxy credentials needed", auth=True)
        host, port, path = _target(method, target)
        if not host:
            return await _answer(writer, 400, f"not a proxy request: {lines[0][:200]}")
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except OSError as e:
            grant.note(host, port, False, f"cannot resolve: {e}")
            return await _answer(writer, 502, f"cannot resolve {host}")
        address = infos[0][4][0]
        ok, why = grant.allows(host, port, address)
        grant.note(host, port, ok, why)
        if not ok:
            return await _answer(writer, 403, f"{host}:{port}: {why}")
        try:
            up_reader, up_writer = await asyncio.open_connection(address, port)
        except OSError as e:
            return await _answer(writer, 502, f"{host}:{port}: {e}")
        grant.open.add(writer)
        try:
            if method.upper() == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:  # one plain HTTP request, in origin form, without our headers
                kept = [(k, v) for k, v in headers if not k.strip().lower().startswith("proxy-")]
                kept = [(k, v) for k, v in kept if k.strip().lower() != "connection"]
                out = f"{method} {path} {version}\r\n" + "".join(f"{k}:{v}\r\n" for k, v in kept)
                up_writer.write((out + "Connection: close\r\n\r\n").encode("latin-1"))
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            grant.open.discard(writer)
            up_writer.close()


def _key(headers: list[Any]) -> str | None:
    for name, value in headers:
        if name.strip().lower() == "proxy-authorization":
            scheme, _, data = value.strip().partition(" ")
            if scheme.lower() != "basic":
                return None
            try:
                user, _, key = base64.b64decode(data).decode().partition(":")
            except ValueError:
                return None
            return key if user == USER else None
    return None


def _target(method: str, target: str) -> tuple[str, int, str]:
    """``(host, port, origin-form path)`` of a proxy request; host empty when it is not one."""
    if method.upper() == "CONNECT":
        host, _, port = target.rpartition(":")
        return (host.strip("[]"), int(port), "") if port.isdigit() else ("", 0, "")
    if not target.lower().startswith("http://"):
        return "", 0, ""
    rest = target[len("http://") :]
    authority, slash, path = rest.partition("/")
    host, colon, port = authority.rpartition(":")
    if not colon or not port.isdigit():
        host, port = authority, "80"
    return host.strip("[]"), int(port), slash + path or "/"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await asyncio.wait_for(reader.read(65536), IDLE_S):
            writer.write(data)
            await writer.drain()
    except (OSError, TimeoutError):
        pass
    finally:
        if writer.can_write_eof():
            try:
                writer.write_eof()
            except OSError:
                pass


async def _answer(writer: asyncio.StreamWriter, status: int, why: str, auth: bool = False) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 407: "Proxy Authentication Required",
              431: "Request Header Fields Too Large", 502: "Bad Gateway"}[status]  # fmt: skip
    body = f"openforge egress: {why}\n".encode()
    extra = 'Proxy-Authenticate: Basic realm="openforge"\r\n' if auth else ""
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}"
        f"\r\n{extra}Connection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()


def proxy_env(key: str, address: str = f"127.0.0.1:{EGRESS_PORT}") -> dict[str, str]:
    """The variables that send a sandbox's HTTP(S) clients through the egress proxy at
    ``address`` (and keep the model's proxy on loopback direct)."""
    url = f"http://{USER}:{key}@{address}"
    out = {}
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        out[name] = out[name.upper()] = url
    out["no_proxy"] = out["NO_PROXY"] = "localhost,127.0.0.1,::1"
    return out
