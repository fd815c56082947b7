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
:func:`~forge.sandboxes.kube_cluster.cluster_manifests`), and the NetworkPolicy admits
connections to the agent port only from the HarnessPods anyway. The token is never logged, and
is scrubbed from every error raised here.

Pods (see :mod:`~forge.sandboxes.kube_manifests`) carry the run's labels, an owner reference to
the run's ConfigMap, ``activeDeadlineSeconds`` and a deadline label (the sandbox's deadline
plus the start timeouts: the deadline the agent sees counts from the pod being ready, so image
pulls are not the attempt's time), requests = limits (cpu, memory, ephemeral
storage), a deterministic name (a hash of run, HarnessPod, episode, attempt and role), no
service account token, a service account bound to nothing, and a locked-down securityContext.
Creation takes a token from a process-wide bucket (``qps``/``burst``, jittered), and
is retried on 429/5xx/connection errors (:mod:`~forge.sandboxes.kube_api`); a 409 for
our own earlier POST (same nonce annotation) adopts the pod, one left by an earlier try of the
same attempt is deleted and created again, anyone else's is left alone with an error. A pod
still pending after ``pod_start_timeout_s`` is deleted and :class:`PodStartError` raised
(an infrastructure failure: the attempt is retried in a fresh sandbox). Sandboxes reach the
attempt's proxy at ``SandboxSpec.proxy_tcp`` directly (the HarnessPod must listen on its pod
IP); the NetworkPolicy allows nothing else. With ``sandbox.warm_pool`` an attempt takes over a
pod made ahead (:mod:`forge.sandboxes.warm_pool`), relabelled with its episode, attempt and
deadline (one PATCH, in the background); its phase labels, which the NetworkPolicies select on,
are its pool's.

Tested against kmock, an emulated API server (no real Kubernetes API server can be installed
where this was written); see tests/forge/sandboxes/test_kubernetes*.py.
"""

from __future__ import annotations

import atexit
import functools
import ipaddress
import logging
import os
import secrets
import socket
import threading
import time
import urllib.parse
import weakref
from collections.abc import Collection
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from forge.config import KubernetesConfig, SandboxConfig
from forge.sandboxes import agent_boot as boot
from forge.sandboxes import agent_client as ac
from forge.sandboxes import kube_manifests as km
from forge.sandboxes import kube_reconcile as kr
from forge.sandboxes import warm_pool
from forge.sandboxes.agent_sandbox import AgentSandbox
from forge.sandboxes.base import SandboxSpec
from forge.sandboxes.kube_api import (
    NONCE,
    KubeUnavailable,
    PodStartError,
    api_client,
    check,
    create_pod,
    delete_if_ours,
    wait_running,
)
from forge.sandboxes.kube_calls import KubeError, RetryPolicy, TokenBucket, bucket_for, delete_pod

log = logging.getLogger(__name__)
BASE_ENV = {"PATH": boot.DEFAULT_PATH, "HOME": boot.HOME, "LANG": "C.UTF-8", "TZ": "UTC"}
NETWORK = ("agent_port", "proxy_ports", "harness_selector", "harness_namespace", "proxy_cidrs")
START_SLACK_S = 30.0  # API retries around a pod's start, beyond its two start timeouts


KubeSettings = KubernetesConfig  # the backend reads ``sandbox.kubernetes`` as is


_runs: dict[tuple[Any, ...], dict[str, Any] | None] = {}
_run_gates: dict[tuple[Any, ...], threading.Lock] = {}
_beats: dict[tuple[Any, ...], kr.Heartbeat] = {}
_lock = threading.Lock()


def ensure_run(api: Any, s: KubeSettings, run: str, policy: RetryPolicy | None) -> dict | None:
    """``setup_namespace`` once per process and run; the owner reference of its pods."""
    key = (id(api), s.namespace, run)
    with _lock:
        if key in _runs:
            return _runs[key]
        gate = _run_gates.setdefault(key, threading.Lock())
    with gate:  # one setup per key: creates that come meanwhile wait for its owner reference
        with _lock:
            if key in _runs:
                return _runs[key]
        net: dict[str, Any] = {k: getattr(s, k) for k in NETWORK}
        net["proxy_cidrs"] = list(s.proxy_cidrs)
        owner = kr.setup_namespace(api, s.namespace, run, service_account=s.service_account,
                                   owner=s.owner, policy=policy, **net)  # fmt: skip
        with _lock:  # a setup that raised stores nothing: the next create tries again
            _runs[key] = owner
        return owner


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
        _run_gates.clear()
    for beat in beats:
        beat.stop()
        atexit.unregister(beat.stop)


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


class KubernetesSandbox(AgentSandbox):
    """The Sandbox protocol in a Kubernetes pod; see the module docstring. ``settings``,
    ``api`` (an ApiClient), ``policy`` and ``bucket`` override what ``config`` implies."""

    workspace = boot.WORKSPACE

    def __init__(
        self,
        config: SandboxConfig | None = None,
        harness: str | None = None,
        *,
        settings: KubeSettings | None = None,
        api: Any = None,
        policy: RetryPolicy | None = None,
        bucket: TokenBucket | None = None,
    ) -> None:
        self.config = config or SandboxConfig()
        self.harness = harness
        self.settings = settings or self.config.kubernetes
        self.policy, self._api, self._bucket = policy, api, bucket
        self.spec = SandboxSpec()
        self.image = self.name = self.pod_ip = ""
        self.relabelled: Future[bool] | None = None  # a warm pod's labels for its attempt
        self.deadline = 0.0
        self._state = _State()
        self._finalizer = weakref.finalize(self, _cleanup, self._state)

    def __repr__(self) -> str:
        return f"KubernetesSandbox({self.settings.namespace}/{self.name or '-'})"

    def image_for(self, spec: SandboxSpec) -> str:
        """The harness's image (its files baked in at the paths its ro_mounts name), the base
        for a verifier, or ``config.image``; behind ``sandbox.kubernetes.registry`` when set.
        Host paths cannot be mounted into a pod: a mount the image lacks is an error."""
        from forge.images import tags as images

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

    def lifetime_s(self, spec: SandboxSpec) -> float:
        """The pod's own bound (``activeDeadlineSeconds``, the deadline label): its deadline
        plus the longest it may take to become ready (scheduling, image pulls, the agent's
        start), which is not the attempt's time: the sandbox's deadline counts from ready."""
        wait = self.settings.pod_start_timeout_s + self.config.start_timeout_s
        return spec.deadline_s + wait + START_SLACK_S

    def manifest(self, spec: SandboxSpec, token: str, owner: dict | None, beat: str) -> dict:
        """The pod for ``spec`` (see :func:`~forge.sandboxes.kube_manifests.pod_manifest`)."""
        s, cfg = self.settings, self.config
        labels = km.pod_labels(spec.labels, self.deadline, self.harness)
        labels[f"{km.LABEL}.heartbeat"] = beat
        return km.pod_manifest(
            name=self.name,
            namespace=s.namespace,
            image=self.image,
            command=boot.agent_command(  # as root, the agent runs the harness unprivileged
                listen=f"0.0.0.0:{s.agent_port}",
                user=(boot.HARNESS_UID, boot.HARNESS_GID) if s.run_as_user is None else None,
            ),
            labels=labels,
            annotations={NONCE: secrets.token_hex(8)},
            env=dict(BASE_ENV),
            token=token,
            agent_port=s.agent_port,
            deadline_s=self.lifetime_s(spec),
            resources=km.resources(cfg.cpus, cfg.memory_mb, s.ephemeral_storage_mb),
            owner=owner,
            service_account=s.service_account,
            run_as_user=s.run_as_user,
            node_selector=s.node_selector,
            image_pull_secrets=list(s.image_pull_secrets),
            disk_mb=cfg.disk_mb,
        )

    def warm_key(self) -> tuple[Any, ...]:
        """What fixes this sandbox besides its spec: a warm pool's kind."""
        overrides = (id(self._api), id(self.policy), id(self._bucket))
        return (self.config.model_dump_json(), self.settings.model_dump_json(), *overrides,
                self.harness)  # fmt: skip

    def warm_factory(self) -> functools.partial[KubernetesSandbox]:
        """New sandboxes made as this one (a warm pool's)."""
        kw = {"settings": self.settings, "policy": self.policy, "bucket": self._bucket}
        return functools.partial(KubernetesSandbox, self.config, self.harness, api=self._api, **kw)

    # -- lifecycle ------------------------------------------------------------------------

    def create(self, spec: SandboxSpec) -> None:
        if self._state.api is not None:
            raise RuntimeError("sandbox already created")
        if spec.environment:
            raise ValueError(
                "a task with its own image (a Harbor task) needs sandbox.backend=docker"
            )
        warm = warm_pool.take(self, spec)
        if warm is not None:  # made ahead: a handover, no pod created now
            warm_pool.hand_over(self, warm, spec)
            self.pod_ip = warm.pod_ip
            self.relabelled = kr.relabel_later(self._state.api, self._state.namespace, self.name,
                                               spec.labels, self.deadline + START_SLACK_S,
                                               self.policy)  # fmt: skip
            return
        s = self.settings
        if self._api is None and spec.proxy_tcp:  # before any API call: a clear error
            unreachable_proxy(spec.proxy_tcp.rsplit(":", 1)[0], s)
        api = self._api if self._api is not None else api_client(s)
        self.image, self.spec = self.image_for(spec), spec
        self._state.api, self._state.namespace, self._state.policy = api, s.namespace, self.policy
        run = str(spec.labels.get("run", ""))
        owner = ensure_run(api, s, run, self.policy)
        holder = str(spec.labels.get("pod") or f"{socket.gethostname()}-{os.getpid()}")
        beat = ensure_heartbeat(api, s, run, holder, owner, self.policy)
        if not beat.created and not beat.beat():  # its first beat failed (logged): once more
            why = "the reconcile pass would take a pod naming it for an orphan"
            raise KubeError(f"heartbeat Lease {beat.name} could not be created ({why})")
        token = secrets.token_hex(32)
        self.deadline = time.time() + self.lifetime_s(spec)  # the pod's bound until it is ready
        self.name = km.pod_name(spec.labels)
        manifest = self.manifest(spec, token, owner, beat.name)
        bucket = self._bucket or bucket_for(s.qps, s.burst)
        try:
            create_pod(api, s.namespace, manifest, policy=self.policy, bucket=bucket,
                       redact=(token,))  # fmt: skip
        except BaseException:  # a POST may have landed after all: delete it if it is ours
            delete_if_ours(api, s.namespace, manifest, self.policy)
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
            # The attempt's time starts now, not at creation: waiting for a node, pulling the
            # image and starting the agent were not the agent's doing (never past the pod's own).
            self.deadline = min(self.deadline, time.time() + spec.deadline_s)
        except BaseException:  # leave no pod behind a failed create
            self._finalizer()
            raise

    def destroy(self) -> None:
        """Delete the pod now (grace 0: every process dies with it); idempotent, and a pod
        already gone is fine."""
        self._finalizer()

    def proxy_host_port(self) -> str:
        """``SandboxSpec.proxy_tcp``: the HarnessPod's proxy, reached directly over the pod
        network (the NetworkPolicy lets the pod reach nothing else)."""
        self._agent()
        if not self.spec.proxy_tcp:
            raise RuntimeError("kubernetes sandboxes need spec.proxy_tcp (the HarnessPod's "
                               "proxy address, reachable from pods)")  # fmt: skip
        return self.spec.proxy_tcp


def reap(
    config: SandboxConfig, run: str, orphans_only: bool = False, dead_pods: Collection[str] = ()
) -> int:
    """The reconcile pass for ``reap_sandboxes``: ``reap_pods`` in the configured namespace
    (0 when its LIST failed: the sweep was skipped and logged)."""
    s = config.kubernetes
    api = api_client(s)
    return kr.reap_pods(api, s.namespace, run, orphans_only=orphans_only, dead_pods=dead_pods) or 0


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or name, maybe ``[v6]``) means this machine only."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_run(config: SandboxConfig, proxy_host: str | None = None) -> None:
    """At run start: KubeUnavailable when the pods could not reach the proxy (it listens on
    loopback only while the API server is not local: set ``proxy.host``) or the API cannot
    list pods in the namespace. ``proxy_host`` None skips the first check."""
    s = config.kubernetes
    if proxy_host is not None:
        unreachable_proxy(proxy_host, s)
    check(s)


def unreachable_proxy(proxy_host: str, s: KubernetesConfig) -> None:
    """KubeUnavailable when the proxy is on loopback only but the API server is not local."""
    api_host = urllib.parse.urlsplit(s.api_url).hostname if s.api_url else None
    if is_loopback(proxy_host) and not is_loopback(api_host or ""):
        raise KubeUnavailable(
            f"the HarnessPods' proxy listens on {proxy_host} (loopback) only, which sandbox "
            "pods cannot reach: set proxy.host=0.0.0.0 (or the pod IP) for the kubernetes "
            "backend (the per-attempt key guards every call)"
        )


def reconciler(config: SandboxConfig, run: str, interval_s: float = 30.0) -> kr.Reconciler:
    """The driver's reconcile loop for ``run`` (not started). The driver calls it before any
    HarnessPod starts, so it also sets the run up in the namespace first: the HarnessPods then
    find the run's ConfigMap (2 calls each; 4-5 each when a thousand start at once on an
    empty namespace, as k8s_scale measured). A failure here only leaves that to them."""
    s = config.kubernetes
    api = api_client(s)
    try:
        ensure_run(api, s, run, None)
    except Exception as e:
        log.warning("setting run %s up in %s: %s (each HarnessPod will)", run, s.namespace, e)
    return kr.Reconciler(api, s.namespace, run, interval_s=interval_s)
