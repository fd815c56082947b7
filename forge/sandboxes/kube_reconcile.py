"""The run-level side of the kubernetes backend: the per-run namespace set-up, HarnessPod
heartbeats and the reconcile pass (API calls go through :mod:`forge.sandboxes.kube_api`).

Heartbeats: each HarnessPod process renews one ``coordination.k8s.io`` Lease (``openforge-hb-
<hash>``) every few seconds while it holds sandboxes; its pods carry the Lease's name in the
``openforge.heartbeat`` label. :func:`reap_pods` with ``orphans_only`` deletes the pods whose
Lease has expired or is gone (their HarnessPod died), and in any mode those past their
``openforge.deadline`` label; a sweep whose LIST fails is skipped, never guessed at. The
driver runs a :class:`Reconciler` (that sweep on a timer) for the whole run.

Tested against kmock (an emulated API server; no real one can be installed here). kmock ignores
label selectors, so the reaper re-checks every label itself (redundant on a real server).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from forge.sandboxes import kube_cluster as kc
from forge.sandboxes import kube_manifests as km
from forge.sandboxes.kube_calls import (
    KubeError,
    RetryPolicy,
    call,
    call_unless,
    delete_pod,
    last_throttled,
)

log = logging.getLogger(__name__)


def setup_namespace(
    api: Any,
    namespace: str,
    run: str,
    *,
    agent_port: int,
    proxy_ports: tuple[int, int],
    harness_selector: dict[str, str] | None = None,
    harness_namespace: str | None = None,
    proxy_cidrs: list[str] | None = None,
    service_account: str = km.SANDBOX_ACCOUNT,
    owner: bool = True,
    policy: RetryPolicy | None = None,
) -> dict[str, Any] | None:
    """What a run needs in ``namespace`` before its first sandbox: its NetworkPolicies, the
    sandbox ServiceAccount (created when missing, if the run may: else KubeForbidden saying to
    apply :func:`~forge.sandboxes.kube_cluster.cluster_manifests`) and, with ``owner``, the
    run's ConfigMap. Idempotent (AlreadyExists is fine). The NetworkPolicies are posted by
    every caller (they are the sandboxes' isolation: one deleted is made again); the rest is
    skipped when the ConfigMap, made last, exists already. Returns the ownerReference for the
    run's pods, or None."""
    core, net = client.CoreV1Api(api), client.NetworkingV1Api(api)
    netpols = kc.network_policies(
        namespace,
        run,
        agent_port,
        proxy_ports=proxy_ports,
        harness_selector=harness_selector,
        harness_namespace=harness_namespace,
        proxy_cidrs=proxy_cidrs,
    )
    for netpol in netpols:
        call_unless((409,), net.create_namespaced_network_policy, namespace, netpol,
                    policy=policy)  # fmt: skip
    cm = kc.run_configmap(namespace, run)
    if owner:  # made last: when it exists, so does the rest (2 calls a HarnessPod, not 4)
        made = call_unless((404,), core.read_namespaced_config_map, cm["metadata"]["name"],
                           namespace, policy=policy)  # fmt: skip
        if made is not None:
            return km.owner_reference({"apiVersion": "v1", "kind": "ConfigMap", **made})
    sa = call_unless(
        (404,), core.read_namespaced_service_account, service_account, namespace, policy=policy
    )
    if sa is None:
        body = kc.sandbox_service_account(namespace, service_account)
        call_unless((409,), core.create_namespaced_service_account, namespace, body, policy=policy)
    if not owner:
        return None
    made = call_unless((409,), core.create_namespaced_config_map, namespace, cm, policy=policy)
    if made is None:
        name = cm["metadata"]["name"]
        made = call(core.read_namespaced_config_map, name, namespace, policy=policy)
    return km.owner_reference({"apiVersion": "v1", "kind": "ConfigMap", **made})


def micro_time(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> float | None:
    with contextlib.suppress(TypeError, ValueError):
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    return None


@dataclass
class Heartbeat:
    """A HarnessPod's heartbeat Lease, renewed every ``interval_s`` by a daemon thread (it
    stops with the process, so a dead HarnessPod's Lease expires after ``ttl_s``). Failures
    are logged, never raised: a missed beat only risks the reconciler reaping early after
    ``ttl_s``, which is several intervals."""

    api: Any
    namespace: str
    run: str
    pod: str
    interval_s: float = 10.0
    ttl_s: int = 60
    owner: dict[str, Any] | None = None
    policy: RetryPolicy | None = None
    clock: Callable[[], float] = time.time
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _created: bool = False

    @property
    def name(self) -> str:
        return kc.lease_name(self.run, self.pod)

    @property
    def created(self) -> bool:
        """Whether its Lease has been made (or found): a pod naming a Lease that does not exist
        is an orphan to the reconcile pass."""
        return self._created

    def beat(self) -> bool:
        coord, now = client.CoordinationV1Api(self.api), micro_time(self.clock())
        body = {"spec": {"renewTime": now, "leaseDurationSeconds": int(self.ttl_s)}}
        try:
            if not self._created:  # a new HarnessPod's Lease is not there yet: one call, not 2
                lease = kc.heartbeat_lease(
                    self.namespace, self.run, self.pod, now, int(self.ttl_s), self.owner
                )
                made = call_unless((409,), coord.create_namespaced_lease, self.namespace, lease,
                                   policy=self.policy)  # fmt: skip
                self._created = True
                if made is not None:
                    return True
            renewed = call_unless(
                (404,), coord.patch_namespaced_lease, self.name, self.namespace, body,
                policy=self.policy,
            )  # fmt: skip
            if renewed is None:
                lease = kc.heartbeat_lease(
                    self.namespace, self.run, self.pod, now, int(self.ttl_s), self.owner
                )
                call_unless((409,), coord.create_namespaced_lease, self.namespace, lease,
                            policy=self.policy)  # fmt: skip
            return True
        except Exception as e:  # a heartbeat must never take its process down
            log.warning("heartbeat Lease %s/%s: %s", self.namespace, self.name, e)
            return False

    def start(self) -> Heartbeat:
        self.beat()
        self._thread = threading.Thread(target=self._loop, name="forge-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.beat()

    def stop(self, delete: bool = True) -> None:
        """Stop beating; with ``delete``, delete the Lease (whatever pods it still vouches
        for become orphans at once). Quick: it also runs at exit."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if delete:
            coord = client.CoordinationV1Api(self.api)
            quick = RetryPolicy(2, timeout_s=5.0, max_throttled_s=5.0)
            with contextlib.suppress(ApiException, KubeError):
                call(coord.delete_namespaced_lease, self.name, self.namespace, policy=quick)


QUICK = RetryPolicy(2, timeout_s=5.0, max_throttled_s=5.0)  # what may not hold an attempt up
_relabeller: ThreadPoolExecutor | None = None
_relabel_lock = threading.Lock()


def relabel_for(api: Any, namespace: str, name: str, labels: dict[str, str], deadline: float,
                policy: RetryPolicy | None = None) -> bool:  # fmt: skip
    """Label a warm pod handed to an attempt with the attempt's ``episode`` and ``attempt`` of
    ``labels`` and its ``deadline`` (epoch seconds: past it the reaper deletes the pod, sooner
    than its pool's deadline). One PATCH; a failure is logged, never raised (the pool's labels
    keep the pod reapable), and a pod already deleted is no failure. Whether it was patched."""
    new = {f"{km.LABEL}.{k}": km.label_value(str(labels[k]))
           for k in ("episode", "attempt") if k in labels}  # fmt: skip
    new[f"{km.LABEL}.deadline"] = str(math.ceil(deadline) + 1)
    try:
        call(client.CoreV1Api(api).patch_namespaced_pod, name, namespace,
             {"metadata": {"labels": new}}, policy=policy or QUICK)  # fmt: skip
        return True
    except (ApiException, KubeError) as e:
        if getattr(e, "status", None) != 404:  # 404: destroyed before its label came
            log.warning("warm pod %s/%s: labelling it for its attempt failed (%s); it keeps "
                        "its pool's labels", namespace, name, e)  # fmt: skip
        return False


def relabel_later(api: Any, namespace: str, name: str, labels: dict[str, str], deadline: float,
                  policy: RetryPolicy | None = None) -> Future[bool]:  # fmt: skip
    """:func:`relabel_for` on this process's relabelling threads (two): a handover does not
    wait on the API server (a burst of them would queue there), and the pool's labels are
    valid until the new ones land."""
    global _relabeller
    with _relabel_lock:
        if _relabeller is None:
            _relabeller = ThreadPoolExecutor(2, thread_name_prefix="forge-relabel")
    return _relabeller.submit(relabel_for, api, namespace, name, dict(labels), deadline, policy)


MASS_EXPIRY = 0.5  # more than this share of the pods' Leases stale at once: blame the API


def _live_leases(api: Any, namespace: str, now: float, policy: Any) -> set[str] | None:
    """Names of the heartbeat Leases to trust as live: the unexpired ones, and all of them
    while this process was answered a 429 within a Lease's duration (a throttling server can
    hold a live HarnessPod's renewals back past its TTL: k8s_scale at 1,000 saw live sandboxes
    reaped so; once it has not throttled for a TTL, the live ones have renewed). None when
    they cannot be listed."""
    try:
        leases = call(client.CoordinationV1Api(api).list_namespaced_lease, namespace, policy=policy)
    except (ApiException, KubeError) as e:
        log.warning("reconcile %s: listing heartbeat Leases failed (%s): no pod is judged an "
                    "orphan in this sweep", namespace, e)  # fmt: skip
        return None
    live, throttled = set(), last_throttled()
    for lease in leases.get("items") or []:
        spec = lease.get("spec") or {}
        renewed = parse_time(str(spec.get("renewTime", "")))
        if renewed is None:
            continue
        ttl = float(spec.get("leaseDurationSeconds") or 0)
        if now <= renewed + ttl or now <= throttled + ttl:
            live.add((lease.get("metadata") or {}).get("name", ""))
    return live


def _lost_beats(pods: list[dict], live: set[str] | None, namespace: str) -> set[str]:
    """The heartbeat Leases, among those the pods name, that are gone or stale; none when the
    Leases could not be listed, or when more than :data:`MASS_EXPIRY` of them (and at least 3)
    are lost at once: so many HarnessPods dying together is less likely than the API failing
    their renewals (the pods still go by their deadline label and the pool's dead HarnessPods,
    as Kubernetes' node controller stops evicting in a large-scale disruption)."""
    if live is None:
        return set()
    named = {((p.get("metadata") or {}).get("labels") or {}).get(f"{km.LABEL}.heartbeat")
             for p in pods} - {None}  # fmt: skip
    lost = named - live
    if len(lost) >= 3 and len(lost) > MASS_EXPIRY * len(named):
        log.warning("reconcile %s: %d of %d heartbeat Leases stale at once: the API, not the "
                    "HarnessPods, is the likelier cause; no pod judged an orphan by its Lease in "
                    "this sweep", namespace, len(lost), len(named))  # fmt: skip
        return set()
    return lost


def reap_pods(
    api: Any,
    namespace: str,
    run: str | None = None,
    *,
    orphans_only: bool = False,
    dead_pods: Collection[str] = (),
    policy: RetryPolicy | None = None,
    now: float | None = None,
) -> int | None:
    """Delete sandbox pods in ``namespace``: every one of ``run`` (at run start and end), or
    with ``orphans_only`` only those whose HarnessPod's heartbeat Lease expired or is gone
    (``run`` None: of any run) or whose HarnessPod is one of ``dead_pods`` (the pool replaced
    it: its pods go at once, without waiting for its Lease to expire), and in every mode any
    pod past its deadline label. Returns how many were deleted, or None when the sweep was
    skipped because the LIST failed."""
    now = time.time() if now is None else now
    selector = f"{km.LABEL}.role={km.ROLE_SANDBOX}"
    if run is not None:
        selector += f",{km.LABEL}.run={km.label_value(run)}"
    try:
        core = client.CoreV1Api(api)
        pods = call(core.list_namespaced_pod, namespace, label_selector=selector, policy=policy)
    except (ApiException, KubeError) as e:
        log.warning("reconcile %s: LIST pods failed (%s); skipping this sweep", namespace, e)
        return None
    items = pods.get("items") or []
    live = _live_leases(api, namespace, now, policy) if orphans_only else set()
    lost = _lost_beats(items, live, namespace) if orphans_only else set()
    dead = {km.label_value(p) for p in dead_pods}
    reaped = 0
    for pod in items:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get(f"{km.LABEL}.role") != km.ROLE_SANDBOX:
            continue  # a real server filtered these already; kmock does not
        try:
            expired = now > float(labels.get(f"{km.LABEL}.deadline", "inf"))
        except ValueError:
            expired = False
        mine = run is None or labels.get(f"{km.LABEL}.run") == km.label_value(run)
        if orphans_only:
            orphan = labels.get(f"{km.LABEL}.heartbeat") in lost
            doomed = mine and (orphan or labels.get(f"{km.LABEL}.pod") in dead)
        else:
            doomed = mine and run is not None
        if doomed or expired:
            try:
                reaped += delete_pod(api, namespace, meta.get("name", ""), policy)
            except (ApiException, KubeError) as e:
                log.warning("reconcile %s: could not delete pod %s: %s", namespace,
                            meta.get("name"), e)  # fmt: skip
    return reaped


class Reconciler:
    """The driver's reconcile loop: :func:`reap_pods` with ``orphans_only`` every
    ``interval_s`` on a daemon thread; counts its sweeps, the skipped ones and pods reaped."""

    def __init__(
        self,
        api: Any,
        namespace: str,
        run: str | None,
        interval_s: float = 30.0,
        policy: RetryPolicy | None = None,
    ) -> None:
        self.api, self.namespace, self.run = api, namespace, run
        self.interval_s, self.policy = interval_s, policy
        self.sweeps = self.skipped = self.reaped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="forge-reconcile", daemon=True)

    def start(self) -> Reconciler:
        self._thread.start()
        return self

    def sweep(self) -> int | None:
        n = reap_pods(self.api, self.namespace, self.run, orphans_only=True, policy=self.policy)
        self.sweeps += 1
        self.skipped += n is None
        self.reaped += n or 0
        return n

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sweep()
            except Exception:  # the loop outlives one bad sweep
                log.exception("reconcile %s: sweep failed", self.namespace)
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
