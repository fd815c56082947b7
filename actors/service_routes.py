"""The HarnessPod's service API: a task's services (``tasks.services``) at the attempt's URL.

Under ``/episodes/{episode_id}/attempts/{attempt}``, with the attempt's key (as its model calls)::

    GET  .../services                   the services offered and their operations (a catalog)
    POST .../services/{service}/{op}    run one operation (JSON arguments -> JSON result)
    POST .../mcp/{service}              MCP over streamable HTTP (JSON-RPC in, JSON out)
    GET|POST .../page/{port}/{path}     the task's page application (``tasks.webapps.hosted``),
                                        through the sandbox's relay on 127.0.0.1:{port}

The state stays here, in the attempt's :class:`tasks.services.World` (and its page application):
a sandbox changes it only through these operations, and the verifier reads it after the
episode. Every service call is recorded with how it came (``X-Forge-Via``: tool, mcp, cli) and
the model turn it followed. A refusal is a 400 naming the field; the attempt's own errors (404,
410, 401) are the proxy's.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from actors.pod_proxy import RecordingProxy
from serve.http_app import read_json_body
from serve.protocol.common import ProtocolError
from tasks.services import ServiceError, World
from tasks.services.client import mcp_reply

MAX_BODY_BYTES = 1 << 20
NO_STORE = {"Cache-Control": "no-store"}


async def read_body(request: Request, limit: int) -> bytes:
    """The request's body, at most ``limit`` bytes (ProtocolError 413 beyond)."""
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise ProtocolError(413, f"the body is at most {limit} bytes")
    return bytes(data)


VIA = ("tool", "mcp", "cli", "api")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message}}, status_code=status)


async def _world(proxy: RecordingProxy, request: Request) -> tuple[World, int]:
    """The attempt's services and how many model turns it has had (ProtocolError if none)."""
    call = await proxy.authorize(request)
    world = call.state.world
    if world is None:
        raise ProtocolError(404, "this attempt's task offers no services")
    return world, len(call.state.turns)


def service_routes(prefix: str, proxy: RecordingProxy) -> list[BaseRoute]:
    """The routes under ``prefix``; ``proxy`` authorises each request for its attempt."""

    async def catalog(request: Request) -> Response:
        try:
            world, _ = await _world(proxy, request)
        except ProtocolError as e:
            return _error(e.status, e.message)
        return JSONResponse(world.catalog())

    async def operation(request: Request) -> Response:
        try:
            world, turn = await _world(proxy, request)
            args = await read_json_body(request, MAX_BODY_BYTES)
        except ProtocolError as e:
            return _error(e.status, e.message)
        via = request.headers.get("x-forge-via", "api")
        via = via if via in VIA else "api"
        service, op = request.path_params["service"], request.path_params["op"]
        try:
            # off the event loop: a task's own HTTP service answers over the network
            return JSONResponse(await asyncio.to_thread(world.call, service, op, args, via, turn))
        except ServiceError as e:
            return _error(400, str(e))

    async def mcp(request: Request) -> Response:
        if request.method != "POST":  # no server-initiated stream
            return Response(status_code=405, headers={"Allow": "POST"})
        try:
            world, turn = await _world(proxy, request)
            message = await read_json_body(request, MAX_BODY_BYTES)
        except ProtocolError as e:
            return _error(e.status, e.message)
        service = request.path_params["service"]
        entries = {e["service"]: e for e in world.catalog()}
        if service not in entries:
            return _error(404, f"service: {service!r} is not offered here")
        reply = await asyncio.to_thread(
            mcp_reply,
            message,
            service,
            lambda: entries[service],
            lambda op, args: world.call(service, op, args, "mcp", turn),
        )
        if reply is None:  # a notification
            return Response(status_code=202)
        return JSONResponse(reply)

    async def page(request: Request) -> Response:
        try:
            call = await proxy.authorize(request)
            body = b""
            if request.method == "POST":
                body = await read_body(request, MAX_BODY_BYTES)
        except ProtocolError as e:
            return _error(e.status, e.message)
        app = call.state.pages.get(request.path_params["port"])
        if app is None:
            return _error(404, "this attempt's task has no page application on that port")
        route = "/" + request.path_params["path"]
        if request.method == "POST":
            code, data, ctype = await asyncio.to_thread(app.post, route, body)
        else:
            code, data, ctype = await asyncio.to_thread(app.get, route)
        return Response(data, status_code=code, media_type=ctype, headers=NO_STORE)

    return [
        Route(f"{prefix}/page/{{port:int}}/{{path:path}}", page, methods=["GET", "POST"]),
        Route(f"{prefix}/services", catalog, methods=["GET"]),
        Route(f"{prefix}/services/{{service}}/{{op}}", operation, methods=["POST"]),
        Route(f"{prefix}/mcp/{{service}}", mcp, methods=["GET", "POST", "DELETE"]),
    ]
