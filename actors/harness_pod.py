"""HarnessPod: one sandbox's owner and its recording proxy.

A plain class; wrap it with ``ray.remote(HarnessPod)`` where it is created (it is an async
actor: its event loop serves the proxy while a harness runs in a worker thread).

The proxy serves OpenAI chat completions, the Responses API and Anthropic messages under one
base URL per attempt, ``/episodes/{episode_id}/attempts/{attempt}/v1``, with a per-attempt
bearer key (DESIGN.md decision 1). Another attempt's key gets 401, an unknown attempt 404, an
ended attempt 410. Every call is forwarded to the Policy through its Serve handle and recorded as
a :class:`~forge.types.Turn`, token for token (:mod:`actors.pod_proxy`); images in a request are
recorded by reference (``{"sha256", "mime"}`` where their data stood, and ``Turn.images``), and
their bytes travel with the Episode (``Episode.images``) to be written once beside the episode
records. The models API there (``GET .../v1/models`` and ``.../v1/models/{id}``) reports
``context_length``, the Policy's context: what whoever creates the pod passes, else what the
Policy says at the first such call.

It listens on a Unix socket that isolated sandboxes reach through their bridge (decision 8) and
on TCP at ``proxy.host`` (127.0.0.1 unless configured; the kubernetes backend's pods need
0.0.0.0 or the pod IP, and then the address handed to sandboxes is ``$POD_IP``, else this
node's IP). A task with services (``apps``) gets them at the same URL and key
(:mod:`actors.service_routes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import secrets
import socket
import tempfile
import uuid
from collections import OrderedDict
from typing import Any

import ray
import uvicorn

from actors.attempt_state import AttemptState
from actors.listen import listen_tcp
from actors.pod_proxy import RecordingProxy
from actors.service_routes import service_routes
from forge.config import ProxyConfig, SandboxConfig
from forge.episode import run_attempt
from forge.sandboxes import disk_pool, netns, warm_pool
from forge.sandboxes.egress import EGRESS_PORT, EgressProxy
from forge.types import Episode, ImagePart, Turn
from serve.coalesce import CoalescingHTTP
from serve.http_app import build_app, protocol_routes
from serve.protocol.images import ImageOptions
from tasks.services import World

log = logging.getLogger(__name__)
ATTEMPT_PREFIX = "/episodes/{episode_id}/attempts/{attempt:int}"
ENDED_MEMORY = 10_000  # ended attempts remembered for 410 answers


def advertised_host(listen: str) -> str:
    """The address others reach a proxy bound to ``listen`` at: itself, or for a wildcard
    (0.0.0.0, ::) ``$POD_IP`` (the Kubernetes downward API), else this node's IP."""
    ip = listen
    if listen in ("0.0.0.0", "::", ""):
        ip = os.environ.get("POD_IP", "")
        if not ip:
            import ray

            ip = ray.util.get_node_ip_address()
    return f"[{ip}]" if ":" in ip and not ip.startswith("[") else ip


class HarnessPod:
    def __init__(
        self,
        policy: Any,
        pod_id: str = "pod-0",
        run: str = "default",
        model: str = "tiny",
        proxy: ProxyConfig | dict[str, Any] | None = None,
        sandbox: SandboxConfig | dict[str, Any] | None = None,
        host: str | None = None,
        context_length: int | None = None,
    ) -> None:
        self.policy = policy
        self.pod_id = pod_id
        self.run = run
        self.model = model
        self.proxy_config = ProxyConfig.model_validate(proxy or {})
        self.sandbox_config = SandboxConfig.model_validate(sandbox or {})
        self.listen_host = host or self.proxy_config.host  # where the proxy binds
        self.host = advertised_host(self.listen_host)  # where sandboxes and URLs reach it
        self.port: int | None = None
        self.socket_path: str | None = None
        self._attempts: dict[tuple[str, int], AttemptState] = {}
        self._ended: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._closed_images: dict[tuple[str, int], dict[str, ImagePart]] = {}
        self._servers: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []
        self.sandboxes: set[Any] = set()  # live sandboxes, destroyed on stop
        self.egress = EgressProxy()  # the way out of a phase whose network allows one
        self.egress_socket: str | None = None
        self.egress_port: int | None = None  # kubernetes: its TCP port, beside the proxy's
        self.backend = RecordingProxy(
            policy, model, self.proxy_config, self._attempts, self._ended, context_length
        )  # what the proxy's routes serve from (context_length: the models API's)

    # -- the proxy server -------------------------------------------------------------------

    def proxy_ports(self) -> tuple[int, int]:
        """Where the proxy may listen: on the kubernetes backend ``sandbox.kubernetes.
        proxy_ports``, the ports the run's NetworkPolicy opens to sandbox pods (and no other
        port of this pod); elsewhere any free port."""
        if self.sandbox_config.backend == "kubernetes":
            return self.sandbox_config.kubernetes.proxy_ports
        return (0, 0)

    async def start(self, port: int = 0) -> str:
        """Start serving on ``host:port`` (0: the first free port of :meth:`proxy_ports`) and
        on a private Unix socket."""
        if self._servers:
            return self.address()
        if self.policy is not None:  # its handle's router on this loop, before any call waits
            self.backend.calls  # noqa: B018
        images = ImageOptions(max_bytes=self.proxy_config.max_image_bytes)
        limit = self.proxy_config.max_body_bytes
        routes = protocol_routes(ATTEMPT_PREFIX, self.backend, limit, images)
        routes += service_routes(ATTEMPT_PREFIX, self.backend)
        app = build_app(routes)
        ports = (port, port) if port else self.proxy_ports()
        tcp = listen_tcp(self.listen_host, ports, "sandbox.kubernetes.proxy_ports")
        self.socket_path = os.path.join(tempfile.mkdtemp(prefix="forge-pod-"), "proxy.sock")
        # Two servers on one loop: the TCP one on the socket bound above (made with
        # IPPROTO_TCP, so its connections keep TCP_NODELAY), the Unix one bound by uvicorn.
        listen: list[tuple[dict[str, Any], list[socket.socket] | None]] = [
            ({}, [tcp]),
            ({"uds": self.socket_path}, None),
        ]
        self._servers = []
        for where, sockets in listen:
            config = uvicorn.Config(
                app, http=CoalescingHTTP, proxy_headers=False, log_level="warning",
                access_log=False, lifespan="off", **where,
            )  # fmt: skip
            server = uvicorn.Server(config)
            task = asyncio.create_task(server.serve(sockets=sockets))
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
            self._servers.append((server, task))
        self.port = tcp.getsockname()[1]
        os.chmod(self.socket_path, 0o666)
        kube = self.sandbox_config.backend == "kubernetes"  # pods reach it as the proxy's
        self.egress_socket, self.egress_port = await self.egress.serve(
            os.path.dirname(self.socket_path),
            listen_tcp(self.listen_host, self.proxy_ports(), "sandbox.kubernetes.proxy_ports")
            if kube
            else None,
        )
        loop = asyncio.get_running_loop()  # sandboxes' listeners served here, not relayed
        netns.serve_here(self.socket_path, netns.serve_on_loop(loop, self._serve_proxy))
        netns.serve_here(self.egress_socket, netns.serve_on_loop(loop, self.egress.serve_on))
        log.info("pod %s proxy on %s and %s", self.pod_id, self.address(), self.socket_path)
        if ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None:
            # A pod's own process (asked only where Ray is up: asking starts a cluster). What
            # it holds now lives as long as the pod: out of the collector's scans, which a
            # proxied call's garbage triggers every few calls (Serve does the same in replicas).
            gc.collect()
            gc.freeze()
        return self.address()

    def address(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def _serve_proxy(self, listener: socket.socket) -> asyncio.AbstractServer:
        """Serve the proxy on ``listener`` too, a sandbox's own (bound in its network namespace:
        :func:`forge.sandboxes.netns.serve_here`), as the Unix socket's server serves it."""
        server = self._servers[-1][0]  # the Unix socket's
        config = server.config
        protocol = functools.partial(
            config.http_protocol_class,
            config=config,
            server_state=server.server_state,
            app_state=server.lifespan.state,
        )
        loop = asyncio.get_running_loop()
        return await loop.create_server(protocol, sock=listener, backlog=config.backlog)

    async def stop(self) -> None:
        """Destroy live sandboxes (killing their processes) and those made ahead for this pod's
        attempts (``sandbox.warm_pool``; local disks made ahead, finishing their releases),
        then stop serving."""
        for path in (self.socket_path, self.egress_socket):
            if path:
                netns.serve_here(path, None)
        for sandbox in list(self.sandboxes):
            await asyncio.to_thread(sandbox.destroy)
        await asyncio.to_thread(
            warm_pool.shutdown,
            {"run": self.run, "pod": self.pod_id},
            warm_pool.longest_create_s(self.sandbox_config),  # one being made, destroyed too
        )
        await asyncio.to_thread(disk_pool.drain)
        for server, task in self._servers:
            server.should_exit = True
            await task
        self._servers = []
        await self.egress.stop()
        if self.socket_path:
            with contextlib.suppress(OSError):
                os.remove(self.socket_path)
                os.rmdir(os.path.dirname(self.socket_path))

    def ready(self) -> str:
        return self.pod_id

    # -- attempts -----------------------------------------------------------------------------

    def open_attempt(
        self,
        episode_id: str,
        attempt: int,
        script: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        apps: dict[str, Any] | None = None,
        max_turns: int | None = None,
        pages: dict[int, Any] | None = None,
    ) -> dict[str, str]:
        """Register an attempt (with its task's services, ``apps``, if any, and its turn limit,
        ``max_turns``: the call after that many answers gets 429, and its page application,
        ``pages``, by port); returns its base URL path, full URL and bearer key."""
        ident = (episode_id, attempt)
        if ident in self._attempts or ident in self._ended:
            raise ValueError(f"attempt {attempt} of episode {episode_id} already exists")
        key = "forge-" + secrets.token_urlsafe(24)
        self._attempts[ident] = AttemptState(
            episode_id, attempt, key, script, max_tokens, temperature,
            world=World(apps) if apps else None, max_turns=max_turns, pages=dict(pages or {}),
        )  # fmt: skip
        path = f"/episodes/{episode_id}/attempts/{attempt}"
        return {"path": path, "base_url": f"{self.address()}{path}/v1", "api_key": key}

    def close_attempt(self, episode_id: str, attempt: int) -> AttemptState:
        """End an attempt: later calls with its URL get 410. Returns what was recorded."""
        ident = (episode_id, attempt)
        state = self._attempts.pop(ident)
        state.waiting_at_close = state.in_policy > 0
        state.settle_deliveries()
        if state.images:  # handed to the Episode by run_episode
            self._closed_images[ident] = state.images
        self._ended[ident] = None
        while len(self._ended) > ENDED_MEMORY:
            self._closed_images.pop(self._ended.popitem(last=False)[0], None)
        return state

    def egress_address(self) -> str:
        """Where sandboxes reach the egress proxy: kubernetes, this pod's TCP port (one of
        :meth:`proxy_ports`, which the NetworkPolicy opens); else the relay inside them."""
        port = self.egress_port
        return f"{self.host}:{port}" if port is not None else f"127.0.0.1:{EGRESS_PORT}"

    def turns(self, episode_id: str, attempt: int) -> list[Turn]:
        return list(self._attempts[(episode_id, attempt)].turns)

    def attempt_state(self, episode_id: str, attempt: int) -> AttemptState:
        """The live record of an open attempt (in this process: run_attempt's clock reads it)."""
        return self._attempts[(episode_id, attempt)]

    # -- episodes -----------------------------------------------------------------------------

    async def run(self, spec: dict[str, Any]) -> Episode:
        """:meth:`run_episode` with its arguments in one mapping: the Scheduler's call (one
        argument is about half the cost of six to submit, at a thousand attempts a second)."""
        return await self.run_episode(**spec)

    async def run_episode(
        self,
        task: Any,
        harness: str = "react",
        attempt: int = 0,
        episode_id: str | None = None,
        harness_options: dict[str, Any] | None = None,
        temperature: float | None = None,
        attempt_timeout_s: float | None = None,
    ) -> Episode:
        """Play one attempt of ``task`` with ``harness`` in a fresh sandbox; return the Episode.
        ``attempt_timeout_s``: the caller's bound on the whole attempt (the Scheduler's)."""
        if not self._servers:
            await self.start()
        episode_id = episode_id or uuid.uuid4().hex[:16]
        episode = await run_attempt(
            self,
            task,
            harness,
            attempt=attempt,
            episode_id=episode_id,
            harness_options=harness_options or {},
            temperature=temperature,
            attempt_timeout_s=attempt_timeout_s,
        )
        # the pixels of the turns' images travel with the Episode (not in its JSON line)
        episode.images = self._closed_images.pop((episode_id, attempt), {})
        return episode
