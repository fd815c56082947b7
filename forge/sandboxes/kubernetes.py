"""KubernetesSandbox: one pod per attempt, driven through the sandbox agent on the pod's IP.

Orchard Env's design: the API server is only asked to create, watch/get and delete pods; every
exec and file transfer goes straight to the sandbox agent (:mod:`forge.sandboxes.agent`) at
``http://<pod IP>:<agent_port>``, so the control plane is not the bottleneck at a thousand
sandboxes. The agent is the pod's command (``python3 -I`` from ``/opt/forge/agent``, where
``forge image build`` bakes it into ``openforge/base`` and every harness image), listening on
``0.0.0.0:<agent_port>``.

The agent's token (random, per sandbox) travels in the pod spec, as ``FORGE_AGENT_TOKEN``, not
in a Secret: one API write per sandbox instead of three (create Secret, create pod, delete
Secret), no Secret permissions for the run, and nothing to leak when a pod dies. Who can read
pod specs in the namespace can read it, so the namespace is the run's own (its Role is in
:func:`~forge.sandboxes.kube_manifests.cluster_manifests`), and the NetworkPolicy admits
connections to the agent port only from the HarnessPods anyway. The token is never logged, and
is scrubbed from every error raised here.

Pods (see :mod:`~forge.sandboxes.kube_manifests`) carry the run's labels, an owner reference to
the run's ConfigMap, ``activeDeadlineSeconds``, requests = limits (cpu, memory, ephemeral
storage), a deterministic name (a hash of run, HarnessPod, episode, attempt and role), no
service account token, a service account bound to nothing, and a locked-down securityContext.
Creation takes a token from a process-wide bucket (``kube_qps``/``kube_burst``, jittered), and
is retried on 429/5xx/connection errors (:mod:`~forge.sandboxes.kube_reconcile`); a 409 for
our own earlier POST (same nonce annotation) adopts the pod, one left by an earlier try of the
same attempt is deleted and created again, anyone else's is left alone with an error. A pod
still pending after ``kube_pod_start_timeout_s`` is deleted and :class:`PodStartError` raised
(an infrastructure failure: the attempt is retried in a fresh sandbox). Sandboxes reach the
attempt's proxy at ``SandboxSpec.proxy_tcp`` directly (the HarnessPod must listen on its pod
IP); the NetworkPolicy allows nothing else.

Tested against kmock, an emulated API server (no real Kubernetes API server can be installed
where this was written); see tests/forge/sandboxes/test_kubernetes*.py.
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import socket
import threading
import time
import weakref
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import urllib3
from kubernetes import client, watch
from kubernetes import config as kconfig
from kubernetes.client.exceptions import ApiException

from forge.config import SandboxConfig
from forge.sandboxes import agent_client as ac
from forge.sandboxes import kube_manifests as km
from forge.sandboxes import kube_reconcile as kr
from forge.sandboxes.base import ExecResult, SandboxSpec
from forge.sandboxes.bwrap import IsolationUnavailable
from forge.sandboxes.kube_reconcile import KubeError, RetryPolicy, call, call_unless, delete_pod
from forge.sandboxes.local import SandboxExpired

log = logging.getLogger(__name__)
NONCE = f"{km.LABEL}.nonce"  # annotation: which create() made the pod (not a secret)
BASE_ENV = {"PATH": ac.DEFAULT_PATH, "HOME": ac.HOME, "LANG": "C.UTF-8", "TZ": "UTC"}
NETWORK = ("agent_port", "proxy_ports", "harness_selector", "harness_namespace", "proxy_cidrs")


class KubeUnavailable(IsolationUnavailable):
    """The Kubernetes API cannot be reached or used as configured (checked at run start)."""


class PodStartError(ac.AgentUnavailable):
    """The pod did not start (failed, or pending past its timeout; then it was deleted)."""


@dataclass(frozen=True)
class KubeSettings:
    """The kubernetes backend's settings; :meth:`from_config` reads ``SandboxConfig.kube_*``."""

    namespace: str = "openforge"
    api_url: str | None = None  # e.g. http://127.0.0.1:8001 (kubectl proxy, kmock); no auth
    kubeconfig: str | None = None  # None: in-cluster, else the default kubeconfig
    context: str | None = None
    registry: str | None = None  # images are <registry>/openforge/<harness>:<version>
    agent_port: int = 8937
    pod_start_timeout_s: float = 180.0
    qps: float = 10.0
    burst: int = 20
    ephemeral_storage_mb: int = 10240
    run_as_user: int | None = None
    harness_selector: dict[str, str] = field(default_factory=lambda: dict(km.HARNESS_SELECTOR))
    harness_namespace: str | None = None
    proxy_cidrs: tuple[str, ...] = ()
    proxy_ports: tuple[int, int] | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str = km.SANDBOX_ACCOUNT
    owner: bool = True
    heartbeat_s: float = 10.0

    @classmethod
    def from_config(cls, config: SandboxConfig) -> KubeSettings:
        values = {f.name: getattr(config, f"kube_{f.name}", None) for f in fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()
                      if v is not None})  # fmt: skip


_clients: dict[tuple[Any, ...], Any] = {}
_runs: dict[tuple[Any, ...], dict[str, Any] | None] = {}
_beats: dict[tuple[Any, ...], kr.Heartbeat] = {}
_lock = threading.Lock()


def api_client(settings: KubeSettings) -> Any:
    """A kubernetes ApiClient for ``settings`` (one per process and address): ``api_url``
    as is (no auth: kubectl proxy, kmock), else the kubeconfig (file, context), else the
    in-cluster service account, else the default kubeconfig. Retries are ours, not urllib3's."""
    key = (settings.api_url, settings.kubeconfig, settings.context)
    with _lock:
        if key in _clients:
            return _clients[key]
    cfg = client.Configuration()
    try:
        if settings.api_url:
            cfg.host = settings.api_url
        elif settings.kubeconfig or settings.context:
            kconfig.load_kube_config(settings.kubeconfig, settings.context, None, cfg)
        else:
            try:
                kconfig.load_incluster_config(client_configuration=cfg)
            except kconfig.ConfigException:
                kconfig.load_kube_config(client_configuration=cfg)
    except Exception as e:
        raise KubeUnavailable(
            f"no Kubernetes configuration ({type(e).__name__}: {e}): run inside the cluster, or "
            "set sandbox.kube_kubeconfig / kube_context, or sandbox.kube_api_url"
        ) from e
    cfg.retries, cfg.connection_pool_maxsize = False, 32
    with _lock:
        return _clients.setdefault(key, client.ApiClient(cfg))


def check(settings: KubeSettings, api: Any = None) -> None:
    """KubeUnavailable unless the run's identity can list pods in the namespace."""
    core = client.CoreV1Api(api or api_client(settings))
    try:
        call(core.list_namespaced_pod, settings.namespace, limit=1, policy=RetryPolicy(3))
    except Exception as e:
        raise KubeUnavailable(f"Kubernetes API unusable in {settings.namespace}: {e}") from e


def ensure_run(api: Any, s: KubeSettings, run: str, policy: RetryPolicy | None) -> dict | None:
    """``setup_namespace`` once per process and run; the owner reference of its pods."""
    key = (id(api), s.namespace, run)
    with _lock:
        if key in _runs:
            return _runs[key]
    net = {k: v for k, v in asdict(s).items() if k in NETWORK}
    net["proxy_cidrs"] = list(s.proxy_cidrs)
    owner = kr.setup_namespace(api, s.namespace, run, service_account=s.service_account,
                               owner=s.owner, policy=policy, **net)  # fmt: skip
    with _lock:
        return _runs.setdefault(key, owner)


def ensure_heartbeat(api: Any, s: KubeSettings, run: str, pod: str, owner: dict | None,
                     policy: RetryPolicy | None) -> kr.Heartbeat:  # fmt: skip
    """This process's heartbeat Lease for (run, HarnessPod), started on first use; it stops
    with the process (and is deleted at a clean exit: :func:`shutdown`)."""
    key, ttl = (id(api), s.namespace, run, pod), int(max(30.0, 6 * s.heartbeat_s))
    with _lock:
        if key in _beats:
            return _beats[key]
        beat = kr.Heartbeat(api, s.namespace, run, pod, s.heartbeat_s, ttl, owner, policy)
        _beats[key] = beat
        atexit.register(beat.stop)
    return beat.start()


def shutdown() -> None:
    """Stop this process's heartbeats (deleting their Leases) and forget the runs set up: for a
    HarnessPod that stops cleanly, and for tests."""
    with _lock:
        beats = list(_beats.values())
        _beats.clear()
        _runs.clear()
    for beat in beats:
        beat.stop()
        atexit.unregister(beat.stop)


def create_pod(
    api: Any,
    namespace: str,
    manifest: dict[str, Any],
    *,
    policy: RetryPolicy | None,
    bucket: kr.TokenBucket | None,
    redact: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Create the pod; on 409 adopt it when it is this create's own (a POST whose answer was
    lost; same nonce), delete and recreate it when it is an earlier try of the same sandbox
    (our labels, another nonce), and refuse anyone else's. Returns the pod."""
    core, meta = client.CoreV1Api(api), manifest["metadata"]
    name, nonce = meta["name"], meta.get("annotations", {}).get(NONCE)
    run = meta["labels"].get(f"{km.LABEL}.run")
    what = f"create pod {namespace}/{name}"
    for _ in range(3):
        try:
            return call(core.create_namespaced_pod, namespace, manifest, what=what, policy=policy,
                        bucket=bucket, redact=redact)  # fmt: skip
        except ApiException as e:
            if e.status != 409:
                raise KubeError(f"{what}: HTTP {e.status} {e.reason}") from None
        pod = call_unless((404,), core.read_namespaced_pod, name, namespace, policy=policy)
        if pod is None:
            continue  # gone in between: create again
        got = pod.get("metadata") or {}
        labels = got.get("labels") or {}
        if (
            labels.get(f"{km.LABEL}.role") != km.ROLE_SANDBOX
            or labels.get(f"{km.LABEL}.run") != run
        ):
            raise KubeError(f"{what}: a pod of that name is not a sandbox of this run; left alone")
        if nonce is not None and (got.get("annotations") or {}).get(NONCE) == nonce:
            log.info("%s: the pod exists from this create's earlier try; adopting it", what)
            return pod
        log.warning("%s: a stale sandbox of the same attempt exists; replacing it", what)
        delete_pod(api, namespace, name, policy)
        end, pause = time.monotonic() + 30.0, 0.05
        while call_unless((404,), core.read_namespaced_pod, name, namespace, policy=policy):
            if time.monotonic() > end:
                raise KubeError(f"{what}: the stale pod is still there 30s after its deletion")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
    raise KubeError(f"{what}: still conflicting after 3 tries")


def _delete_if_ours(api: Any, namespace: str, manifest: dict[str, Any], policy: Any) -> None:
    """After a failed create: delete the pod if a POST of ours landed after all."""
    meta = manifest["metadata"]
    quick = RetryPolicy(attempts=2, timeout_s=10)
    try:
        core = client.CoreV1Api(api)
        pod = call_unless((404,), core.read_namespaced_pod, meta["name"], namespace, policy=quick)
        theirs = ((pod or {}).get("metadata") or {}).get("annotations") or {}
        if pod is not None and theirs.get(NONCE) == meta["annotations"][NONCE]:
            delete_pod(api, namespace, meta["name"], policy)
    except Exception as e:  # the reconciler's job then (deadline label, heartbeat)
        log.debug("after a failed create of pod %s: %s", meta["name"], type(e).__name__)


def wait_running(
    api: Any, namespace: str, name: str, timeout_s: float, policy: RetryPolicy | None = None
) -> str:
    """Watch the pod until it runs and has an IP (returned). A dropped or failed watch is
    followed by a GET and a new watch. PodStartError when it fails, is deleted, or is still
    pending after ``timeout_s`` (the caller deletes it)."""
    core, where = client.CoreV1Api(api), f"pod {namespace}/{name}"
    end, drops = time.monotonic() + timeout_s, 0
    while True:
        pod = call_unless((404,), core.read_namespaced_pod, name, namespace, policy=policy)
        if pod is None:
            raise PodStartError(f"{where} vanished while starting")
        state, detail = km.pod_state(pod)
        left = end - time.monotonic()
        if state == "pending" and left > 0:  # watch it (then GET again: a new resourceVersion)
            w, rv = watch.Watch(), (pod.get("metadata") or {}).get("resourceVersion")
            kw = {"field_selector": f"metadata.name={name}", "resource_version": rv}
            try:
                events = w.stream(
                    core.list_namespaced_pod,
                    namespace,
                    timeout_seconds=max(1, int(min(left, 60))),
                    _request_timeout=(5, max(0.2, min(left, 60.0))),
                    **{k: v for k, v in kw.items() if v},
                )
                for ev in events:
                    obj = ev.get("raw_object") or {}
                    if (obj.get("metadata") or {}).get("name") != name:
                        continue  # a server that ignores field selectors (kmock)
                    if ev.get("type") == "DELETED":
                        raise PodStartError(f"{where} was deleted while starting")
                    state, detail = km.pod_state(obj)
                    if state != "pending" or time.monotonic() >= end:
                        break
            except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError) as e:
                drops += 1
                log.debug("watch of %s dropped (%s); getting it again", where, type(e).__name__)
                time.sleep(min(1.0, 0.05 * 2 ** min(drops, 5), max(0.0, end - time.monotonic())))
            finally:
                w.stop()
        if state == "running":
            return detail
        if state == "failed":
            raise PodStartError(f"{where} failed to start: {detail}")
        if time.monotonic() >= end:
            raise PodStartError(f"{where} still pending after {timeout_s:.0f}s ({detail}); deleted")


@dataclass
class _State:
    """What cleanup needs; kept apart from the sandbox so ``weakref.finalize`` can hold it."""

    api: Any = None
    namespace: str = ""
    name: str | None = None
    agent: ac.AgentClient | None = None
    policy: RetryPolicy | None = None
    destroyed: bool = False


def _cleanup(state: _State) -> None:
    state.destroyed = True
    if state.agent is not None:
        state.agent.close()
    if state.name is not None and state.api is not None:
        try:
            delete_pod(state.api, state.namespace, state.name, state.policy)
        except Exception as e:  # the reconcile pass deletes it (deadline label, heartbeat)
            log.error("could not delete sandbox pod %s: %s", state.name, e)
        state.name = None


class KubernetesSandbox:
    """The Sandbox protocol in a Kubernetes pod; see the module docstring. ``settings``,
    ``api`` (an ApiClient), ``policy`` and ``bucket`` override what ``config`` implies."""

    workspace = ac.WORKSPACE

    def __init__(
        self,
        config: SandboxConfig | None = None,
        harness: str | None = None,
        *,
        settings: KubeSettings | None = None,
        api: Any = None,
        policy: RetryPolicy | None = None,
        bucket: kr.TokenBucket | None = None,
    ) -> None:
        self.config = config or SandboxConfig()
        self.harness = harness
        self.settings = settings or KubeSettings.from_config(self.config)
        self.policy, self._api, self._bucket = policy, api, bucket
        self.spec = SandboxSpec()
        self.image = self.name = self.pod_ip = ""
        self.deadline = 0.0
        self._state = _State()
        self._finalizer = weakref.finalize(self, _cleanup, self._state)

    def __repr__(self) -> str:
        return f"KubernetesSandbox({self.settings.namespace}/{self.name or '-'})"

    def image_for(self, spec: SandboxSpec) -> str:
        """The harness's image (its files baked in at the paths its ro_mounts name), the base
        for a verifier, or ``config.image``; behind ``kube_registry`` when set. Host paths
        cannot be mounted into a pod: a mount the image lacks is an error."""
        from forge import images

        tag, baked = self.config.image or images.base_tag(), {}
        if self.harness is not None and not self.config.image:
            try:
                tag, baked = images.harness_tag(self.harness), images._harness_sources(self.harness)
            except Exception:  # a harness with no image of its own: the base
                pass
        missing = {h: t for h, t in spec.ro_mounts.items() if baked.get(h) != t}
        if missing:
            raise ValueError(f"kubernetes sandboxes cannot mount host paths ({missing}); bake "
                             f"them into the image ({tag})")  # fmt: skip
        reg = self.settings.registry
        return f"{reg.rstrip('/')}/{tag}" if reg else tag

    def manifest(self, spec: SandboxSpec, token: str, owner: dict | None, beat: str) -> dict:
        """The pod for ``spec`` (see :func:`~forge.sandboxes.kube_manifests.pod_manifest`)."""
        s, cfg = self.settings, self.config
        labels = km.pod_labels(spec.labels, self.deadline, self.harness)
        labels[f"{km.LABEL}.heartbeat"] = beat
        return km.pod_manifest(
            name=self.name,
            namespace=s.namespace,
            image=self.image,
            command=ac.agent_command(listen=f"0.0.0.0:{s.agent_port}"),
            labels=labels,
            annotations={NONCE: secrets.token_hex(8)},
            env=dict(BASE_ENV),
            token=token,
            agent_port=s.agent_port,
            deadline_s=spec.deadline_s,
            resources=km.resources(cfg.cpus, cfg.memory_mb, s.ephemeral_storage_mb),
            owner=owner,
            service_account=s.service_account,
            run_as_user=s.run_as_user,
            node_selector=s.node_selector,
            image_pull_secrets=list(s.image_pull_secrets),
        )

    # -- lifecycle ------------------------------------------------------------------------

    def create(self, spec: SandboxSpec) -> None:
        if self._state.api is not None:
            raise RuntimeError("sandbox already created")
        s = self.settings
        api = self._api if self._api is not None else api_client(s)
        self.image, self.spec = self.image_for(spec), spec
        self._state.api, self._state.namespace, self._state.policy = api, s.namespace, self.policy
        run = str(spec.labels.get("run", ""))
        owner = ensure_run(api, s, run, self.policy)
        holder = str(spec.labels.get("pod") or f"{socket.gethostname()}-{os.getpid()}")
        beat = ensure_heartbeat(api, s, run, holder, owner, self.policy)
        token = secrets.token_hex(32)
        self.deadline = time.time() + spec.deadline_s
        self.name = km.pod_name(spec.labels)
        manifest = self.manifest(spec, token, owner, beat.name)
        bucket = self._bucket or kr.bucket_for(s.qps, s.burst)
        try:
            create_pod(api, s.namespace, manifest, policy=self.policy, bucket=bucket,
                       redact=(token,))  # fmt: skip
        except BaseException:  # a POST may have landed after all: delete it if it is ours
            _delete_if_ours(api, s.namespace, manifest, self.policy)
            raise
        self._state.name = self.name  # from here on, a failure deletes the pod
        try:
            self.pod_ip = wait_running(api, s.namespace, self.name, s.pod_start_timeout_s,
                                       self.policy)  # fmt: skip
            host = f"[{self.pod_ip}]" if ":" in self.pod_ip else self.pod_ip
            agent = ac.AgentClient(f"http://{host}:{s.agent_port}", token,
                                base_env={**BASE_ENV, **spec.env})  # fmt: skip
            self._state.agent = agent
            try:
                agent.wait_ready(timeout_s=self.config.start_timeout_s)
            except ac.AgentUnavailable as e:
                raise PodStartError(f"pod {s.namespace}/{self.name} ({self.image}) runs but "
                                    f"its sandbox agent does not answer: {e}") from e  # fmt: skip
        except BaseException:  # leave no pod behind a failed create
            self._finalizer()
            raise

    def destroy(self) -> None:
        """Delete the pod now (grace 0: every process dies with it); idempotent, and a pod
        already gone is fine."""
        self._finalizer()

    def _agent(self) -> ac.AgentClient:
        if self._state.destroyed:
            raise RuntimeError("sandbox destroyed")
        if self._state.agent is None:
            raise RuntimeError("sandbox not created")
        return self._state.agent

    def proxy_host_port(self) -> str:
        """``SandboxSpec.proxy_tcp``: the HarnessPod's proxy, reached directly over the pod
        network (the NetworkPolicy lets the pod reach nothing else)."""
        self._agent()
        if not self.spec.proxy_tcp:
            raise RuntimeError("kubernetes sandboxes need spec.proxy_tcp (the HarnessPod's "
                               "proxy address, reachable from pods)")  # fmt: skip
        return self.spec.proxy_tcp

    def default_path(self) -> str:
        return ac.DEFAULT_PATH

    def path_map(self) -> dict[str, str]:
        return {}

    # -- exec and files: through the agent ------------------------------------------------

    def exec(
        self, cmd: list[str], timeout_s: float, env: dict[str, str] | None = None
    ) -> ExecResult:
        agent = self._agent()
        remaining = self.deadline - time.time()
        if remaining <= 0:
            raise SandboxExpired(f"sandbox {self.name} passed its deadline "
                                 f"{-remaining:.1f}s ago; not running {cmd!r}")  # fmt: skip
        if not cmd:
            raise ValueError("empty command")
        return agent.exec(cmd, min(timeout_s, remaining), env)

    def put_file(self, path: str, content: bytes | str, mode: int = 0o644) -> None:
        self._agent().put_file(path, content, mode)

    def get_file(self, path: str) -> bytes | None:
        return self._agent().get_file(path)

    def get_archive(self, path: str, max_bytes: int = 64 << 20) -> bytes:
        return self._agent().get_archive(path, max_bytes)

    def put_archive(self, path: str, data: bytes) -> None:
        self._agent().put_archive(path, data)


def reap(config: SandboxConfig, run: str, orphans_only: bool = False) -> int:
    """The reconcile pass for ``reap_sandboxes``: ``reap_pods`` in the configured namespace
    (0 when its LIST failed: the sweep was skipped and logged)."""
    s = KubeSettings.from_config(config)
    return kr.reap_pods(api_client(s), s.namespace, run, orphans_only=orphans_only) or 0
