"""The HTTP response of a streamed answer: server-sent events, written as the renderer makes them.

Written for the cost of a proxied call, which a pod pays thousands of times a minute: each
``bytes`` a protocol renderer yields (everything that came together, see
:meth:`serve.live.LiveCompletion.next_batch`) is one write, the last one
(:class:`~serve.protocol.sse.LastChunk`) ends the response in the same write, and the client
leaving is noticed before each write (Starlette's ``StreamingResponse`` spends a task group,
a write per event and an empty last write).

The answer counts as delivered (``LiveCompletion.delivered``) only when its last bytes were
written while the client was still there: one that leaves mid-stream stops the writing, and
its turn is recorded as never delivered.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from serve.live import LiveCompletion
from serve.protocol.sse import LastChunk

log = logging.getLogger(__name__)

# the same for every stream, made once (what StreamingResponse would make of them)
_HEADERS = [
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
    (b"content-type", b"text/event-stream; charset=utf-8"),
]


def client_gone(receive: Receive) -> bool:
    """Whether the server has a disconnect ready for this request, without waiting: ``receive``
    is taken one step and dropped if it would wait (Starlette's ``Request.is_disconnected``
    does the same with a cancel scope, at several times the cost). Call it once the request's
    body has been read."""
    step = receive()
    try:
        step.send(None)
    except StopIteration as done:
        return bool(done.value and done.value.get("type") == "http.disconnect")
    step.close()
    return False


class EventStream(Response):
    """``chunks`` (a renderer's output for ``live``) as a ``text/event-stream`` response."""

    def __init__(
        self, chunks: AsyncGenerator[bytes, None], live: LiveCompletion, path: str
    ) -> None:
        self.chunks = chunks
        self.live = live
        self.path = path
        self.status_code = 200
        self.background = None
        self.raw_headers = _HEADERS

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body: dict[str, Any] = {"type": "http.response.body", "body": b"", "more_body": True}
        gone = False
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
            async for chunk in self.chunks:
                gone = client_gone(receive)
                if gone:  # the rest is never delivered
                    return
                last = isinstance(chunk, LastChunk)
                await send({**body, "body": chunk, "more_body": not last})
                if last:
                    self.live.delivered = True
                    return
        except Exception:  # failed after the stream began: log it and end the stream
            log.exception("stream of %s failed", self.path)
        finally:
            await self.chunks.aclose()
        if not gone:  # a renderer that failed, or ended without a LastChunk
            await send({**body, "more_body": False})
