"""The agent client bounds every reply: a peer on the agent's socket (a broken agent, or a
harness that replaced it) that answers with a huge or endless reply is an infrastructure error
raised at once, never a hang or a memory blow-up."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge.sandboxes.agent_client import (
    AgentClient,
    AgentReplyTooLarge,
    AgentUnavailable,
    reply_limit,
)
from forge.sandboxes.base import MAX_FILE_BYTES


class _Liar:
    """A Unix-socket server that reads a request and answers with ``reply`` (a callable that
    writes to the connection), counting the bytes it managed to send."""

    def __init__(self, path: Path, reply) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(8)
        self.reply, self.sent = reply, 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                try:
                    self.reply(self, conn)
                except OSError:
                    pass

    def send(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        self.sent += len(data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def liar(tmp_path: Path) -> Iterator:
    made: list[_Liar] = []

    def make(reply) -> tuple[_Liar, AgentClient]:
        server = _Liar(tmp_path / f"a{len(made)}.sock", reply)
        made.append(server)
        return server, AgentClient(f"unix:{tmp_path / f'a{len(made) - 1}.sock'}", "t", timeout_s=30)

    yield make
    for server in made:
        server.close()


def _huge_length(server: _Liar, conn: socket.socket) -> None:
    server.send(conn, b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n")
    chunk = b"x" * 65536
    for _ in range(64):  # 4 MiB offered; the client must not wait for the rest
        server.send(conn, chunk)


def _endless_chunked(server: _Liar, conn: socket.socket) -> None:
    server.send(conn, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"10000\r\n" + b"y" * 0x10000 + b"\r\n"
    while True:
        server.send(conn, chunk)


def _endless_close_delimited(server: _Liar, conn: socket.socket) -> None:
    server.send(conn, b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
    while True:
        server.send(conn, b"z" * 65536)


def _endless_header(server: _Liar, conn: socket.socket) -> None:
    server.send(conn, b"HTTP/1.1 200 OK\r\nX-A: ")
    while True:
        server.send(conn, b"h" * 65536)


def _many_headers(server: _Liar, conn: socket.socket) -> None:
    server.send(conn, b"HTTP/1.1 200 OK\r\n")
    i = 0
    while True:
        server.send(conn, f"X-{i}: v\r\n".encode())
        i += 1


@pytest.mark.parametrize(
    "reply", [_huge_length, _endless_chunked, _endless_close_delimited], ids=lambda f: f.__name__
)
def test_an_oversized_body_is_refused_without_reading_it(liar, reply) -> None:
    _server, client = liar(reply)
    with pytest.raises(AgentReplyTooLarge, match="limit"):
        client.health(timeout_s=30)
    # the body's limit for /health is small: the client stopped long before the endless
    # reply could fill its memory (it read at most the limit plus what the kernel buffered)
    assert reply_limit("GET", "/health") == 1 << 20
    with pytest.raises(AgentReplyTooLarge):
        client.exec(["true"], 5)
    with pytest.raises(AgentUnavailable):  # an infrastructure failure, as every transport one
        client.get_file("f")


@pytest.mark.parametrize("reply", [_endless_header, _many_headers], ids=lambda f: f.__name__)
def test_endless_headers_are_refused(liar, reply) -> None:
    server, client = liar(reply)
    with pytest.raises(AgentUnavailable):
        client.health(timeout_s=30)
    assert server.sent < 16 << 20


def test_limits_follow_what_the_request_can_bring_back() -> None:
    assert reply_limit("POST", "/exec", 1000) < reply_limit("POST", "/exec", 2000)
    assert reply_limit("POST", "/exec", 1 << 20) >= 12 << 20  # two tails, escaped
    assert reply_limit("GET", "/file?path=a") > MAX_FILE_BYTES
    small, big = (reply_limit("GET", f"/archive?path=a&max_bytes={n}") for n in (10, 10**9))
    assert big - small == 10**9 - 10
    assert reply_limit("PUT", "/file?path=a") == 1 << 20


def test_a_big_file_is_a_value_error_not_an_infrastructure_one(tmp_path: Path) -> None:
    from forge.sandboxes.base import read_regular

    f = tmp_path / "f"
    f.write_bytes(b"0123456789")
    assert read_regular(f, "f", max_bytes=10) == b"0123456789"
    with pytest.raises(ValueError, match="over the 9 limit"):
        read_regular(f, "f", max_bytes=9)
    with f.open("r+b") as h:  # sparse: the check is from stat, nothing is read
        h.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(ValueError, match="limit"):
        read_regular(f, "f")
