"""The HarnessPod's recording proxy: the :class:`serve.http_app.Backend` its routes serve from.

Each call is authorised against its attempt (the URL names it, the bearer key proves it: another
attempt's key gets 401, an unknown attempt 404, an ended one 410), forwarded to the Policy
through its Serve handle with the run's sampling in place of the harness's, and recorded as a
:class:`~forge.types.Turn` of its attempt, token for token.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import ray
from ray.serve.handle import DeploymentHandle
from starlette.requests import Request

from actors.attempt_state import AttemptState
from actors.call_batch import GenerateBatcher
from forge.config import ProxyConfig
from forge.types import ChatRequest, Completion, Turn
from serve.engines.base import ContextLengthError, ImageInputError
from serve.event_stream import client_gone
from serve.http_app import image_error, request_api_key
from serve.live import LiveCompletion, stream_from
from serve.protocol.common import ProtocolError, WireOptions
from serve.protocol.images import redact_images
from serve.protocol.models import ModelCard

MAX_REFUSALS_KEPT = 50  # 4xx answers kept per attempt (a harness may retry one forever)


@dataclass
class Call:
    """One authorised request: its attempt and the HTTP request (to see if the client left)."""

    state: AttemptState
    request: Request


def override_sampling(chat: ChatRequest, raw_body: dict[str, Any], temperature: float | None):
    """Put the run's sampling settings in place of the harness's; returns what was replaced.

    The trainer recomputes log-probabilities from the full softmax at the sampling temperature,
    so truncation (top_p, top_k) would bias its gradient: both are turned off here, and the run's
    temperature (when it has one) replaces the harness's. The Turn keeps what the harness asked.
    """
    replaced: dict[str, Any] = {}
    if temperature is not None and chat.sampling.temperature != temperature:
        replaced["temperature"] = chat.sampling.temperature
        chat.sampling.temperature = temperature
    if chat.sampling.top_p != 1.0:
        replaced["top_p"] = chat.sampling.top_p
        chat.sampling.top_p = 1.0
    top_k = raw_body.get("top_k")
    if top_k not in (None, 0, -1):
        replaced["top_k"] = top_k
    return replaced


class PolicyCalls:
    """The Policy's methods as the proxy calls them, made on the event loop that serves the
    proxy: through a handle of its own whose router runs on this loop (a handle's router runs
    on a thread of its own by default, and every call then crosses between the two loops),
    with its options set once (``options`` copies a handle: a cost a call) and over Serve's
    gRPC transport (``_by_reference=False``: a request and each event it streams back travel as
    gRPC messages, not as Ray object references, the larger part of a call's CPU before).
    ``scripts/bench/proxy_load.py`` measures what a call costs the pod."""

    def __init__(self, policy: Any) -> None:
        policy = _on_this_loop(policy)
        # A request is plain dataclasses: the C pickler takes a long conversation in less than
        # half cloudpickle's time. Answers stay cloudpickled (an engine's error may be a class
        # Ray makes on the fly).
        grpc = {"_by_reference": False, "request_serialization": "pickle"}
        direct = policy.options(**grpc)
        self.batch = GenerateBatcher(direct.generate, direct.generate_many)
        self.tokenize_prompt = direct.tokenize_prompt
        self.describe = direct.describe
        self.generate_stream = policy.options(stream=True, **grpc).generate_stream


def _on_this_loop(policy: Any) -> Any:
    """In a Ray actor (a HarnessPod in a run), a new handle of ``policy``'s deployment whose
    router runs on the running event loop, which lives as long as the actor's process; anywhere
    else (a driver or a test, whose loops end) or for no Serve handle, ``policy`` itself."""
    if not isinstance(policy, DeploymentHandle) or ray.get_runtime_context().get_actor_id() is None:
        return policy
    handle = DeploymentHandle(policy.deployment_name, policy.app_name)
    handle._init(_run_router_in_separate_loop=False)  # Serve's own option, set before first use
    return handle


class RecordingProxy:
    """Serves and records the calls of a pod's open attempts (``attempts``, shared with the
    pod, which opens and closes them; ``ended``: the closed ones, for 410 answers).
    ``context_length``: the Policy's context, for the models API (None: the Policy's own)."""

    def __init__(
        self,
        policy: Any,
        model: str,
        config: ProxyConfig,
        attempts: dict[tuple[str, int], AttemptState],
        ended: OrderedDict[tuple[str, int], None],
        context_length: int | None = None,
    ) -> None:
        self.policy = policy
        self.model = model
        self.config = config
        self.attempts = attempts
        self.ended = ended
        self.context_length = context_length
        self._policy: dict[str, Any] | None = None  # the Policy's describe(), asked once

    @functools.cached_property
    def calls(self) -> PolicyCalls:
        return PolicyCalls(self.policy)

    async def authorize(self, request: Request) -> Call:
        ident = (request.path_params["episode_id"], request.path_params["attempt"])
        state = self.attempts.get(ident)
        if state is None:
            if ident in self.ended:
                raise ProtocolError(410, f"attempt {ident[1]} of episode {ident[0]} has ended")
            raise ProtocolError(404, f"no attempt {ident[1]} of episode {ident[0]} on this proxy")
        key = request_api_key(request)
        if key is None or not secrets.compare_digest(key, state.key):
            raise ProtocolError(401, "invalid API key for this attempt")
        return Call(state, request)

    async def models(self, ctx: Call) -> list[ModelCard]:
        context = self.context_length
        if context is None:
            context = (await self.policy_info())["context_length"]
        return [ModelCard(self.model, context)]

    async def policy_info(self) -> dict[str, Any]:
        """The Policy's :meth:`~serve.policy.Policy.describe`, asked at its first use (an
        engine's context and streaming do not change in a run)."""
        if self._policy is None:
            self._policy = await self.calls.describe.remote()
        return self._policy

    async def count_tokens(self, ctx: Call, chat: ChatRequest) -> int:
        self._check_model(chat)
        with ctx.state.in_policy_call():
            return len(await self.calls.tokenize_prompt.remote(chat))

    async def refused(self, ctx: Call, err: ProtocolError) -> None:
        if err.status == 413:  # a history past max_body_bytes: the policy's once it had a turn
            ctx.state.reject("history_too_large")
        refusals = ctx.state.refusals
        if len(refusals) < MAX_REFUSALS_KEPT:
            refusals.append(f"{err.status} {err.message}")

    async def generate(
        self,
        ctx: Call,
        chat: ChatRequest,
        opts: WireOptions,
        raw_body: dict[str, Any],
        live: LiveCompletion | None = None,
    ) -> Completion:
        state = ctx.state
        if len(state.turns) >= self.config.max_turns_per_attempt:
            state.reject("turn_limit")
            raise ProtocolError(
                429, f"turn limit of {self.config.max_turns_per_attempt} calls reached"
            )
        if state.max_turns is not None and state.delivered() >= state.max_turns:
            state.reject("turn_limit")
            raise ProtocolError(429, f"the task's turn limit of {state.max_turns} calls is reached")
        self._check_model(chat)
        if state.max_tokens is not None and (
            not opts.max_tokens_set or chat.sampling.max_tokens > state.max_tokens
        ):
            chat.sampling.max_tokens = state.max_tokens
        replaced = override_sampling(chat, raw_body, state.temperature)
        chat.script = state.script
        started, t0 = time.time(), time.perf_counter()
        try:
            with state.in_policy_call():
                if live is None or not (await self.policy_info())["streams"]:
                    # an engine that does not stream sends the whole answer at once: one unary
                    # call (a streamed call's messages cost the pod more than its answer)
                    completion: Completion = await self.calls.batch.generate(chat)
                else:
                    completion = await stream_from(self.calls.generate_stream.remote(chat), live)
        except ContextLengthError as e:  # the policy's own context is full: scored, not retried
            state.reject("context_full")
            field_name = "input" if opts.protocol == "responses" else "messages"
            raise ProtocolError(400, str(e.args[0] if e.args else e), field_name) from e
        except ImageInputError as e:  # images this model cannot take: the client's error
            raise image_error(e) from e
        except Exception as e:
            state.errors.append(f"{type(e).__name__}: {e}")
            raise ProtocolError(502, f"policy error: {type(e).__name__}: {e}") from e
        if (state.episode_id, state.attempt) not in self.attempts:
            raise ProtocolError(410, "attempt ended while the call was in flight")
        images = chat.images
        turn = Turn(
            episode_id=state.episode_id,
            attempt=state.attempt,
            index=len(state.turns),
            protocol=opts.protocol,
            request=redact_images(raw_body, images),  # images by reference, never base64
            prompt_ids=completion.prompt_ids,
            completion_ids=completion.completion_ids,
            logprobs=completion.logprobs,
            text=completion.text,
            tool_calls=[
                {"id": c.id, "name": c.name, "arguments": c.arguments}
                for c in completion.tool_calls
            ],
            finish_reason=completion.finish_reason,
            policy_version=completion.policy_version,
            latency_s=time.perf_counter() - t0,
            started_at=started,
            temperature=chat.sampling.temperature,
            sampling_overridden=replaced,
            invalid_tool_calls=completion.invalid_tool_calls,
            token_versions=completion.token_versions,
            images=[image.sha256 for image in images],
        )
        for image in images:
            state.images.setdefault(image.sha256, image)
        state.turns.append(turn)
        if live is not None:
            state.streams.append((turn, live))
        elif client_gone(ctx.request.receive):  # an SDK gave up on it: never delivered
            turn.delivered = False
        return completion

    def _check_model(self, chat: ChatRequest) -> None:
        if chat.model and chat.model != self.model:
            raise ProtocolError(
                404,
                f"model: unknown model {chat.model!r}; this proxy serves {self.model!r}",
                "model",
            )
