"""serve.coalesce on a real uvicorn server: what a response writes in one turn of the loop
reaches the socket in one write, and nothing held is lost when the connection closes."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from serve.coalesce import CoalescingHTTP

WRITES: list[bytes] = []  # what the socket's transport was given, in order


class _Recorder:
    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def write(self, data: bytes) -> None:
        WRITES.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class Recorded(CoalescingHTTP):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_Recorder(transport))  # type: ignore[arg-type]


async def answer(request: Any) -> JSONResponse:
    return JSONResponse({"answer": "x" * 100})


APP = Starlette(routes=[Route("/a", answer)])


def test_a_json_answer_is_one_write(kit):
    WRITES.clear()
    with kit.uvicorn_server(APP, http=Recorded) as url, httpx.Client() as client:
        for _ in range(3):  # keep-alive: each answer on the same connection
            r = client.get(url + "/a")
            assert r.json() == {"answer": "x" * 100}
    assert len(WRITES) == 3
    assert all(w.startswith(b"HTTP/1.1 200 OK") and w.endswith(b"x" * 100 + b'"}') for w in WRITES)


def test_held_bytes_go_out_before_the_connection_closes(kit):
    WRITES.clear()
    with kit.uvicorn_server(APP, http=Recorded) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            got = b""
            while chunk := sock.recv(65536):  # the server closes after the answer
                got += chunk
    assert got.startswith(b"HTTP/1.1 200 OK") and got.endswith(b"x" * 100 + b'"}')
    assert len(WRITES) == 1
