"""The HTTP response of a streamed answer: server-sent events, written as the renderer makes them.

Written for the cost of a proxied call, which a pod pays thousands of times a minute: each
``bytes`` a protocol renderer yields (everything that came together, see
:meth:`serve.live.LiveCompletion.batches`) is one write, the last one
(:class:`~serve.protocol.common.LastChunk`) ends the response in the same write, and the client
leaving is noticed by one task waiting on the ASGI ``receive`` (Starlette's
``StreamingResponse`` spends a task group, a write per event and an empty last write).

The answer counts as delivered (``LiveCompletion.delivered``) only when its last bytes were
written while the client was still there: one that leaves mid-stream stops the writing, and
its turn is recorded as never delivered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from serve.live import LiveCompletion
from serve.protocol.common import LastChunk

log = logging.getLogger(__name__)

HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def _left(receive: Receive) -> None:
    """Returns when the client has gone (or the response is complete)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class EventStream(Response):
    """``chunks`` (a renderer's output for ``live``) as a ``text/event-stream`` response."""

    media_type = "text/event-stream"

    def __init__(
        self, chunks: AsyncGenerator[bytes, None], live: LiveCompletion, path: str
    ) -> None:
        self.chunks = chunks
        self.live = live
        self.path = path
        self.status_code = 200
        self.background = None
        self.init_headers(HEADERS)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        left = asyncio.ensure_future(_left(receive))
        body: dict[str, Any] = {"type": "http.response.body", "body": b"", "more_body": True}
        ended = False
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for chunk in self.chunks:
                if left.done():  # the client has gone: the rest is never delivered
                    return
                ended = isinstance(chunk, LastChunk)
                await send({**body, "body": chunk, "more_body": not ended})
                if ended:
                    self.live.delivered = not left.done()
                    return
        except Exception:  # failed after the stream began: log it and end the stream
            log.exception("stream of %s failed", self.path)
        finally:
            gone = left.done()
            left.cancel()
            await self.chunks.aclose()
        if not gone:  # a renderer that failed, or ended without a LastChunk
            await send({**body, "more_body": False})
