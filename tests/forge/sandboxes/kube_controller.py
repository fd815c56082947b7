"""Test-only stand-ins for a Kubernetes cluster: kmock (an emulated API server, PyPI) served from
a background thread with fault injection, and "kubelets" that make its pods real.

No real Kubernetes API server can be installed where these tests run; kmock's
``KubernetesEmulator`` stores objects and serves create/get/list/watch/patch/delete, but does
not filter by label or field selector, assign uids, or run anything. :class:`KMock` adds uids
and resource versions to created objects and injects faults (status codes with headers, a
commit-then-fail, a dropped connection, an empty watch). :class:`LocalKubelet` starts each new
pod's agent as a local process on a unique loopback IP (127.x.y.z) and writes the pod IP and
phase Running back; :class:`DockerKubelet` starts each pod as a container in the test dockerd
(host networking, the agent bound to a unique loopback IP, since that daemon runs with
``--bridge=none``) and does the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock

from forge.sandboxes.agent_boot import AGENT_DIR, agent_tree

RESOURCES = {
    "v1/pods": {"kind": "Pod", "singular": "pod", "namespaced": True},
    "v1/configmaps": {"kind": "ConfigMap", "singular": "configmap", "namespaced": True},
    "v1/serviceaccounts": {
        "kind": "ServiceAccount",
        "singular": "serviceaccount",
        "namespaced": True,
    },
    "networking.k8s.io/v1/networkpolicies": {
        "kind": "NetworkPolicy",
        "singular": "networkpolicy",
        "namespaced": True,
    },
    "coordination.k8s.io/v1/leases": {"kind": "Lease", "singular": "lease", "namespaced": True},
}


@dataclass
class Fault:
    """Answer requests matching ``method`` and the ``path`` regex (and having every key of
    ``params``) with ``status``/``headers``/``body``, ``times`` times; ``commit``: let the
    emulator perform it first (a response lost after the write); ``drop``: close the
    connection instead of answering."""

    method: str
    path: str
    status: int = 500
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    times: int = 1
    commit: bool = False
    drop: bool = False
    params: tuple[str, ...] = ()
    hits: int = 0

    def matches(self, method: str, path: str, params: dict[str, str]) -> bool:
        return (
            self.hits < self.times
            and method.upper() == self.method.upper()
            and re.fullmatch(self.path, path) is not None
            and all(p in params for p in self.params)
        )


@attrs.define(kw_only=True)
class FaultyEmulator(kmock.KubernetesEmulator):
    faults: list[Fault] = attrs.field(factory=list)
    log: list[tuple[str, str, dict[str, str], Any]] = attrs.field(factory=list)
    version: int = 0

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        method, path = str(request.method.value).upper(), request.url.path
        params = dict(request.params)
        self.log.append((method, path, params, request.data))
        fault = next((f for f in self.faults if f.matches(method, path, params)), None)
        if fault is not None:
            fault.hits += 1
            if fault.commit:
                self._stamp(request)
                await super()._handle(request)
            if fault.drop:
                raw = request._raw_request
                if raw is not None and raw.transport is not None:
                    raw.transport.close()
            if fault.status == 200 and fault.body is None:
                return aiohttp.web.Response(status=200, body=b"", headers=fault.headers)
            return aiohttp.web.json_response(
                fault.body or _status(fault.status), status=fault.status, headers=fault.headers
            )
        self._stamp(request)
        return await super()._handle(request)

    def _stamp(self, request: Any) -> None:
        """What a real API server adds on writes: a uid on create, a new resourceVersion."""
        data = request.data
        if not isinstance(data, dict) or request.method.value.upper() not in ("POST", "PATCH"):
            return
        self.version += 1
        meta = data.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.version)
        if request.method.value.upper() == "POST":
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def _status(code: int) -> dict[str, Any]:
    reasons = {
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
        409: "AlreadyExists",
        422: "Invalid",
    }
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reasons.get(code, "Unknown"),
        "message": f"injected {code}",
        "details": {},
    }


def invalid(field_path: str, message: str, kind: str = "pods") -> dict[str, Any]:
    """A 422 Status body as a real API server sends it."""
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": 422,
        "reason": "Invalid",
        "message": f"{kind} is invalid: {field_path}: {message}",
        "details": {
            "kind": kind,
            "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field_path}],
        },
    }


class KMock:
    """kmock's Kubernetes emulator on 127.0.0.1:<random>, its event loop on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self.emu: FaultyEmulator | None = None
        self.url = ""
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kmock", daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"kmock did not start: {self._error}")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._main())
        except BaseException as e:
            self._error = e
            self._ready.set()

    async def _main(self) -> None:
        self._stopped = asyncio.Event()
        async with FaultyEmulator() as emu, kmock.Server(emu) as server:
            for key, info in RESOURCES.items():
                emu.resources[key] = info
            self.emu, self.url = emu, str(server.url).rstrip("/")
            self._ready.set()
            await self._stopped.wait()

    def run(self, fn: Callable[[FaultyEmulator], Any]) -> Any:
        """``fn(emulator)`` on kmock's loop (its state is not thread-safe)."""

        async def go() -> Any:
            return fn(self.emu)  # type: ignore[arg-type]

        return asyncio.run_coroutine_threadsafe(go(), self.loop).result(30)

    def fault(self, method: str, path: str, **kw: Any) -> Fault:
        f = Fault(method, path, **kw)
        self.run(lambda emu: emu.faults.append(f))
        return f

    def requests(self, method: str | None = None, path: str = ".*") -> list[tuple]:
        return [
            r
            for r in self.run(lambda emu: list(emu.log))
            if (method is None or r[0] == method) and re.fullmatch(path, r[1])
        ]

    def objects(self, plural: str, namespace: str) -> dict[str, dict[str, Any]]:
        """Live objects of a resource ('v1/pods', ...) by name."""

        def get(emu: FaultyEmulator) -> dict[str, dict[str, Any]]:
            out = {}
            for (res, ns, name), obj in emu.objects.items():
                if (
                    ns == namespace
                    and not obj.deleted
                    and f"{res.group}/{res.version}/{res.plural}".lstrip("/") == plural
                ):
                    out[name] = dict(obj.raw)
            return out

        return self.run(get)

    def put(self, plural: str, namespace: str, name: str, obj: dict[str, Any]) -> None:
        def go(emu: FaultyEmulator) -> None:
            emu.objects[plural, namespace, name] = obj

        self.run(go)

    def client(self) -> Any:
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        cfg.retries = False
        return client.ApiClient(cfg)

    def close(self) -> None:
        if self._stopped is not None:
            self.loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(timeout=10)


class Kubelet:
    """Watches kmock's pods in a namespace and makes each new one "run": :meth:`start_pod`
    gives it an IP and starts its agent; the pod's status becomes Running with that IP.
    ``hold`` names pods to leave Pending; ``fail`` names pods to mark Failed."""

    def __init__(self, kube: KMock, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.api = kube.client()
        self.hold: Callable[[str], bool] = lambda name: False
        self.fail: Callable[[str], bool] = lambda name: False
        self.started: dict[str, Any] = {}
        self._ips = itertools.count(2)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="kubelet", daemon=True)
        self._thread.start()

    def next_ip(self) -> str:
        n = next(self._ips)
        return f"127.{100 + (n >> 16) % 100}.{(n >> 8) & 255}.{n & 255 or 1}"

    def _loop(self) -> None:
        import json

        from kubernetes import client, watch

        core = client.CoreV1Api(self.api)
        while not self._stop.is_set():
            w = watch.Watch()
            try:  # kmock replays every pod at the start of a watch; a LIST first catches deletes
                resp = core.list_namespaced_pod(self.namespace, _preload_content=False)
                self._sync(
                    {
                        p["metadata"]["name"]: p["metadata"].get("uid")
                        for p in json.loads(resp.data).get("items") or []
                    }
                )
                for ev in w.stream(
                    core.list_namespaced_pod, self.namespace, _request_timeout=(5, 2)
                ):
                    self._event(core, ev["type"], ev["raw_object"])
                    if self._stop.is_set():
                        break
            except Exception:
                time.sleep(0.05)
            finally:
                w.stop()

    def _sync(self, live: dict[str, str | None]) -> None:
        with self._lock:
            for name, (uid, handle) in list(self.started.items()):
                if live.get(name, "gone") != uid:
                    del self.started[name]
                    if handle is not None:
                        self.stop_pod(handle)

    def _event(self, core: Any, kind: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        uid = pod["metadata"].get("uid")
        with self._lock:
            old = self.started.get(name)
            if old is not None and (kind == "DELETED" or old[0] != uid):
                del self.started[name]
                if old[1] is not None:
                    self.stop_pod(old[1])
                old = None
            if kind == "DELETED" or old is not None or self._stop.is_set():
                return
            if (pod.get("status") or {}).get("phase") or self.hold(name):
                return
            if not (pod.get("spec") or {}).get("containers"):
                return  # a bare object a test planted
            if self.fail(name):
                status = {"phase": "Failed", "reason": "Injected", "message": "told to fail"}
                self.started[name] = (uid, None)
            else:
                ip = self.next_ip()
                self.started[name] = (uid, self.start_pod(pod, ip))
                status = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}
        with contextlib.suppress(Exception):
            core.patch_namespaced_pod_status(name, self.namespace, {"status": status})

    def start_pod(self, pod: dict[str, Any], ip: str) -> Any:
        raise NotImplementedError

    def stop_pod(self, handle: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()  # the thread ends at its next read timeout; it starts nothing more
        with self._lock:
            for _uid, handle in self.started.values():
                if handle is not None:
                    self.stop_pod(handle)
            self.started.clear()


def _rewrite(argv: list[str], ip: str, opts: dict[str, str]) -> list[str]:
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a == "--listen":
            out[i + 1] = f"{ip}:{out[i + 1].rsplit(':', 1)[1]}"
        elif a in opts:
            out[i + 1] = opts[a]
    return out


class LocalKubelet(Kubelet):
    """Runs each pod's agent as a local process (its argv and env from the pod spec, the agent
    tree from this checkout, workspace and home in a temp folder) on the pod's loopback IP."""

    def start_pod(self, pod: dict[str, Any], ip: str) -> Any:
        c = pod["spec"]["containers"][0]
        tmp = Path(tempfile.mkdtemp(prefix="kubelet-"))
        os.chmod(tmp, 0o755)  # as a container's root: the harness's user may traverse it
        for rel, data in agent_tree().items():
            p = tmp / "agent" / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        argv = _rewrite(
            c["command"], ip, {"--workspace": str(tmp / "ws"), "--home": str(tmp / "home")}
        )
        argv[0] = sys.executable
        i = argv.index("-c")
        argv[i + 1] = argv[i + 1].replace(repr(AGENT_DIR), repr(str(tmp / "agent")))
        env = {e["name"]: e["value"] for e in c.get("env") or []}
        env["PATH"] = os.environ.get("PATH", env.get("PATH", ""))
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return proc, tmp

    def stop_pod(self, handle: Any) -> None:
        proc, tmp = handle
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        shutil.rmtree(tmp, ignore_errors=True)


def _quantity(text: str) -> float:
    """A Kubernetes quantity ("1500m", "4096Mi", "2") as a number of base units."""
    units = {"m": 1e-3, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    for suffix, scale in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    return float(text)


class DockerKubelet(Kubelet):
    """Runs each pod as a container of the test dockerd: the pod's image, command, env,
    working dir, capabilities and cpu/memory limits. That daemon runs with ``--bridge=none``,
    so the container uses the host's network (test only: a real pod has its own) and its agent
    listens on the pod's unique loopback IP instead of 0.0.0.0."""

    def __init__(self, kube: KMock, namespace: str, docker_client: Any) -> None:
        self.docker = docker_client
        super().__init__(kube, namespace)

    def start_pod(self, pod: dict[str, Any], ip: str) -> Any:
        c = pod["spec"]["containers"][0]
        caps = (c.get("securityContext") or {}).get("capabilities") or {}
        limits = (c.get("resources") or {}).get("limits") or {}
        volumes = {v["name"]: v.get("emptyDir") for v in pod["spec"].get("volumes") or []}
        tmpfs = {}  # a memory-backed emptyDir is a tmpfs of its sizeLimit, as a kubelet makes it
        for m in c.get("volumeMounts") or []:
            empty = volumes.get(m["name"])
            assert empty is not None and empty.get("medium") == "Memory", m
            size = empty.get("sizeLimit")
            opts = "rw,exec,nosuid,nodev" + (f",size={_quantity(size):.0f}" if size else "")
            tmpfs[m["mountPath"]] = opts
        host = self.docker.api.create_host_config(
            tmpfs=tmpfs,
            read_only=bool((c.get("securityContext") or {}).get("readOnlyRootFilesystem")),
            network_mode="host",
            cap_drop=caps.get("drop"),
            cap_add=caps.get("add"),
            security_opt=["no-new-privileges"],
            nano_cpus=int(_quantity(limits.get("cpu", "1")) * 1e9),
            mem_limit=int(_quantity(limits.get("memory", "512Mi"))),
            init=True,
        )
        meta = pod["metadata"]
        container = self.docker.api.create_container(
            c["image"],
            command=_rewrite(c["command"], ip, {}),
            environment={e["name"]: e["value"] for e in c.get("env") or []},
            working_dir=c.get("workingDir"),
            labels={"openforge.kubelet": meta["name"], "openforge.kubelet.ns": self.namespace},
            name=f"kpod-{meta['name']}-{(meta.get('uid') or 'x')[:8]}",
            host_config=host,
        )
        self.docker.api.start(container["Id"])
        return container["Id"]

    def stop_pod(self, handle: Any) -> None:
        with contextlib.suppress(Exception):
            self.docker.api.remove_container(handle, force=True)


@contextlib.contextmanager
def emulated_cluster(docker_host: str, namespace: str) -> Iterator[tuple[KMock, DockerKubelet]]:
    """kmock plus this controller starting its pods in ``namespace`` as containers of the
    dockerd at ``docker_host``; afterwards the backend's heartbeats stop and every container
    the controller started is removed, whatever happened."""
    import docker

    from forge.sandboxes import kubernetes as kube_backend

    kube = KMock()
    dc = docker.DockerClient(base_url=docker_host, timeout=120)
    kubelet = DockerKubelet(kube, namespace, dc)
    try:
        yield kube, kubelet
    finally:
        kube_backend.shutdown()
        kubelet.close()
        for c in dc.api.containers(all=True, filters={"label": "openforge.kubelet"}):
            with contextlib.suppress(Exception):
                dc.api.remove_container(c["Id"], force=True)
        dc.close()
        kube.close()
