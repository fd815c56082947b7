"""uvicorn's HTTP protocol, with what a response writes in one turn of the event loop sent in one
write: ``uvicorn.Config(app, http=CoalescingHTTP)``.

uvicorn writes a response's head on ``http.response.start`` and each body message on its own,
so a JSON answer costs two writes to the socket and a stream's head its own one; every write is
a system call and a wake-up of the client, the larger part of what a small proxied call costs
its server. Here the bytes written during one turn of the loop are held and written together at
the start of the next (a delay of microseconds, never a wait for more): a JSON answer is one
write, a stream's head goes out with its first events. Closing the connection writes what is
held first.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol


class _TurnWriter:
    """A transport that writes what it is given during one turn of ``loop`` at once."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(data)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not self._held:
            return
        data = b"".join(self._held)
        self._held.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:  # everything else is the socket's transport's
        return getattr(self._transport, name)


class CoalescingHTTP(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
    """uvicorn's HTTP/1.1 protocol (httptools where installed) over a :class:`_TurnWriter`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        writer = _TurnWriter(transport, asyncio.get_running_loop())
        super().connection_made(writer)  # type: ignore[arg-type]
