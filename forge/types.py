"""Internal records shared across OpenForge.

Wire types (what clients send over HTTP) are pydantic models in ``serve/protocol``; these are the
plain dataclasses the rest of the system passes around. Every protocol is normalised into a
:class:`ChatRequest` (OpenAI chat-style messages and function tools) before it reaches the
Policy, and every Policy answer is a :class:`Completion` carrying the exact token ids.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

Protocol_ = Literal["chat", "responses", "anthropic"]


@dataclass
class ToolCall:
    """One tool call emitted by the model. ``arguments`` is the JSON text the model produced."""

    id: str
    name: str
    arguments: str


@dataclass
class TextPart:
    """A text piece of a message's content."""

    text: str


@dataclass
class ImagePart:
    """An image in a message's content: the exact bytes the client sent, their mime type and
    sha256 (the content address episodes record instead of the bytes).

    ``field`` is the wire path it came from (``messages[3].content[1].image_url.url``), so a
    model that takes no images can refuse it by name; ``data`` may be empty where only the
    reference travels (a recorded request).
    """

    mime: str
    sha256: str
    data: bytes = b""
    field: str = ""


def image_part(data: bytes, mime: str, field: str = "") -> ImagePart:
    """An :class:`ImagePart` for ``data``, with its sha256 computed."""
    import hashlib

    return ImagePart(mime=mime, sha256=hashlib.sha256(data).hexdigest(), data=data, field=field)


@dataclass
class Message:
    """A chat message in OpenAI chat-completions form.

    ``role`` is system, user, assistant or tool. Assistant messages may carry ``tool_calls``;
    tool messages carry the ``tool_call_id`` they answer and optionally the tool ``name``, and
    ``is_error`` when the client flagged the result as an error (Anthropic's ``is_error``; it
    does not change the rendered prompt).

    ``parts`` is the content in order, text and images, when the message holds an image
    (None for text only); ``content`` is then still the joined text, so text-only code reads
    it as before.
    """

    role: str
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    parts: list[TextPart | ImagePart] | None = None

    @property
    def images(self) -> list[ImagePart]:
        """The message's images, in order."""
        return [p for p in self.parts or [] if isinstance(p, ImagePart)]


@dataclass
class Tool:
    """A function tool: a name, a description and a JSON schema for its arguments.

    ``kind`` remembers where the tool came from so a protocol can map a call back to the
    client's own tool type (``function``, or Codex's ``custom`` free-text tools).
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    kind: str = "function"


@dataclass
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 0  # 0: the Policy's default (PolicyConfig.default_max_tokens)
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    # the JSON schema the reply must follow (``response_format`` and its kin), or None
    json_schema: dict[str, Any] | None = None


@dataclass
class ChatRequest:
    """A protocol-independent generation request, as the Policy receives it.

    ``script`` is only read by the ``scripted`` engine (a test double for the model): the
    reference solution of the task the attempt is playing, set by the HarnessPod.
    """

    messages: list[Message]
    tools: list[Tool] = field(default_factory=list)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    model: str = ""
    script: dict[str, Any] | None = None

    @property
    def images(self) -> list[ImagePart]:
        """Every image of the conversation, in prompt order."""
        return [image for m in self.messages for image in m.images]


@dataclass
class Completion:
    """What the Policy returns for one request: token ids in and out, and what they mean."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    text: str
    content: str
    tool_calls: list[ToolCall]
    finish_reason: str  # "stop" | "length" | "tool_calls"
    policy_version: int  # the weights of its first sampled token (the oldest, if several)
    invalid_tool_calls: int = 0  # tool-call blocks in the text that did not parse (kept as text)
    # each completion token's policy version: a weight update mid-stream (an engine that keeps
    # its requests in flight across it, vLLM's ``inflight: keep``) changes it for what follows
    token_versions: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Turn:
    """One recorded model call of an attempt, token for token."""

    episode_id: str
    attempt: int
    index: int
    protocol: str
    request: dict[str, Any]
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    text: str
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    policy_version: int
    latency_s: float
    started_at: float
    temperature: float = 1.0  # what the engine sampled with (the trainer uses the same)
    sampling_overridden: dict[str, Any] = field(default_factory=dict)  # asked for, replaced
    delivered: bool = True  # False: the client had gone before the answer reached it
    invalid_tool_calls: int = 0  # tool-call blocks in the text that did not parse
    images: list[str] = field(default_factory=list)  # sha256 of each prompt image, in order
    token_versions: list[int] = field(default_factory=list)  # per completion token (Completion)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Segment:
    """Turns merged by exact token prefix into one training sequence.

    ``tokens`` is the whole sequence; ``loss_mask[i]`` is 1 only where token ``i`` was sampled by
    the policy; ``logprobs[i]`` is the sampling logprob there (0.0 elsewhere).
    """

    tokens: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    turn_indices: list[int]
    policy_versions: list[int]
    prompt_len: int  # length of the first prompt, before any sampled token
    temperature: float = 1.0  # the sampling temperature of every turn in the segment

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Episode:
    """One finished attempt: what happened, its turns and segments, and its reward."""

    episode_id: str
    task_id: str
    attempt: int
    harness: str
    reward: float
    status: str  # "ok" or "failed"
    failure: str | None = None  # infrastructure failure, when status == "failed"
    failure_detail: str = ""  # what raised, when the pod's call itself failed
    truncated: str | None = None  # the policy ended it (context_full, turn_limit, ...): reward 0
    final_answer: str | None = None
    turns: list[Turn] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    reset_reasons: dict[str, int] = field(default_factory=dict)
    verifier_detail: str = ""
    # what the verifier's run wrote (Harbor's test-stdout.txt, ctrf.json) and what the agent
    # changed on the system outside its workdir (system_changes), by name
    verifier_outputs: dict[str, str] = field(default_factory=dict)
    # what the agent and verify phases reached through the egress proxy, or were refused:
    # {phase, host, port, allowed, why}, in order (forge.sandboxes.egress)
    egress: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float = 0.0
    harness_exit_code: int | None = None
    harness_log: str = ""
    # The task's services (tasks.services): every call, in order: {service, op, via, turn,
    # writes, error?}; via is how it came (tool, mcp, cli).
    service_calls: list[dict[str, Any]] = field(default_factory=list)
    services: list[str] = field(default_factory=list)  # the services the task offered
    # what produced it: harness, version, prompt hash, sandbox, task version, verifier, policy
    # versions, model, sampling (forge.provenance)
    provenance: dict[str, Any] = field(default_factory=dict)
    # The pixels of the turns' images by sha256: kept in memory, written beside the episode
    # file (``images/<sha256>.<ext>``), never into its JSON line (see :meth:`to_dict`).
    images: dict[str, ImagePart] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(replace(self, images={}))  # the pixels stay out of the record
        del out["images"]
        return out
