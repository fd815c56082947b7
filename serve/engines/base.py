"""The Engine interface: token ids in, token ids and logprobs out, weights swappable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from forge.types import ChatRequest, ImagePart, SamplingParams


@dataclass
class EngineRequest:
    """One generation: the rendered prompt's token ids and how to sample.

    ``chat`` is the request the prompt was rendered from; only the ``scripted`` test double reads
    it (a real model sees nothing but ``prompt_ids`` and, for a vision model, ``images``).
    ``images`` are the prompt's images in order, one per run of image pad tokens, and
    ``vision`` what the model's image processor made of them (a
    :class:`serve.vision.VisionInputs`), computed once by the Policy when it expanded the pads.
    """

    prompt_ids: list[int]
    sampling: SamplingParams
    chat: ChatRequest | None = None
    images: list[ImagePart] = field(default_factory=list)
    vision: Any = None


@dataclass
class EngineOutput:
    completion_ids: list[int]  # sampled ids, including the end-of-turn token when one was sampled
    logprobs: list[float]  # the model's logprob of each sampled id (raw, before temperature)
    finish_reason: str | None  # "stop" or "length"; None on a stream's partial outputs


class ContextLengthError(ValueError):
    """A request whose prompt leaves no room in the model's context: refused at admission,
    before it joins a batch, so no other request fails with it.

    The Policy raises it; through a Serve handle it arrives as Ray's ``RayTaskError`` subclass
    that is still an instance of this class (attributes reach the cause), for ``generate`` and
    for ``generate_stream`` alike. ``str(e.args[0])`` is the message on both sides. The HTTP
    app answers it with a 400 naming the request's messages field.

    A request whose prompt fits but whose ``max_tokens`` would overflow is *not* refused: the
    Policy clamps ``max_tokens`` to the room left (the completion then ends with ``length``).
    Harnesses ask for limits far beyond a small model's context (Claude Code sends 32000), so
    refusing those would fail every turn; only a prompt with no room for one token is refused.
    """

    def __init__(self, prompt_tokens: int, max_tokens: int, limit: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.limit = limit
        super().__init__(f"messages: {self.detail}")

    @property
    def detail(self) -> str:
        """The message without the field name (each protocol names its own field)."""
        return (
            f"prompt is {self.prompt_tokens} tokens; with max_tokens {self.max_tokens} it "
            f"exceeds the model's context of {self.limit}"
        )

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across Ray with its attributes
        return (type(self), (self.prompt_tokens, self.max_tokens, self.limit))


class ImageInputError(ValueError):
    """A request whose images the model cannot take: a text-only model, or a prompt whose image
    placeholders do not match its images. ``field`` names the image (or the conversation)
    on the wire; the HTTP app answers it with a 400 naming that field. Picklable across Ray
    with its attributes, like :class:`ContextLengthError`."""

    def __init__(self, problem: str, field: str = "messages") -> None:
        self.problem = problem
        self.field = field or "messages"
        super().__init__(f"{self.field}: {problem}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problem, self.field))


def admit(prompt_tokens: int, max_tokens: int, limit: int | None) -> int:
    """The ``max_tokens`` a request runs with in a context of ``limit`` tokens (None: no
    limit): ``max_tokens`` clamped to the room left; raises :class:`ContextLengthError` when the
    prompt leaves no room for a single token."""
    if limit is None:
        return max_tokens
    if prompt_tokens + 1 > limit:
        raise ContextLengthError(prompt_tokens, max_tokens, limit)
    return min(max_tokens, limit - prompt_tokens)


class Engine(Protocol):
    """Generates batches of requests; requests passed together are batched by the engine.

    An engine that batches continuously by itself sets ``continuous = True``: the Policy then
    sends it each request as it comes, and swaps weights with its ``async swap_weights(state)``
    instead of ``load_weights`` (see ``serve/engines/vllm.py``). It may also stream:
    ``stream(request)`` yields the sampled ids and logprobs as they come (``finish_reason`` set
    on the last), which the Policy's ``generate_stream`` passes on.

    ``max_context`` is the longest prompt plus completion the model takes (None: no limit);
    the Policy checks every request against it at admission (:func:`admit`).
    """

    tokenizer: Any
    max_context: int | None

    async def generate(self, requests: list[EngineRequest]) -> list[EngineOutput]: ...

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        """Replace the model's weights; called only between batches."""
        ...

    def state_dict(self) -> dict[str, Any]: ...
