"""The API side of the kubernetes backend: the API client, and creating, watching and deleting
one pod; every call with bounded retries, pod creation under a process-wide rate limit
(:mod:`forge.sandboxes.kube_calls`).

:func:`create_pod` handles a 409 (adopt our own earlier POST, replace a stale try of the same
attempt, refuse anyone else's pod); :func:`wait_running` watches a pod until it runs, riding
out dropped watches. Tested against kmock (an emulated API server; no real one can be
installed here).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import urllib3
from kubernetes import client, watch
from kubernetes import config as kconfig
from kubernetes.client.exceptions import ApiException

from forge.config import KubernetesConfig
from forge.sandboxes import agent_client as ac
from forge.sandboxes import kube_manifests as km
from forge.sandboxes.bwrap import IsolationUnavailable
from forge.sandboxes.kube_calls import (
    KubeError,
    RetryPolicy,
    TokenBucket,
    call,
    call_unless,
    delete_pod,
)

log = logging.getLogger(__name__)
NONCE = f"{km.LABEL}.nonce"  # annotation: which create() made the pod (not a secret)


class KubeUnavailable(IsolationUnavailable):
    """The Kubernetes API cannot be reached or used as configured (checked at run start)."""


class PodStartError(ac.AgentUnavailable):
    """The pod did not start (failed, or pending past its timeout; then it was deleted)."""


# Connections kept open to the API server per process. A HarnessPod runs up to ~125 sandboxes
# at once, each with a request (or watch) in flight while it starts or stops; with a smaller
# pool every request beyond it opens a new connection (a TLS handshake on a real server) that
# urllib3 then discards with a warning (k8s_scale: 32 kept ~0.6 extra connections a sandbox).
POOL_SIZE = 256
_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


def api_client(settings: KubernetesConfig) -> Any:
    """A kubernetes ApiClient for ``settings`` (one per process and address): ``api_url``
    as is (no auth: kubectl proxy, kmock), else the kubeconfig (file, context), else the
    in-cluster service account, else the default kubeconfig. Retries are ours, not urllib3's."""
    key = (settings.api_url, settings.kubeconfig, settings.context)
    with _clients_lock:
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
            "set sandbox.kubernetes.kubeconfig / .context, or sandbox.kubernetes.api_url"
        ) from e
    cfg.retries, cfg.connection_pool_maxsize = False, POOL_SIZE
    with _clients_lock:
        return _clients.setdefault(key, client.ApiClient(cfg))


def check(settings: KubernetesConfig, api: Any = None) -> None:
    """KubeUnavailable unless the run's identity can list pods in the namespace."""
    core = client.CoreV1Api(api or api_client(settings))
    try:
        call(core.list_namespaced_pod, settings.namespace, limit=1, policy=RetryPolicy(3))
    except Exception as e:
        raise KubeUnavailable(f"Kubernetes API unusable in {settings.namespace}: {e}") from e


def create_pod(
    api: Any,
    namespace: str,
    manifest: dict[str, Any],
    *,
    policy: RetryPolicy | None,
    bucket: TokenBucket | None,
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


def delete_if_ours(api: Any, namespace: str, manifest: dict[str, Any], policy: Any) -> None:
    """After a failed create: delete the pod if a POST of ours landed after all."""
    meta = manifest["metadata"]
    quick = RetryPolicy(attempts=2, timeout_s=10, max_throttled_s=10)
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
