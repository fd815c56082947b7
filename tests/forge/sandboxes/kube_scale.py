"""A kmock API server for scale runs (``scripts/bench/k8s_scale.py``), in its own process.

:class:`ScaleEmulator` is the tests' ``FaultyEmulator`` plus what a real API server has and a
scale run needs: a latency on every call (jittered +-50%), a server-side rate limit (a token
bucket of ``qps_limit`` a second; beyond it 429 with ``Retry-After: 1``, as API Priority and
Fairness answers; watches exempt), watches that honour ``fieldSelector=metadata.name=`` and
``resourceVersion`` and end after ``timeoutSeconds``, and object look-ups by key. kmock's own
serving scans every object ever stored for each GET/PATCH/DELETE and wakes every open watch on
every event (both O(N) per request: O(N^2) for N pods), which would make a run measure the
emulator instead of the backend. Calls from the stand-in kubelet (its User-Agent) are exempt
from latency and limit, and not counted.

:func:`start` runs it, with a :class:`StandinKubelet`, in a forked process so its CPU time is
its own (``getrusage``), apart from the backend's processes; :class:`EmulatorProcess` talks to
it over a pipe (stats, reset, stop).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import heapq
import multiprocessing
import multiprocessing.connection
import random
import resource
import threading
import time
from typing import Any

import aiohttp.web
import attrs
import kmock
import psutil

from tests.forge.sandboxes.kube_controller import RESOURCES, FaultyEmulator, KMock, Kubelet

KUBELET_UA = "standin-kubelet"


def resource_of(path: str) -> str:
    """'pod' for pods (and their status), else the resource's plural, from a request path."""
    parts = path.strip("/").split("/")
    if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
        kind = parts[parts.index("namespaces") + 2]
    else:
        kind = parts[-1]
    return "pod" if kind == "pods" else kind


def _rv(obj: dict[str, Any] | None) -> int:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


_serving: contextvars.ContextVar[Any] = contextvars.ContextVar("serving", default=None)


class _Serving(list):
    """kmock's request history as its reactions see it: only the request being served in this
    task. kmock matches each request against its reactions by walking every request it ever
    served (O(N) a request, O(N^2) a run), so a long run would measure that walk."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def append(self, request: Any) -> None:
        self.count += 1

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Any:
        request = _serving.get()
        return iter(() if request is None else (request,))


@attrs.define(kw_only=True)
class ScaleEmulator(FaultyEmulator):
    """kmock with latency, a server-side token bucket and per-name watches; counts calls."""

    latency_s: float = 0.01
    qps_limit: float = 50.0
    stats: dict[str, Any] = attrs.field(factory=dict)
    _tokens: float = 0.0
    _t: float = 0.0
    _watchers: dict[tuple[str, str], set[asyncio.Queue]] = attrs.field(factory=dict)
    _dispatching: set[Any] = attrs.field(factory=set)
    _tasks: list[asyncio.Task] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._requests = _Serving()

    def _bump(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        _serving.set(request)
        ua = str((request.headers or {}).get("User-Agent", ""))
        watching = dict(request.params).get("watch") in ("true", "1", "True")
        method, path = str(request.method.value).upper(), request.url.path
        s = self.stats
        if ua == KUBELET_UA:
            self._bump("kubelet")
            return await super()._handle(request)
        s.setdefault("by_ua", collections.Counter())[ua] += 1
        raw = request._raw_request
        if raw is not None and raw.transport is not None:
            conns = s.setdefault("conns", set())
            if id(raw.transport) not in conns:
                conns.add(id(raw.transport))
                first = "WATCH" if watching else method
                s.setdefault("conn_first", collections.Counter())[(first, resource_of(path))] += 1
        s.setdefault("per_s", collections.Counter())[int(time.monotonic())] += 1
        if not watching:
            now = time.monotonic()
            if not self._t:
                self._t, self._tokens = now, self.qps_limit
            self._tokens = min(self.qps_limit, self._tokens + (now - self._t) * self.qps_limit)
            self._t = now
            if self._tokens < 1.0:
                self._bump("429")
                body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429,
                        "reason": "TooManyRequests", "message": "too many requests"}  # fmt: skip
                return aiohttp.web.json_response(body, status=429, headers={"Retry-After": "1"})
            self._tokens -= 1.0
        await asyncio.sleep(self.latency_s * (0.5 + random.random()))
        verb = "WATCH" if watching else method
        s.setdefault("calls", collections.Counter())[(verb, resource_of(path))] += 1
        resp = await super()._handle(request)
        s.setdefault("status", collections.Counter())[(verb, resp.status)] += 1
        return resp

    # -- look-ups by key (kmock scans every object ever stored, deleted ones too) ------------

    def _get(self, res: Any, namespace: str | None, name: str | None) -> Any:
        obj = self._objects._objects.get((res, namespace, name))
        if obj is None or obj.deleted:
            raise kmock.KubernetesObjectNotFoundError()
        return obj

    async def _serve_fetch(self, request: Any) -> Any:
        return self._get(request.resource, request.namespace, request.name).raw

    async def _serve_create(self, request: Any) -> Any:
        meta = request.data.get("metadata", {})
        ns = request.namespace or meta.get("namespace")
        return self._get(request.resource, ns, request.name or meta.get("name")).raw

    async def _serve_update(self, request: Any) -> Any:
        obj = self._objects._objects.get((request.resource, request.namespace, request.name))
        if obj is None:
            raise kmock.KubernetesObjectNotFoundError()
        return obj.last.raw

    _serve_delete = _serve_update

    # -- watches of one object -----------------------------------------------------------

    async def _dispatch(self, res: Any) -> None:
        """One reader of kmock's event bus for ``res``, handing each event to the watches of
        that object only (kmock wakes every watch for every event)."""
        if res in self._dispatching:
            return
        self._dispatching.add(res)
        bus = self._buses[res]
        marker = await bus.mark()

        async def run() -> None:
            async for ev in bus.stream(since=marker):
                meta = (ev.get("object") or {}).get("metadata") or {}
                for q in self._watchers.get((meta.get("namespace"), meta.get("name")), ()):
                    q.put_nowait(ev)

        self._tasks.append(asyncio.get_running_loop().create_task(run()))

    async def _serve_watch(self, request: Any) -> Any:
        params = dict(request.params)
        fs = str(params.get("fieldSelector", ""))
        if not fs.startswith("metadata.name="):
            async for ev in super()._serve_watch(request):
                yield ev
            return
        yield b""
        await self._dispatch(request.resource)
        key, q = (request.namespace, fs.split("=", 1)[1]), asyncio.Queue()
        self._watchers.setdefault(key, set()).add(q)
        self._bump("watch_open")
        self.stats["watch_peak"] = max(self.stats.get("watch_peak", 0), self.stats["watch_open"])
        loop = asyncio.get_running_loop()
        end = loop.time() + float(params.get("timeoutSeconds") or 1800)
        try:
            since = int(params.get("resourceVersion") or 0)
            obj = self._objects._objects.get((request.resource, *key))
            if obj is not None and not obj.deleted and _rv(obj.raw) > since:
                yield {"type": "MODIFIED" if since else "ADDED", "object": obj.raw}
            while (left := end - loop.time()) > 0:
                try:
                    ev = await asyncio.wait_for(q.get(), left)
                except TimeoutError:
                    return
                if _rv(ev.get("object")) > since or ev.get("type") == "DELETED":
                    self._bump("watch_events")
                    yield ev
        finally:
            self._watchers[key].discard(q)
            if not self._watchers[key]:
                del self._watchers[key]
            self._bump("watch_open", -1)


class ScaleKMock(KMock):
    """The tests' KMock serving a :class:`ScaleEmulator`."""

    def __init__(self, latency_s: float, qps_limit: float) -> None:
        self.latency_s, self.qps_limit = latency_s, qps_limit
        super().__init__()

    async def _main(self) -> None:
        self._stopped = asyncio.Event()
        emu = ScaleEmulator(latency_s=self.latency_s, qps_limit=self.qps_limit)
        async with emu, kmock.Server(emu) as server:
            for key, info in RESOURCES.items():
                emu.resources[key] = info
            self.emu, self.url = emu, str(server.url).rstrip("/")
            self._ready.set()
            await self._stopped.wait()

    def stats(self) -> dict[str, Any]:
        def get(emu: Any) -> dict[str, Any]:
            out = {k: (v.copy() if hasattr(v, "copy") else v) for k, v in emu.stats.items()}
            out["conns"] = len(emu.stats.get("conns", ()))
            return out

        return self.run(get)

    def reset(self) -> None:
        self.run(lambda emu: emu.stats.clear())


class StandinKubelet(Kubelet):
    """Marks each new pod Running with one of ``ips`` (real agents listen there), ``start_s``
    (jittered +-50%) after it was created, as a node takes to start a pod; no process."""

    def __init__(self, kube: KMock, namespace: str, ips: list[str], start_s: float = 0.0) -> None:
        self.ips, self._n, self.start_s = ips, 0, start_s
        self._due: list[tuple[float, int, Any, str, dict[str, Any]]] = []
        self._wake = threading.Condition()
        super().__init__(kube, namespace)
        threading.Thread(target=self._starter, name="kubelet-start", daemon=True).start()

    def _event(self, core: Any, kind: str, pod: dict[str, Any]) -> None:
        if kind != "ADDED" or not self.start_s or (pod.get("status") or {}).get("phase"):
            return super()._event(core, kind, pod)
        due = time.monotonic() + self.start_s * (0.5 + random.random())
        with self._wake:
            heapq.heappush(self._due, (due, id(pod), core, kind, pod))
            self._wake.notify()

    def _starter(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                wait = self._due[0][0] - time.monotonic() if self._due else 1.0
                if wait > 0:
                    self._wake.wait(min(wait, 1.0))
                    continue
                _, _, core, kind, pod = heapq.heappop(self._due)
            super()._event(core, kind, pod)

    def _loop(self) -> None:
        self.api.user_agent = KUBELET_UA
        super()._loop()

    def next_ip(self) -> str:
        self._n += 1
        return self.ips[self._n % len(self.ips)]

    def start_pod(self, pod: dict[str, Any], ip: str) -> Any:
        return None

    def stop_pod(self, handle: Any) -> None:
        pass


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _serve(conn: Any, latency_s: float, qps_limit: float, namespace: str, ips: list[str],
           start_s: float) -> None:  # fmt: skip
    kube = ScaleKMock(latency_s, qps_limit)
    kubelet = StandinKubelet(kube, namespace, ips, start_s)
    conn.send(kube.url)

    def cpu() -> dict[str, float]:
        """CPU seconds: the process, kmock's event loop thread, the stand-in kubelet's."""
        ids = {kube._thread.native_id: "kmock", kubelet._thread.native_id: "kubelet"}
        out = {"process": _cpu_s()}
        for t in psutil.Process().threads():
            if t.id in ids:
                out[ids[t.id]] = t.user_time + t.system_time
        return out

    while True:
        cmd = conn.recv()
        if cmd == "stats":
            conn.send(kube.stats())
        elif cmd == "reset":
            kube.reset()
            conn.send(cpu())
        elif cmd == "stop":
            used = cpu()
            kubelet.close()
            kube.close()
            conn.send(used)
            return


class EmulatorProcess:
    """:class:`ScaleKMock` and a :class:`StandinKubelet` for ``namespace`` (pods start after
    ``start_s``) in a forked process (start it before the caller starts threads); ``url`` is
    its address."""

    def __init__(self, latency_s: float, qps_limit: float, namespace: str, ips: list[str],
                 start_s: float = 0.0) -> None:  # fmt: skip
        ctx = multiprocessing.get_context("fork")
        self._conn, child = ctx.Pipe()
        args = (child, latency_s, qps_limit, namespace, ips, start_s)
        self.proc = ctx.Process(target=_serve, args=args, daemon=True)
        self.proc.start()
        if not self._conn.poll(60):
            raise RuntimeError("the kmock process did not start")
        self.url: str = self._conn.recv()

    def _ask(self, cmd: str) -> Any:
        self._conn.send(cmd)
        if not self._conn.poll(120):
            raise RuntimeError(f"the kmock process did not answer {cmd!r}")
        return self._conn.recv()

    def stats(self) -> dict[str, Any]:
        return self._ask("stats")

    def reset(self) -> dict[str, float]:
        """Clear the counters; CPU seconds so far (the process, kmock, the kubelet)."""
        return self._ask("reset")

    def stop(self) -> dict[str, float]:
        """Stop it; CPU seconds in all (the process, kmock's loop, the kubelet)."""
        try:
            return self._ask("stop")
        finally:
            self.proc.join(10)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(5)
