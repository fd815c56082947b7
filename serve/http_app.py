"""The HTTP face shared by the standalone server (``forge serve``) and the HarnessPod proxy.

:func:`protocol_routes` adds, under a path prefix, the three generation endpoints (chat
completions, Responses, Anthropic messages) and the model list. Each request is authorised by the
:class:`Backend` first, then its body is read under a size bound, parsed strictly by its protocol
module into a :class:`~forge.types.ChatRequest`, handed to ``Backend.generate`` and the
:class:`~forge.types.Completion` rendered as JSON, or, for a streamed request, rendered as
server-sent events while it is generated (:mod:`serve.live`). Errors are answered in
the protocol's own error format; a prompt too long for the model's context
(:class:`~serve.engines.base.ContextLengthError`) is a 400 naming the conversation's field; an
unexpected exception is a 500 and the server keeps running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from forge.types import ChatRequest, Completion
from serve.engines.base import ContextLengthError, ImageInputError
from serve.event_stream import EventStream
from serve.live import LiveCompletion
from serve.protocol import anthropic
from serve.protocol.body import parse_body
from serve.protocol.common import ProtocolError, WireOptions, WireProtocol, error_body
from serve.protocol.images import ImageOptions, image_options
from serve.protocol.models import ModelCard, find_model, model_list, model_object, wire_of
from serve.protocol.sse import dumps
from serve.protocol.wire import MODULES

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024


class Backend(Protocol):
    """What the routes serve from. ``authorize`` returns a context object passed back to the
    other two; it raises :class:`ProtocolError` (401, 403, 404, 410, ...) to refuse a request."""

    async def authorize(self, request: Request) -> Any: ...

    async def generate(
        self,
        ctx: Any,
        chat: ChatRequest,
        opts: WireOptions,
        raw_body: dict[str, Any],
        live: LiveCompletion | None = None,
    ) -> Completion:
        """The answer to ``chat``; with ``live`` (a streamed request), also feed it the prompt
        and content as they come (or leave it: the endpoint finishes it from the result)."""
        ...

    async def models(self, ctx: Any) -> Sequence[str | ModelCard]:
        """The models served (a bare name: its context length is unknown)."""
        ...

    async def count_tokens(self, ctx: Any, chat: ChatRequest) -> int:
        """Tokens of ``chat``'s rendered prompt (Anthropic's ``count_tokens``; no turn)."""
        ...

    async def refused(self, ctx: Any, err: ProtocolError) -> None:
        """Told of every 4xx answered to an authorised request (a body the parser refused, an
        unknown model, ...), so that a harness that then gives up is not taken for a crash."""
        ...


def request_api_key(request: Request) -> str | None:
    """The key a client sent: ``Authorization: Bearer KEY`` or Anthropic's ``x-api-key: KEY``."""
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, key = auth.strip().partition(" ")
        if scheme.lower() == "bearer" and key.strip():
            return key.strip()
    key = request.headers.get("x-api-key")
    return key.strip() if key and key.strip() else None


def error_response(protocol: WireProtocol, err: ProtocolError) -> JSONResponse:
    headers = {}
    if err.retry_after is not None:
        headers["Retry-After"] = str(max(0, round(err.retry_after)))
    return JSONResponse(error_body(protocol, err), status_code=err.status, headers=headers)


def json_response(body: dict[str, Any]) -> Response:
    """A 200 JSON answer, encoded by the events' encoder (:func:`serve.protocol.sse.dumps`:
    one encoder for every answer, where ``JSONResponse`` makes one each)."""
    return Response(dumps(body).encode(), media_type="application/json")


async def read_json_body(request: Request, max_body_bytes: int) -> dict[str, Any]:
    """The request body as a JSON object, read under ``max_body_bytes`` (413 beyond it) and
    checked by :func:`serve.protocol.body.parse_body`."""
    too_big = ProtocolError(413, f"body: exceeds the limit of {max_body_bytes} bytes", "body")
    length = request.headers.get("content-length")
    if length is not None:
        try:
            declared = int(length)
        except ValueError:
            raise ProtocolError(
                400, f"content-length: invalid header {length[:40]!r}", "content-length"
            ) from None
        if declared > max_body_bytes:
            raise too_big
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body_bytes:
            raise too_big
        chunks.append(chunk)
    return parse_body(b"".join(chunks))


def context_error(protocol: WireProtocol, e: ContextLengthError) -> ProtocolError:
    """The 400 for a prompt that leaves no room in the model's context, naming the field that
    holds the conversation (``e`` may be Ray's wrapper of it: its attributes reach the cause)."""
    field = "input" if protocol == "responses" else "messages"
    detail = ContextLengthError(e.prompt_tokens, e.max_tokens, e.limit).detail
    return ProtocolError(400, f"{field}: {detail}", field)


_producing: set[asyncio.Task[None]] = set()  # streamed answers being generated and recorded


async def _produce(
    backend: Backend,
    live: LiveCompletion,
    args: tuple[Any, ChatRequest, WireOptions, dict[str, Any]],
) -> None:
    """Generate (and let the backend record) a streamed answer, whether or not the client
    stays to read it."""
    try:
        live.finish(await backend.generate(*args, live=live))
    except BaseException as e:
        live.fail(e)


def _start_stream(backend: Backend, live: LiveCompletion, *args: Any) -> None:
    task = asyncio.get_running_loop().create_task(_produce(backend, live, args))
    _producing.add(task)
    task.add_done_callback(_producing.discard)


_UNAUTHORIZED = object()  # the context of a request that was refused before authorisation


def image_error(e: ImageInputError) -> ProtocolError:
    """The 400 for images the model cannot take, naming the image's field (``e`` may be
    Ray's wrapper of it: its attributes reach the cause)."""
    return ProtocolError(400, f"{e.field}: {e.problem}", e.field)


def _generation_endpoint(
    protocol: WireProtocol,
    backend: Backend,
    max_body_bytes: int,
    images: ImageOptions | None = None,
) -> Callable[[Request], Awaitable[Response]]:
    module = MODULES[protocol]

    async def endpoint(request: Request) -> Response:
        ctx: Any = _UNAUTHORIZED
        try:
            ctx = await backend.authorize(request)
            body = await read_json_body(request, max_body_bytes)
            with image_options(images):
                chat_request, opts = module.parse_request(body)
            if not opts.stream:
                completion = await backend.generate(ctx, chat_request, opts, body)
                return json_response(module.render_response(completion, opts))
            live = LiveCompletion()
            _start_stream(backend, live, ctx, chat_request, opts, body)
            await live.started()  # errors before the first event are answered as errors
        except (ProtocolError, ContextLengthError, ImageInputError) as e:
            if isinstance(e, ContextLengthError):
                err = context_error(protocol, e)
            elif isinstance(e, ImageInputError):
                err = image_error(e)
            else:
                err = e
            if ctx is not _UNAUTHORIZED and 400 <= err.status < 500:
                await backend.refused(ctx, err)
            return error_response(protocol, err)
        except Exception as e:
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response(protocol, _internal(e))
        return EventStream(module.render_stream(live, opts), live, request.scope["path"])

    return endpoint


def _internal(e: Exception) -> ProtocolError:
    return ProtocolError(500, f"internal error: {type(e).__name__}: {e}", error_type="api_error")


def _count_tokens_endpoint(
    backend: Backend, max_body_bytes: int, images: ImageOptions | None = None
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        ctx: Any = _UNAUTHORIZED
        try:
            ctx = await backend.authorize(request)
            body = await read_json_body(request, max_body_bytes)
            with image_options(images):
                chat_request = anthropic.parse_count_tokens(body)
            count = await backend.count_tokens(ctx, chat_request)
        except ImageInputError as e:
            return error_response("anthropic", image_error(e))
        except ProtocolError as err:
            if ctx is not _UNAUTHORIZED and 400 <= err.status < 500:
                await backend.refused(ctx, err)
            return error_response("anthropic", err)
        except Exception as e:
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response("anthropic", _internal(e))
        return JSONResponse({"input_tokens": count})

    return endpoint


def _models_endpoint(backend: Backend) -> Callable[[Request], Awaitable[Response]]:
    """``GET /v1/models`` and, with a ``model_id`` path parameter, ``GET /v1/models/{id}``:
    answered, errors included, in the form of the wire the caller speaks
    (:mod:`serve.protocol.models`)."""

    async def endpoint(request: Request) -> Response:
        protocol = wire_of(request.headers)
        try:
            ctx = await backend.authorize(request)
            cards = [
                m if isinstance(m, ModelCard) else ModelCard(m) for m in await backend.models(ctx)
            ]
            model_id = request.path_params.get("model_id")
            if model_id is None:
                return JSONResponse(model_list(protocol, cards))
            return JSONResponse(model_object(protocol, find_model(cards, model_id)))
        except ProtocolError as err:
            return error_response(protocol, err)
        except Exception as e:
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response(protocol, _internal(e))

    return endpoint


def protocol_routes(
    prefix: str,
    backend: Backend,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    images: ImageOptions | None = None,
) -> list[BaseRoute]:
    """The six routes under ``prefix`` (``""`` or e.g.
    ``"/episodes/{episode_id}/attempts/{attempt:int}"``; path parameters reach the backend
    through ``request.path_params``). ``images`` bounds the images requests may carry (None:
    :class:`~serve.protocol.images.ImageOptions`' defaults, no local files)."""
    prefix = prefix.rstrip("/")
    models = _models_endpoint(backend)
    return [
        Route(
            f"{prefix}/v1/chat/completions",
            _generation_endpoint("chat", backend, max_body_bytes, images),
            methods=["POST"],
        ),
        Route(
            f"{prefix}/v1/responses",
            _generation_endpoint("responses", backend, max_body_bytes, images),
            methods=["POST"],
        ),
        Route(
            f"{prefix}/v1/messages",
            _generation_endpoint("anthropic", backend, max_body_bytes, images),
            methods=["POST"],
        ),
        Route(
            f"{prefix}/v1/messages/count_tokens",
            _count_tokens_endpoint(backend, max_body_bytes, images),
            methods=["POST"],
        ),
        Route(f"{prefix}/v1/models", models, methods=["GET"]),
        Route(f"{prefix}/v1/models/{{model_id:path}}", models, methods=["GET"]),
    ]


def build_app(routes: list[BaseRoute]) -> Starlette:
    return Starlette(routes=routes)
