"""The Policy: a Ray Serve deployment around an engine.

Proxies call :meth:`Policy.generate` through a Serve handle with a protocol-independent
:class:`~forge.types.ChatRequest`. The Policy renders the prompt with the model's chat template,
batches concurrent requests into one engine call, parses tool calls and returns
a :class:`~forge.types.Completion` with the exact prompt and completion token ids, logprobs and
the policy version. Each request is admitted before it joins a batch: ``max_tokens`` is clamped
to the room its prompt leaves in the engine's context, and a prompt that leaves none raises
:class:`~serve.engines.base.ContextLengthError` for that request alone; a batch the engine
fails is rerun request by request, so only a request that fails by itself fails.
:meth:`Policy.generate_stream` gives the same completion as a Serve
streaming call, with the content text first as the engine samples it (:mod:`serve.live`).

Weight swaps are atomic: a batch runs under a lock, and :meth:`update_weights` takes the same
lock, so in-flight requests finish on the old weights, queued ones wait and run on the new ones,
and a completion's version always names the weights that produced it. An engine that batches
continuously itself (``engine.continuous``, vLLM) gets each request at once instead; a swap then
holds new requests at a gate and, per the engine's ``inflight``, keeps the ones in flight frozen
across it (``keep``: they go on under the new weights once it is done, so a stream pauses only
for the swap itself), waits for them (``wait``), or lets the engine abort them (``abort``: they
fail); then it opens the gate. Every completion carries each token's version
(``Completion.token_versions``): with ``keep``, the tokens after a swap carry the new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray import serve

from forge.config import ActorPlacement, PolicyConfig
from forge.types import ChatRequest, Completion
from serve.batching import MicroBatcher
from serve.chat_template import ParsedText, parse_completion, render_with
from serve.engines.base import EngineOutput, EngineRequest, ImageInputError, admit
from serve.engines.registry import make_engine
from serve.live import safe_content
from serve.weight_sync import subscribe

if TYPE_CHECKING:  # the collective group imports torch, which only a replica needs
    from serve.collective import Receiver


class Policy:
    def __init__(self, config: PolicyConfig | dict[str, Any]) -> None:
        self.config = PolicyConfig.model_validate(config)
        self.engine = make_engine(self.config.engine.name, **self.config.engine.engine_options())
        self.tokenizer = self.engine.tokenizer
        self.image_processor = getattr(self.engine, "image_processor", None)  # vision models
        self.version = 0
        self._swap = asyncio.Lock()
        self._batcher = MicroBatcher(
            self._generate_batch, self.config.max_batch_size, self.config.batch_wait_ms / 1000
        )
        self.continuous = bool(getattr(self.engine, "continuous", False))
        self._open = asyncio.Event()  # continuous engines: cleared while weights are swapped
        self._open.set()
        self._drained = asyncio.Event()  # continuous engines: set when nothing is in flight
        self._drained.set()
        self._inflight = 0
        self.stats = {"requests": 0, "batches": 0, "batch_retries": 0, "completion_tokens": 0}
        self._receiver: Receiver | None = None  # a collective WeightSync's, made on first use
        self._subscriber: asyncio.Task[None] | None = None
        if self.config.weight_store:
            replica = f"policy-{uuid.uuid4().hex[:8]}"
            loop = asyncio.get_running_loop()
            self._subscriber = loop.create_task(subscribe(self, self.config.weight_store, replica))

    def model_name(self) -> str:
        return self.config.engine.model

    def tokenize_prompt(self, chat: ChatRequest) -> list[int]:
        return self._tokenize(chat)[0]

    def _tokenize(self, chat: ChatRequest) -> tuple[list[int], Any]:
        """The prompt's ids and, for a vision model, its images' processor outputs: each
        image's one pad token expanded to the image's token count (:mod:`serve.vision`)."""
        text = render_with(self.tokenizer, chat.messages, chat.tools)
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        processor = getattr(self, "image_processor", None)  # (a bare Policy renders text only)
        if processor is None:
            return ids, None
        from serve.vision import expand_image_pads, merge_size, pad_token_id, process_images

        images = chat.images
        vision = process_images(processor, images) if images else None
        counts = vision.counts(merge_size(processor)) if vision is not None else []
        return expand_image_pads(ids, counts, pad_token_id(self.tokenizer)), vision

    def _prepare(self, chat: ChatRequest) -> EngineRequest:
        """Admission, before the request joins a batch: the prompt's ids, and ``max_tokens``
        clamped to the room the prompt leaves in the engine's context; a prompt that leaves
        none raises :class:`ContextLengthError` (this request fails, no other)."""
        if chat.sampling.max_tokens <= 0:
            chat.sampling.max_tokens = self.config.default_max_tokens
        self._check_images(chat)
        prompt_ids, vision = self._tokenize(chat)
        limit = getattr(self.engine, "max_context", None)
        max_tokens = admit(len(prompt_ids), chat.sampling.max_tokens, limit)
        sampling = chat.sampling
        if max_tokens != sampling.max_tokens:
            sampling = dataclasses.replace(sampling, max_tokens=max_tokens)
        images = chat.images if vision is not None else []
        return EngineRequest(prompt_ids, sampling, chat, images, vision)

    def _check_images(self, chat: ChatRequest) -> None:
        """A text-only model refuses a request with images, naming the first one's field; an
        engine that does not say (``takes_images`` unset: the scripted test double, which plays
        scripts) ignores them."""
        images = chat.images
        if images and getattr(self.engine, "takes_images", None) is False:
            raise ImageInputError(f"model {self.model_name()!r} takes no images", images[0].field)

    def _complete(
        self,
        chat: ChatRequest,
        request: EngineRequest,
        out: EngineOutput,
        version: int,
        versions: list[int] | None = None,
    ) -> Completion:
        """The completion of ``out``; ``versions``: each of its tokens' policy version (None:
        all ``version``'s, the weights it was admitted under)."""
        text = self.tokenizer.decode(out.completion_ids, skip_special_tokens=True)
        parsed = parse_completion(text) if chat.tools else ParsedText(text, [], 0)
        content, calls = parsed.content, parsed.calls
        finish = out.finish_reason or "length"
        finish = "tool_calls" if calls and finish == "stop" else finish
        self.stats["requests"] += 1
        self.stats["completion_tokens"] += len(out.completion_ids)
        versions = versions if versions is not None else [version] * len(out.completion_ids)
        return Completion(
            prompt_ids=request.prompt_ids,
            completion_ids=out.completion_ids,
            logprobs=out.logprobs,
            text=text,
            content=content,
            tool_calls=calls,
            finish_reason=finish,
            policy_version=versions[0] if versions else version,
            invalid_tool_calls=parsed.invalid,
            token_versions=versions,
        )

    async def generate(self, chat: ChatRequest) -> Completion:
        request = self._prepare(chat)
        if self.continuous and hasattr(self.engine, "stream"):  # each token's version
            (event,) = [e async for e in self._stream(chat, request, live=False)]
            return event[1]
        return self._complete(chat, request, *await self._run(request))

    async def generate_many(self, chats: list[ChatRequest]) -> list[Completion | Exception]:
        """:meth:`generate` for each, at once: one Serve call for several (a HarnessPod's
        calls of one turn of its loop, :mod:`actors.call_batch`); each request's error in its
        place."""
        return await asyncio.gather(*(self.generate(c) for c in chats), return_exceptions=True)

    async def _run(self, request: EngineRequest) -> tuple[EngineOutput, int]:
        if not self.continuous:
            return await self._batcher.submit(request)
        async with self._admit() as version:
            (out,) = await self.engine.generate([request])
        return out, version

    async def generate_stream(self, chat: ChatRequest) -> AsyncIterator[tuple[str, Any]]:
        """The answer as it is generated (a Serve streaming call): ``("prompt", ids)``, then
        ``("text", delta)`` for content as it is sampled (see :mod:`serve.live`), then
        ``("done", completion)``, the same completion :meth:`generate` returns. Engines that
        do not stream (``torch``) send their content with the completion."""
        request = self._prepare(chat)
        yield "prompt", request.prompt_ids
        if not (self.continuous and hasattr(self.engine, "stream")):
            yield "done", self._complete(chat, request, *await self._run(request))
            return
        async for event in self._stream(chat, request, live=True):
            yield event

    async def _stream(
        self, chat: ChatRequest, request: EngineRequest, live: bool
    ) -> AsyncIterator[tuple[str, Any]]:
        """A continuous engine's stream: ``("text", delta)`` as content is sampled (when
        ``live``), then ``("done", completion)`` with each token's version as it arrived."""
        ids: list[int] = []
        logprobs: list[float] = []
        versions: list[int] = []  # each token's, as it arrives: a swap mid-stream shows here
        finish: str | None = None
        sent = ""
        async with self._admit() as version:
            async for delta in self.engine.stream(request):
                ids += delta.completion_ids
                logprobs += delta.logprobs
                versions += [self.version] * len(delta.completion_ids)
                finish = delta.finish_reason or finish
                if not live:
                    continue
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                safe = safe_content(text, bool(chat.tools))
                if len(safe) > len(sent) and safe.startswith(sent):
                    yield "text", safe[len(sent) :]
                    sent = safe
        out = EngineOutput(ids, logprobs, finish)
        yield "done", self._complete(chat, request, out, version, versions)

    async def _generate_batch(
        self, requests: list[EngineRequest]
    ) -> list[tuple[EngineOutput, int] | BaseException]:
        async with self._swap:
            version = self.version
            try:
                outputs: list[EngineOutput | BaseException] = list(
                    await self.engine.generate(requests)
                )
            except Exception:
                if len(requests) == 1:
                    raise
                outputs = await self._one_by_one(requests)
        self.stats["batches"] += 1
        return [o if isinstance(o, BaseException) else (o, version) for o in outputs]

    async def _one_by_one(self, requests: list[EngineRequest]) -> list[EngineOutput | Exception]:
        """A batch failed: run its requests alone, so that only one that fails by itself
        fails (its caller gets its own error) and the rest of the batch is served."""
        self.stats["batch_retries"] += 1
        outputs: list[EngineOutput | Exception] = []
        for request in requests:
            try:
                (out,) = await self.engine.generate([request])
            except Exception as e:
                out = e
            outputs.append(out)
        return outputs

    @contextlib.asynccontextmanager
    async def _admit(self) -> AsyncIterator[int]:
        """Continuous engines: one request in flight, past the gate; yields the version."""
        while not self._open.is_set():
            await self._open.wait()
        self._inflight += 1
        self._drained.clear()
        try:
            yield self.version
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._drained.set()

    async def update_weights(self, state_dict: Any, version: int) -> float:
        """Swap in new weights between batches; returns the seconds the swap took.

        ``state_dict`` may be an ``ObjectRef`` (the object-store WeightSync) or a dict.
        """
        import ray

        if isinstance(state_dict, ray.ObjectRef):
            state_dict = await state_dict
        if self.continuous:
            swap = partial(self.engine.swap_weights, state_dict)
            return await self._swap_continuous(swap, version)
        start = time.perf_counter()
        async with self._swap:
            await asyncio.to_thread(self.engine.load_weights, state_dict)
            self.version = version
        return time.perf_counter() - start

    async def receive_weights(self, message: dict[str, Any], rank: int, version: int) -> float:
        """Take the weights the trainer broadcasts (``CollectiveWeightSync``) as ``rank``."""
        if self.continuous:  # the engine's own workers receive them while it is paused
            swap = partial(self.engine.receive_weights, message, rank)
            return await self._swap_continuous(swap, version)
        if self._receiver is None:
            from serve.collective import Receiver

            self._receiver = Receiver()
        state = await asyncio.to_thread(self._receiver.receive, message, rank)
        return await self.update_weights(state, version)  # received while serving, then swapped

    async def _swap_continuous(self, swap: Callable[[], Awaitable[Any]], version: int) -> float:
        """Hold new requests at the gate; per ``engine.inflight``, keep those in flight frozen
        (the engine pauses them), let them finish, or let the engine abort them; run ``swap``
        and open the gate on the new version."""
        start = time.perf_counter()
        async with self._swap:  # one swap at a time
            self._open.clear()
            try:
                if getattr(self.engine, "inflight", "wait") == "wait":
                    await self._drained.wait()
                await swap()
                self.version = version
            finally:
                self._open.set()
        return time.perf_counter() - start

    def get_version(self) -> int:
        return self.version

    def describe(self) -> dict[str, Any]:
        """What a caller plans with: ``context_length``, the longest prompt plus completion the
        engine takes (None: it sets no limit), and ``streams``, whether ``generate_stream``
        sends content as it is sampled (else it sends the prompt, then the whole answer)."""
        return {
            "context_length": getattr(self.engine, "max_context", None),
            "streams": self.continuous and hasattr(self.engine, "stream"),
        }

    def get_stats(self) -> dict[str, Any]:
        return {**self.stats, "version": self.version}


ROOT = Path(__file__).resolve().parents[1]


def vllm_runtime_env() -> dict[str, Any]:
    """Ray's runtime_env for replicas of the vllm engine: the vLLM environment's Python (its
    own transformers), with this repository importable."""
    python = Path(os.environ.get("FORGE_VLLM_PYTHON") or ROOT / ".venv-vllm" / "bin" / "python")
    if not python.exists():
        raise RuntimeError(
            f"engine 'vllm' needs its environment ({python} is missing): run "
            "scripts/setup_vllm.sh, or point FORGE_VLLM_PYTHON at a Python with vLLM and Ray "
            f"{ray_version()}"
        )
    return {"py_executable": str(python), "env_vars": {"PYTHONPATH": str(ROOT)}}


def ray_version() -> str:
    import ray

    return ray.__version__


def policy_app(config: PolicyConfig, placement: ActorPlacement | None = None) -> Any:
    """The Serve application for ``config``: ``serve.run(policy_app(cfg), name="policy")``.
    ``placement`` (a run's ``placement.policy``) adds resources and node labels to each
    replica and may replace its CPUs and GPUs."""
    placement = placement or ActorPlacement()
    actor = placement.ray_options(config.num_cpus, config.num_gpus)
    if config.engine.name == "vllm":
        actor["runtime_env"] = vllm_runtime_env()
    deployment = serve.deployment(Policy).options(
        name="Policy",
        num_replicas=config.replicas,
        max_ongoing_requests=config.max_ongoing_requests,
        ray_actor_options=actor,
        logging_config={"enable_access_log": False},
    )
    return deployment.bind(config.model_dump())


def deploy_policy(
    config: PolicyConfig, app_name: str = "policy", placement: ActorPlacement | None = None
) -> Any:
    """Deploy the Policy on the connected Ray cluster (no HTTP ingress) and return its handle;
    ``placement``: where its replicas go (see :func:`policy_app`)."""
    serve.start(proxy_location="Disabled")
    return serve.run(policy_app(config, placement), name=app_name, route_prefix=None)


class LocalHandle:
    """Calls a Policy in this process with a Serve handle's shape (``h.generate.remote(x)``),
    for unit tests and tools that run without Ray."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy

    def options(self, **_: Any) -> LocalHandle:
        return self  # stream=True: an async generator method's result is iterated as it is

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._policy, name)

        class _Method:
            @staticmethod
            def remote(*args: Any, **kwargs: Any) -> Any:
                result = method(*args, **kwargs)
                if inspect.isasyncgen(result):
                    return result
                if asyncio.iscoroutine(result):
                    return asyncio.ensure_future(result)
                fut = asyncio.get_event_loop().create_future()
                fut.set_result(result)
                return fut

        return _Method
