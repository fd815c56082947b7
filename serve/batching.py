"""A small asyncio micro-batcher: concurrent calls within a short window run as one batch.

(Serve's ``serve.batch`` needs a replica context; this one also runs in plain processes, so the
Policy behaves the same inside Serve, in unit tests and in benchmarks.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")


class MicroBatcher(Generic[In, Out]):
    """``run_batch`` returns one result per item, in order; an exception in an item's place
    fails that item's caller alone, and an exception raised by ``run_batch`` fails them all."""

    def __init__(
        self,
        run_batch: Callable[[list[In]], Awaitable[list[Out | BaseException]]],
        max_batch_size: int = 16,
        wait_s: float = 0.005,
    ) -> None:
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.wait_s = wait_s
        self._queue: asyncio.Queue[tuple[In, asyncio.Future[Out]]] | None = None
        self._worker: asyncio.Task[None] | None = None

    async def submit(self, item: In) -> Out:
        if self._queue is None or self._worker is None or self._worker.done():
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._loop(self._queue))
        fut: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        await self._queue.put((item, fut))
        return await fut

    async def _loop(self, queue: asyncio.Queue[tuple[In, asyncio.Future[Out]]]) -> None:
        while True:
            batch = [await queue.get()]
            deadline = asyncio.get_running_loop().time() + self.wait_s
            while len(batch) < self.max_batch_size:
                timeout = deadline - asyncio.get_running_loop().time()
                try:
                    batch.append(
                        queue.get_nowait()
                        if timeout <= 0
                        else await asyncio.wait_for(queue.get(), timeout)
                    )
                except (asyncio.QueueEmpty, TimeoutError):
                    break
            live = [(item, fut) for item, fut in batch if not fut.cancelled()]
            if not live:
                continue
            try:
                results = await self._run_batch([item for item, _ in live])
            except Exception as e:  # one bad batch fails its callers, never the batcher
                for _, fut in live:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            for (_, fut), res in zip(live, results, strict=True):
                if fut.done():
                    continue
                if isinstance(res, BaseException):
                    fut.set_exception(res)
                else:
                    fut.set_result(res)
