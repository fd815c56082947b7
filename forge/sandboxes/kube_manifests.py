"""The sandbox Pods of the kubernetes backend, as plain dicts (pure functions): their names,
labels, resources and spec, and what a pod's status says.

A sandbox is one Pod per attempt: the sandbox agent (:mod:`forge.sandboxes.agent`, baked into
the images at ``/opt/forge/agent`` by ``forge image build``) is its container's command,
listening on ``0.0.0.0:<agent_port>``; its token is the ``FORGE_AGENT_TOKEN`` variable of the
pod spec (see :mod:`forge.sandboxes.kubernetes` for why not a Secret). The objects beside the
pods (per run, per HarnessPod, per namespace) are :mod:`forge.sandboxes.kube_cluster`. Every
manifest here validates against the official schemas (tests, with ``kubernetes-validate``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

LABEL = "openforge"  # label keys: openforge.run, .pod, .episode, .attempt, .role, .phase, ...
ROLE_SANDBOX = "sandbox"
HARNESS_SELECTOR = {f"{LABEL}.role": "harness-pod"}  # how the HarnessPods' pods are labelled
SANDBOX_ACCOUNT = "openforge-sandbox"
RUN_ACCOUNT = "openforge-run"
CONTAINER = "sandbox"
CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"]  # as docker
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
FATAL_WAITING = {"InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"}
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def digest(*parts: str, n: int = 10) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:n]


def label_value(text: str) -> str:
    """``text`` as a valid label value (<= 63 characters of ``[A-Za-z0-9_.-]``, alphanumeric at
    both ends): unchanged when it already is one, else cleaned and suffixed with a hash of the
    original, so distinct values stay distinct."""
    if len(text) <= 63 and _VALUE.match(text):
        return text
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")[:52].rstrip("-_.")
    return f"{clean}-{digest(text, n=8)}" if clean else f"x-{digest(text, n=8)}"


def dns_label(text: str, limit: int = 63) -> str:
    """A lower-case DNS-1123 label made of ``text`` (may be empty), at most ``limit`` long."""
    out = re.sub(r"[^a-z0-9-]+", "-", text.lower())
    return re.sub(r"-+", "-", out)[:limit].strip("-")


def is_dns_label(name: str) -> bool:
    return len(name) <= 63 and bool(_DNS.match(name))


def pod_name(labels: dict[str, str]) -> str:
    """A deterministic pod name for an attempt's sandbox: ``forge-<episode>-a<attempt>[-v]-<hash>``
    (a DNS-1123 label, <= 63 characters); the hash covers every label (run, HarnessPod,
    episode, attempt, role), so the same attempt always gets the same name and a retried create
    is idempotent, while two runs or a harness and its verifier never collide."""
    h = digest(json.dumps(sorted(labels.items())))
    attempt = dns_label(str(labels.get("attempt", "")), 6)
    tail = (f"-a{attempt}" if attempt else "") + ("-v" if labels.get("role") == "verifier" else "")
    head = dns_label(str(labels.get("episode") or labels.get("run") or ""), 63)
    room = 63 - len("forge-") - len(tail) - 1 - len(h)
    head = head[:room].strip("-")
    return "-".join(p for p in ("forge", head) if p) + f"{tail}-{h}"


def run_labels(run: str) -> dict[str, str]:
    return {f"{LABEL}.run": label_value(run)}


def pod_labels(spec_labels: dict[str, str], deadline: float, harness: str | None) -> dict[str, str]:
    """The pod's labels: every spec label under ``openforge.`` (values made valid), the role
    (``sandbox``; a verifier's sandbox keeps ``role=verifier`` as ``openforge.kind``), its
    phase (``agent``, or ``verify`` for a verifier) and the phase's ``network`` mode (the spec's
    label; without one, the least: ``proxy-only``, ``none``), which the run's NetworkPolicies
    select on, the harness, and the deadline in epoch seconds (the reaper deletes pods past it)."""
    out = {f"{LABEL}.{k}": label_value(str(v)) for k, v in spec_labels.items() if k != "role"}
    out.setdefault(f"{LABEL}.run", "")
    kind = spec_labels.get("role", "harness")
    out[f"{LABEL}.kind"] = label_value(kind)
    out[f"{LABEL}.phase"] = "verify" if kind == "verifier" else "agent"
    out.setdefault(f"{LABEL}.network", "none" if kind == "verifier" else "proxy-only")
    out[f"{LABEL}.role"] = ROLE_SANDBOX
    out[f"{LABEL}.deadline"] = str(math.ceil(deadline) + 1)
    out[f"{LABEL}.harness"] = label_value(harness or "")
    return out


def quantity_cpu(cpus: float) -> str:
    milli = max(1, round(cpus * 1000))
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def resources(cpus: float, memory_mb: int, ephemeral_mb: int) -> dict[str, Any]:
    """Requests equal to limits (the Guaranteed QoS class: a sandbox is never starved below
    what it was promised, and never evicted before best-effort pods)."""
    amounts = {
        "cpu": quantity_cpu(cpus),
        "memory": f"{memory_mb}Mi",
        "ephemeral-storage": f"{ephemeral_mb}Mi",
    }
    return {"requests": dict(amounts), "limits": dict(amounts)}


def owner_reference(obj: dict[str, Any]) -> dict[str, Any]:
    """An ownerReference to ``obj`` (as the API server returned it: it needs its uid)."""
    meta = obj["metadata"]
    return {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj.get("kind", "ConfigMap"),
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": False,
        "controller": False,
    }


def pod_manifest(
    *,
    name: str,
    namespace: str,
    image: str,
    command: list[str],
    labels: dict[str, str],
    env: dict[str, str],
    token: str,
    agent_port: int,
    deadline_s: float,
    resources: dict[str, Any],
    annotations: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
    service_account: str = SANDBOX_ACCOUNT,
    run_as_user: int | None = None,
    node_selector: dict[str, str] | None = None,
    image_pull_secrets: list[str] | None = None,
    workdir: str = "/workspace",
    home: str = "/home/agent",
    disk_mb: int | None = None,
) -> dict[str, Any]:
    """The sandbox pod. Runs as root with Docker's default capabilities minus NET_RAW and the
    like (``drop: [ALL]``, then the seven of :data:`CAPS` added back, as the docker backend;
    the Pod Security "baseline" level admits it) or, with ``run_as_user``, as that non-root
    user with no capability at all ("restricted"); never privileged, no privilege escalation,
    the runtime's default seccomp profile, no service account token, no service links. As
    root, the agent (``command``, with ``--user``) runs the harness as the image's
    unprivileged user, which cannot read the agent's environment (the token) or memory.

    The image's root file system is read-only; the writable places (``workdir``, ``home``,
    /tmp, /var/tmp) are memory-backed emptyDir volumes of ``disk_mb`` each (``sizeLimit``: a
    tmpfs of that size, so a full one is ENOSPC for the command, not an eviction; the pages
    count in the memory limit)."""
    root = run_as_user is None
    pod_security: dict[str, Any] = {"seccompProfile": {"type": "RuntimeDefault"}}
    if not root:
        pod_security.update(runAsNonRoot=True, runAsUser=run_as_user, runAsGroup=run_as_user)
        pod_security["fsGroup"] = run_as_user
    caps: dict[str, Any] = {"drop": ["ALL"]}
    if root:
        caps["add"] = list(CAPS)
    env_list = [{"name": k, "value": v} for k, v in env.items()]
    env_list.append({"name": "FORGE_AGENT_TOKEN", "value": token})
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    places = [("workspace", workdir), ("home", home), ("tmp", "/tmp"), ("var-tmp", "/var/tmp")]
    empty_dir: dict[str, Any] = {"medium": "Memory"}
    if disk_mb is not None:
        empty_dir["sizeLimit"] = f"{disk_mb}Mi"
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        meta["ownerReferences"] = [owner]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": max(1, math.ceil(deadline_s)),
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "serviceAccountName": service_account,
        "enableServiceLinks": False,
        "hostname": "sandbox",
        "securityContext": pod_security,
        "containers": [
            {
                "name": CONTAINER,
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": list(command),
                "workingDir": workdir,
                "env": env_list,
                "ports": [{"name": "agent", "containerPort": agent_port, "protocol": "TCP"}],
                "resources": resources,
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "privileged": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": caps,
                },
                "volumeMounts": [{"name": n, "mountPath": p} for n, p in places],
            }
        ],
        "volumes": [{"name": n, "emptyDir": empty_dir} for n, _ in places],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in image_pull_secrets]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def pod_state(pod: dict[str, Any]) -> tuple[str, str]:
    """("running", pod IP) | ("failed", why) | ("pending", why)."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    state = next(iter(c.get("state") or {} for c in status.get("containerStatuses") or []), {})
    term, waiting = state.get("terminated") or {}, state.get("waiting") or {}
    if phase in ("Failed", "Succeeded") or term:
        bits = [f"phase {phase}", status.get("reason"), status.get("message")]
        if term:
            bits += [f"container {term.get('reason')} (exit {term.get('exitCode')})"]
            bits += [term.get("message")]
        return "failed", "; ".join(str(b) for b in bits if b)
    if waiting.get("reason") in FATAL_WAITING:
        return "failed", f"{waiting.get('reason')}: {waiting.get('message', '')}"
    if phase == "Running" and status.get("podIP"):
        return "running", str(status["podIP"])
    why = [f"phase {phase}"]
    if waiting:
        why.append(f"{waiting.get('reason')}: {waiting.get('message', '')}".rstrip(": "))
    for cond in status.get("conditions") or []:
        if cond.get("status") == "False" and cond.get("message"):
            why.append(f"{cond.get('type')}: {cond.get('message')}")
    return "pending", "; ".join(why)
