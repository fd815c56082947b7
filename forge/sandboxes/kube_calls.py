"""Calling the Kubernetes API: its errors, bounded retries and a process-wide rate limit.

Every call goes through :func:`call`: 429 (waiting at least its Retry-After; such waits use
up no attempt until they add up to ``max_throttled_s``), 5xx and connection errors are retried
with exponential backoff and jitter, a bounded number of times;
422 raises :class:`KubeInvalid` naming the fields the server rejected, never retried; 401/403
raise :class:`KubeForbidden` pointing at the RBAC to apply. Pod creation also takes a token
from a :class:`TokenBucket` shared by the process (``qps``/``burst``, each wait jittered), so a
thousand attempts starting at once reach the API server spread out. The limit is per process:
N HarnessPods may together send N times ``qps``; the jitter keeps them from doing it in step.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

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
    jitter. A 429 with Retry-After is the server pacing its clients, not a failure: its waits
    do not use up attempts until they add up to ``max_throttled_s`` (k8s_scale: with 6
    attempts at Retry-After 1, 71 of 1,000 sandboxes created at once against a 50 QPS limit
    gave up). ``sleep`` and ``rng`` are injectable for tests."""

    attempts: int = 6
    base_s: float = 0.25
    cap_s: float = 8.0
    max_retry_after_s: float = 60.0
    max_throttled_s: float = 120.0
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


_last_throttled = 0.0  # wall time of the last 429 this process was answered


def last_throttled() -> float:
    """When the API server last answered this process 429 (wall time; 0.0: never). The
    reconcile pass reads it: a Lease that went stale while the server was throttling may belong
    to a live HarnessPod whose renewals were held back."""
    return _last_throttled


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
    global _last_throttled
    policy = policy or RetryPolicy()
    what = what or f"{fn.__name__}({', '.join(a for a in args if isinstance(a, str))})"
    last, n, throttled = "", 0, 0.0
    while True:
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
                why += "forge.sandboxes.kube_cluster.cluster_manifests()"
                raise KubeForbidden(_clean(why, redact)) from None
            if e.status == 422:
                why = f"{what}: the API server rejected the manifest (422): {msg}"
                raise KubeInvalid(_clean(why, redact)) from None
            if e.status not in RETRYABLE:
                raise
            delay = policy.retry_after(e.headers) if e.status == 429 else None
            if e.status == 429:
                _last_throttled = time.time()
            last = f"HTTP {e.status} {e.reason or ''}".strip()
        except (urllib3.exceptions.HTTPError, OSError) as e:
            last = f"{type(e).__name__}: {e}"
        if delay is not None and throttled + delay <= policy.max_throttled_s:
            throttled += delay  # the server paces us (429, Retry-After): not a failed attempt
            log.info("%s: %s; again in %.2fs (throttled %.0fs so far)", what, last, delay,
                     throttled)  # fmt: skip
            policy.sleep(delay)
            continue
        n += 1
        if n >= policy.attempts:
            break
        delay = policy.backoff(n - 1) if delay is None else delay
        log.warning("%s: %s; retry %d of %d in %.2fs", what, _clean(last, redact), n,
                    policy.attempts - 1, delay)  # fmt: skip
        policy.sleep(delay)
    more = f" and {throttled:.0f}s throttled" if throttled else ""
    raise KubeError(_clean(f"{what}: gave up after {policy.attempts} attempts{more}: {last}",
                           redact))  # fmt: skip


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
