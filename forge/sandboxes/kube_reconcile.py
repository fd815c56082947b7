"""The API side of the kubernetes backend: calls with bounded retries, a process-wide rate limit
on pod creation, the per-run namespace set-up, HarnessPod heartbeats and the reconcile pass.

Every call goes through :func:`call`: 429 (waiting at least its Retry-After), 5xx and
connection errors are retried with exponential backoff and jitter, a bounded number of times;
422 raises :class:`KubeInvalid` naming the fields the server rejected, never retried; 401/403
raise :class:`KubeForbidden` pointing at the RBAC to apply. Pod creation also takes a token
from a :class:`TokenBucket` shared by the process (``qps``/``burst``, each wait jittered), so a
thousand attempts starting at once reach the API server spread out. The limit is per process:
N HarnessPods may together send N times ``qps``; the jitter keeps them from doing it in step.

Heartbeats: each HarnessPod process renews one ``coordination.k8s.io`` Lease (``openforge-hb-
<hash>``) every few seconds while it holds sandboxes; its pods carry the Lease's name in the
``openforge.heartbeat`` label. :func:`reap_pods` with ``orphans_only`` deletes the pods whose
Lease has expired or is gone (their HarnessPod died), and in any mode those past their
``openforge.deadline`` label; a sweep whose LIST fails is skipped, never guessed at.

Tested against kmock (an emulated API server; no real one can be installed here). kmock ignores
label selectors, so the reaper re-checks every label itself (redundant on a real server).
"""

from __future__ import annotations

import contextlib
import datetime
import email.utils
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from forge.sandboxes import kube_manifests as km

log = logging.getLogger(__name__)
RETRYABLE = {0, 408, 429, 500, 502, 503, 504}  # 0: the client's own transport failures


class KubeError(RuntimeError):
    """The Kubernetes API could not be used (after retries): an infrastructure failure."""


class KubeForbidden(KubeError):
    """401/403: the run's identity lacks a permission."""


class KubeInvalid(ValueError):
    """422: the API server rejected a manifest; the message names the fields. Not retried."""


@dataclass
class RetryPolicy:
    """``attempts`` tries in all; waits ``base_s * 2**n`` (half of it random, at most
    ``cap_s``) or the server's Retry-After (at most ``max_retry_after_s``) plus a little
    jitter. ``sleep`` and ``rng`` are injectable for tests."""

    attempts: int = 6
    base_s: float = 0.25
    cap_s: float = 8.0
    max_retry_after_s: float = 60.0
    timeout_s: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    rng: Callable[[], float] = random.random

    def backoff(self, n: int) -> float:
        top = min(self.cap_s, self.base_s * 2**n)
        return top / 2 + self.rng() * top / 2

    def retry_after(self, headers: Any) -> float | None:
        value = headers.get("Retry-After") if headers is not None else None
        if not value:
            return None
        try:
            seconds = float(value)
        except ValueError:
            try:
                seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
            except (TypeError, ValueError):
                return None
        seconds = min(max(0.0, seconds), self.max_retry_after_s)
        return seconds + self.rng() * min(1.0, 0.1 * seconds + 0.05)


class TokenBucket:
    """``qps`` tokens a second, at most ``burst`` saved up; :meth:`acquire` reserves one and
    sleeps until it is due (plus a random ``jitter`` fraction of one interval, so callers
    released together do not hit the server in step). Thread-safe; reservations are handed
    out in call order, so N concurrent callers wait 0 (the burst), 1/qps, 2/qps, ..."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        jitter: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("a token bucket needs qps > 0 and burst >= 1")
        self.qps, self.burst, self.jitter = qps, burst, jitter
        self.clock, self.sleep, self.rng = clock, sleep, rng
        self._tokens, self._t = float(burst), clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Wait for a token; returns how long it waited."""
        with self._lock:
            now = self.clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._t) * self.qps)
            self._t, self._tokens = now, self._tokens - 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
        if wait > 0:
            wait += self.rng() * self.jitter / self.qps
            self.sleep(wait)
        return wait


_buckets: dict[tuple[float, int], TokenBucket] = {}
_buckets_lock = threading.Lock()


def bucket_for(qps: float, burst: int) -> TokenBucket:
    """The process-wide bucket for these settings."""
    with _buckets_lock:
        return _buckets.setdefault((qps, burst), TokenBucket(qps, burst))


def _status_message(body: str | None) -> str:
    """A Status body's message, or its causes (``field: message``) when it has any."""
    try:
        status = json.loads(body or "")
    except ValueError:
        return (body or "")[:300]
    if not isinstance(status, dict):
        return str(status)[:300]
    causes = (status.get("details") or {}).get("causes") or []
    fields = [f"{c.get('field', '?')}: {c.get('message', '')}" for c in causes]
    return "; ".join(fields) or str(status.get("message", ""))


def _clean(text: str, redact: tuple[str, ...]) -> str:
    for secret in redact:
        text = text.replace(secret, "<redacted>") if secret else text
    return text


def call(
    fn: Callable[..., Any],
    *args: Any,
    what: str | None = None,
    policy: RetryPolicy | None = None,
    bucket: TokenBucket | None = None,
    redact: tuple[str, ...] = (),
    **kwargs: Any,
) -> dict[str, Any]:
    """``fn(*args, **kwargs)`` (a generated client method) with retries; the decoded JSON
    body. Other API errors (404, 409, ...) are raised as the client's ApiException; ``redact``
    strings (a token) never appear in a raised or logged message."""
    policy = policy or RetryPolicy()
    what = what or f"{fn.__name__}({', '.join(a for a in args if isinstance(a, str))})"
    last = ""
    for n in range(policy.attempts):
        if bucket is not None:
            bucket.acquire()
        delay: float | None = None
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=policy.timeout_s, **kwargs)
            try:
                data = resp.data
            finally:
                with contextlib.suppress(Exception):
                    resp.release_conn()
            return json.loads(data) if data else {}
        except ApiException as e:
            msg = _status_message(e.body)
            if e.status in (401, 403):
                why = f"{what}: HTTP {e.status}: {msg}; the run's identity needs the Role of "
                why += "forge.sandboxes.kube_manifests.cluster_manifests()"
                raise KubeForbidden(_clean(why, redact)) from None
            if e.status == 422:
                why = f"{what}: the API server rejected the manifest (422): {msg}"
                raise KubeInvalid(_clean(why, redact)) from None
            if e.status not in RETRYABLE:
                raise
            delay = policy.retry_after(e.headers) if e.status == 429 else None
            last = f"HTTP {e.status} {e.reason or ''}".strip()
        except (urllib3.exceptions.HTTPError, OSError) as e:
            last = f"{type(e).__name__}: {e}"
        if n + 1 < policy.attempts:
            delay = policy.backoff(n) if delay is None else delay
            log.warning("%s: %s; retry %d of %d in %.2fs", what, _clean(last, redact), n + 1,
                        policy.attempts - 1, delay)  # fmt: skip
            policy.sleep(delay)
    raise KubeError(_clean(f"{what}: gave up after {policy.attempts} attempts: {last}", redact))


def call_unless(statuses: tuple[int, ...], fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """:func:`call`, but None (not an error) when the API answers one of ``statuses``."""
    try:
        return call(fn, *args, **kw)
    except ApiException as e:
        if e.status in statuses:
            return None
        raise


def delete_pod(api: Any, namespace: str, name: str, policy: RetryPolicy | None = None) -> bool:
    """Delete pod ``name`` at once (grace 0); False when it was already gone (404)."""
    core = client.CoreV1Api(api)
    gone = call_unless(
        (404,), core.delete_namespaced_pod, name, namespace, grace_period_seconds=0, policy=policy
    )
    return gone is not None


def setup_namespace(
    api: Any,
    namespace: str,
    run: str,
    *,
    agent_port: int,
    proxy_ports: tuple[int, int] | None = None,
    harness_selector: dict[str, str] | None = None,
    harness_namespace: str | None = None,
    proxy_cidrs: list[str] | None = None,
    service_account: str = km.SANDBOX_ACCOUNT,
    owner: bool = True,
    policy: RetryPolicy | None = None,
) -> dict[str, Any] | None:
    """What a run needs in ``namespace`` before its first sandbox: its NetworkPolicy, the
    sandbox ServiceAccount (created when missing, if the run may: else KubeForbidden saying to
    apply :func:`~forge.sandboxes.kube_manifests.cluster_manifests`) and, with ``owner``, the
    run's ConfigMap. Idempotent (AlreadyExists is fine). Returns the ownerReference for the
    run's pods, or None."""
    core, net = client.CoreV1Api(api), client.NetworkingV1Api(api)
    netpol = km.network_policy(
        namespace,
        run,
        agent_port,
        proxy_ports=proxy_ports,
        harness_selector=harness_selector,
        harness_namespace=harness_namespace,
        proxy_cidrs=proxy_cidrs,
    )
    call_unless((409,), net.create_namespaced_network_policy, namespace, netpol, policy=policy)
    sa = call_unless(
        (404,), core.read_namespaced_service_account, service_account, namespace, policy=policy
    )
    if sa is None:
        body = km.sandbox_service_account(namespace, service_account)
        call_unless((409,), core.create_namespaced_service_account, namespace, body, policy=policy)
    if not owner:
        return None
    cm = km.run_configmap(namespace, run)
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

    @property
    def name(self) -> str:
        return km.lease_name(self.run, self.pod)

    def beat(self) -> bool:
        coord, now = client.CoordinationV1Api(self.api), micro_time(self.clock())
        body = {"spec": {"renewTime": now, "leaseDurationSeconds": int(self.ttl_s)}}
        try:
            renewed = call_unless(
                (404,), coord.patch_namespaced_lease, self.name, self.namespace, body,
                policy=self.policy,
            )  # fmt: skip
            if renewed is None:
                lease = km.heartbeat_lease(
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
            coord, quick = client.CoordinationV1Api(self.api), RetryPolicy(2, timeout_s=5.0)
            with contextlib.suppress(ApiException, KubeError):
                call(coord.delete_namespaced_lease, self.name, self.namespace, policy=quick)


def _live_leases(api: Any, namespace: str, now: float, policy: Any) -> set[str] | None:
    """Names of the unexpired heartbeat Leases; None when they cannot be listed."""
    try:
        leases = call(client.CoordinationV1Api(api).list_namespaced_lease, namespace, policy=policy)
    except (ApiException, KubeError) as e:
        log.warning("reconcile %s: listing heartbeat Leases failed (%s): no pod is judged an "
                    "orphan in this sweep", namespace, e)  # fmt: skip
        return None
    live = set()
    for lease in leases.get("items") or []:
        spec = lease.get("spec") or {}
        renewed = parse_time(str(spec.get("renewTime", "")))
        if renewed is not None and now <= renewed + float(spec.get("leaseDurationSeconds") or 0):
            live.add((lease.get("metadata") or {}).get("name", ""))
    return live


def reap_pods(
    api: Any,
    namespace: str,
    run: str | None = None,
    *,
    orphans_only: bool = False,
    policy: RetryPolicy | None = None,
    now: float | None = None,
) -> int | None:
    """Delete sandbox pods in ``namespace``: every one of ``run`` (at run start and end), or
    with ``orphans_only`` only those whose HarnessPod's heartbeat Lease expired or is gone
    (``run`` None: of any run), and in every mode any pod past its deadline label. Returns how
    many were deleted, or None when the sweep was skipped because the LIST failed."""
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
    live = _live_leases(api, namespace, now, policy) if orphans_only else set()
    reaped = 0
    for pod in pods.get("items") or []:
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
            beat = labels.get(f"{km.LABEL}.heartbeat")
            doomed = mine and live is not None and beat is not None and beat not in live
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
