"""The Engine interface: token ids in, token ids and logprobs out, weights swappable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from forge.types import ChatRequest, SamplingParams


@dataclass
class EngineRequest:
    """One generation: the rendered prompt's token ids and how to sample.

    ``chat`` is the request the prompt was rendered from; only the ``scripted`` test double reads
    it (a real model sees nothing but ``prompt_ids``).
    """

    prompt_ids: list[int]
    sampling: SamplingParams
    chat: ChatRequest | None = None


@dataclass
class EngineOutput:
    completion_ids: list[int]  # sampled ids, including the end-of-turn token when one was sampled
    logprobs: list[float]  # the model's logprob of each sampled id (raw, before temperature)
    finish_reason: str | None  # "stop" or "length"; None on a stream's partial outputs


class Engine(Protocol):
    """Generates batches of requests; requests passed together are batched by the engine.

    An engine that batches continuously by itself sets ``continuous = True``: the Policy then
    sends it each request as it comes, and swaps weights with its ``async swap_weights(state)``
    instead of ``load_weights`` (see ``serve/engines/vllm.py``). It may also stream:
    ``stream(request)`` yields the sampled ids and logprobs as they come (``finish_reason`` set
    on the last), which the Policy's ``generate_stream`` passes on.
    """

    tokenizer: Any

    async def generate(self, requests: list[EngineRequest]) -> list[EngineOutput]: ...

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        """Replace the model's weights; called only between batches."""
        ...

    def state_dict(self) -> dict[str, Any]: ...
