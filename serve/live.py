"""Streaming a completion while it is generated, from the engine to the wire.

A :class:`LiveCompletion` carries one streamed answer: the prompt's token ids first, then the
content text as it is sampled, then the whole :class:`~forge.types.Completion`. The text it
streams is always a prefix of the final ``content``: :func:`safe_content` holds back whatever
the tool-call parser could still take away (a ``<tool_call>`` block and anything after it,
trailing whitespace, a half-decoded character), and the rest follows from the final completion.

The Policy yields its side as ``("prompt", ids)``, ``("text", delta)`` ... ``("done",
completion)`` from ``generate_stream`` (:func:`stream_policy` reads it through a Serve handle);
the HTTP endpoint renders the live completion as server-sent events while the backend records it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from forge.types import ChatRequest, Completion
from serve.protocol.sse import pieces

TOOL_TAG = "<tool_call>"


def safe_content(text: str, tools: bool) -> str:
    """The part of the completion text so far that the final content surely starts with."""
    text = text.rstrip("\ufffd")  # a character whose bytes are not all sampled yet
    if not tools:
        return text
    if text[:1].isspace():
        return ""  # stripped only if a tool call follows: unknown until the end
    cut = text.find(TOOL_TAG)
    if cut >= 0:
        text = text[:cut]
    else:
        for n in range(min(len(TOOL_TAG) - 1, len(text)), 0, -1):
            if text.endswith(TOOL_TAG[:n]):
                text = text[:-n]
                break
    return text.rstrip()


class LiveCompletion:
    """One answer in flight: a producer calls :meth:`start`, :meth:`text`, then :meth:`finish`
    (or :meth:`fail`); a consumer awaits :meth:`started`, then iterates :meth:`content` (or
    takes :meth:`next_batch` until ``completion`` is set). A server sets ``delivered`` once
    its client was sent the whole answer."""

    def __init__(self) -> None:
        self.prompt_ids: list[int] | None = None
        self.completion: Completion | None = None
        self._events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._started = asyncio.Event()
        self._error: BaseException | None = None
        self.sent = ""  # content handed to the consumer so far
        self.delivered = False  # the whole answer reached the client (set by the server)

    @classmethod
    def of(cls, completion: Completion) -> LiveCompletion:
        live = cls()
        live.finish(completion)
        return live

    def start(self, prompt_ids: list[int]) -> None:
        if self.prompt_ids is None:
            self.prompt_ids = list(prompt_ids)
            self._started.set()

    def text(self, delta: str) -> None:
        if delta:
            self._events.put_nowait(("text", delta))

    def finish(self, completion: Completion) -> None:
        self.start(completion.prompt_ids)
        self._events.put_nowait(("done", completion))

    def fail(self, error: BaseException) -> None:
        self._error = error
        self._started.set()
        self._events.put_nowait(("error", error))

    async def started(self) -> None:
        """Wait for the prompt; raises the producer's error if it failed before that."""
        await self._started.wait()
        if self.prompt_ids is None and self._error is not None:
            raise self._error

    def final(self) -> Completion:
        """The whole answer, once :meth:`content` is exhausted."""
        if self.completion is None:
            raise RuntimeError("the completion is not finished")
        return self.completion

    async def content(self) -> AsyncIterator[str]:
        """Content pieces as they come; then the rest of the final content. Afterwards
        ``completion`` holds the whole answer."""
        while self.completion is None:
            for piece in await self.next_batch():
                yield piece

    async def next_batch(self) -> list[str]:
        """The next pieces of :meth:`content`: every piece that has come by now (it waits only
        while none has), so a server writes them at once. The last batch (possibly empty)
        comes with ``completion`` set; there is none after it."""
        kind, value = await self._events.get()
        batch: list[str] = []
        while kind == "text":
            self.sent += value
            batch.append(value)
            if self._events.empty():
                return batch
            kind, value = self._events.get_nowait()
        if kind == "error":
            raise value
        final = value.content
        if not final.startswith(self.sent):  # cannot happen with safe_content
            raise RuntimeError("streamed content is not a prefix of the final content")
        batch += pieces(final[len(self.sent) :])
        self.sent = final
        self.completion = value
        return batch


async def stream_policy(policy: Any, chat: ChatRequest, live: LiveCompletion) -> Completion:
    """Call the Policy's ``generate_stream`` through ``policy`` (a Serve handle), feeding
    ``live`` as events come; returns the completion (``live`` is finished by the caller)."""
    return await stream_from(policy.options(stream=True).generate_stream.remote(chat), live)


async def stream_from(events: AsyncIterator[tuple[str, Any]], live: LiveCompletion) -> Completion:
    """:func:`stream_policy` for a ``generate_stream`` call already made (``events``: its
    response, e.g. through a handle whose options are set once)."""
    async for kind, value in events:
        if kind == "prompt":
            live.start(value)
        elif kind == "text":
            live.text(value)
        else:
            return value
    raise RuntimeError("the Policy's stream ended without a completion")
