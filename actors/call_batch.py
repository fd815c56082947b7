"""The pod's unary Policy calls, several per Serve call.

A Serve call costs the pod more CPU than anything else on a proxied call's path (the gRPC call
and Serve's router: more than half of it, ``scripts/bench/proxy_load.py``). The calls a pod's
sessions make in one turn of its event loop go to the Policy as one ``generate_many`` call (at
most ``MAX_BATCH``), at no wait: the batch leaves on the next turn. One call alone goes as
``generate``. Each caller gets its own answer or its own error.
"""

from __future__ import annotations

import asyncio
from typing import Any

from forge.types import ChatRequest, Completion

MAX_BATCH = 16  # a replica's queue length (what Serve routes by) counts a batch as one call


class GenerateBatcher:
    """``generate(chat)`` through ``one`` (the Policy's ``generate``) or, for calls made in the
    same turn of the loop, ``many`` (its ``generate_many``): handle methods with ``remote``."""

    def __init__(self, one: Any, many: Any) -> None:
        self.one = one
        self.many = many
        self._pending: list[tuple[ChatRequest, asyncio.Future[Completion]]] = []
        self._sending: set[asyncio.Task[None]] = set()
        self.calls = 0  # Serve calls made
        self.requests = 0  # requests they carried

    async def generate(self, chat: ChatRequest) -> Completion:
        loop = asyncio.get_running_loop()
        if not self._pending:
            loop.call_soon(self._flush)
        future: asyncio.Future[Completion] = loop.create_future()
        self._pending.append((chat, future))
        if len(self._pending) >= MAX_BATCH:
            self._flush()
        return await future

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        if batch:
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[ChatRequest, asyncio.Future[Completion]]]) -> None:
        self.calls += 1
        self.requests += len(batch)
        try:
            if len(batch) == 1:
                results: list[Any] = [await self.one.remote(batch[0][0])]
            else:
                results = await self.many.remote([chat for chat, _ in batch])
        except BaseException as e:  # the call itself failed: each caller gets its error
            results = [e] * len(batch)
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():  # its caller was cancelled
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)
