"""The Kubernetes objects beside the sandbox Pods (:mod:`forge.sandboxes.kube_manifests`), as
plain dicts (pure functions).

Per run, NetworkPolicies by phase (DESIGN decision 13): every sandbox pod is reached only
from the HarnessPods, on the agent port, and reaches nothing; an agent-phase pod may also
reach the HarnessPods' proxy ports (its model, and the egress proxy when its phase has a key),
and so may a verify-phase pod whose network is ``allowlist`` or ``open`` (the egress proxy).
A verifier pod of a ``none`` or ``proxy-only`` verify phase reaches nothing at all: the
verifier has no model of its own (a judge runs in the HarnessPod). A ConfigMap stands for
the run and owns every pod (deleting it makes the garbage collector delete them). Per
HarnessPod, a Lease carries its heartbeat.

:func:`cluster_manifests` is the RBAC a cluster admin applies once per namespace: the sandbox
ServiceAccount (bound to nothing, no token mounted) and the run's own ServiceAccount, Role and
RoleBinding. Every manifest here validates against the official schemas (tests, with
``kubernetes-validate``).
"""

from __future__ import annotations

from typing import Any

from forge.sandboxes.kube_manifests import (
    HARNESS_SELECTOR,
    LABEL,
    ROLE_SANDBOX,
    RUN_ACCOUNT,
    SANDBOX_ACCOUNT,
    digest,
    label_value,
    run_labels,
)


def _peers(
    harness_selector: dict[str, str], harness_namespace: str | None, proxy_cidrs: list[str]
) -> list[dict[str, Any]]:
    peer: dict[str, Any] = {"podSelector": {"matchLabels": dict(harness_selector)}}
    if harness_namespace is not None:
        ns = {"kubernetes.io/metadata.name": harness_namespace}
        peer["namespaceSelector"] = {"matchLabels": ns}
    return [peer] + [{"ipBlock": {"cidr": c}} for c in proxy_cidrs]


def network_policy_name(run: str, phase: str = "") -> str:
    base = f"openforge-sandbox-{digest(run)}"
    return f"{base}-{phase}" if phase else base


PHASE_REACHES_PROXY: dict[str, list[str] | None] = {
    "agent": None,  # every network mode: the harness needs its model's proxy
    "verify": ["allowlist", "open"],  # the egress proxy only: a verifier has no model
}


def network_policies(
    namespace: str,
    run: str,
    agent_port: int,
    *,
    proxy_ports: tuple[int, int],
    harness_selector: dict[str, str] | None = None,
    harness_namespace: str | None = None,
    proxy_cidrs: list[str] | None = None,
) -> list[dict[str, Any]]:
    """The run's NetworkPolicies, by phase. The first selects every sandbox pod of the run:
    reached only from the HarnessPods (pods labelled ``harness_selector``, in
    ``harness_namespace`` or the sandboxes' own; or addresses in ``proxy_cidrs``) on the agent
    port, and no egress. Policies add up, so each of the others opens, for the pods of one
    phase (the ``openforge.phase`` label; for verify, also its ``openforge.network`` mode), the
    HarnessPods' proxy ports (``proxy_ports``: an inclusive range, where each HarnessPod's
    model and egress proxies listen; never any port of theirs, which would open Ray's own).
    Nothing else, in any phase: no DNS, no other pod (another sandbox included), no internet;
    what an ``allowlist`` or ``open`` phase reaches beyond is the egress proxy's to decide."""
    lo, hi = proxy_ports
    if not 1 <= lo <= hi <= 65535:
        raise ValueError(f"proxy_ports: expected (first, last), 1 <= first <= last: {proxy_ports}")
    peers = _peers(harness_selector or HARNESS_SELECTOR, harness_namespace, proxy_cidrs or [])
    port: dict[str, Any] = {"protocol": "TCP", "port": lo}
    if hi > lo:
        port["endPort"] = hi
    sandboxes = {**run_labels(run), f"{LABEL}.role": ROLE_SANDBOX}

    def policy(phase: str, spec: dict[str, Any]) -> dict[str, Any]:
        meta = {"name": network_policy_name(run, phase), "namespace": namespace}
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {**meta, "labels": run_labels(run)},
            "spec": spec,
        }

    out = [
        policy(
            "",
            {
                "podSelector": {"matchLabels": sandboxes},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": peers, "ports": [{"protocol": "TCP", "port": agent_port}]}],
                "egress": [],
            },
        )
    ]
    for phase, modes in PHASE_REACHES_PROXY.items():
        selector: dict[str, Any] = {"matchLabels": {**sandboxes, f"{LABEL}.phase": phase}}
        if modes is not None:
            selector["matchExpressions"] = [
                {"key": f"{LABEL}.network", "operator": "In", "values": list(modes)}
            ]
        spec = {"podSelector": selector, "policyTypes": ["Egress"]}
        out.append(policy(phase, {**spec, "egress": [{"to": peers, "ports": [port]}]}))
    return out


def run_configmap(namespace: str, run: str) -> dict[str, Any]:
    """The object that stands for the run: every sandbox pod and heartbeat Lease is owned by
    it, so deleting it (``kubectl delete configmap openforge-run-...``) deletes them all."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"openforge-run-{digest(run)}",
            "namespace": namespace,
            "labels": run_labels(run),
        },
        "data": {"run": run},
    }


def lease_name(run: str, pod: str) -> str:
    return f"openforge-hb-{digest(run, pod)}"


def heartbeat_lease(
    namespace: str, run: str, pod: str, renew_time: str, ttl_s: int, owner: dict | None = None
) -> dict[str, Any]:
    """A HarnessPod's heartbeat: a Lease it renews every few seconds; its sandbox pods are
    orphans once ``renewTime + leaseDurationSeconds`` has passed (or the Lease is gone)."""
    meta: dict[str, Any] = {
        "name": lease_name(run, pod),
        "namespace": namespace,
        "labels": {**run_labels(run), f"{LABEL}.pod": label_value(pod)},
    }
    if owner is not None:
        meta["ownerReferences"] = [owner]
    spec = {
        "holderIdentity": label_value(pod),
        "leaseDurationSeconds": int(ttl_s),
        "renewTime": renew_time,
    }
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


def sandbox_service_account(namespace: str, name: str = SANDBOX_ACCOUNT) -> dict[str, Any]:
    """The sandboxes' identity: bound to no Role, and its token is never mounted."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace, "labels": {f"{LABEL}.role": "sandbox"}},
        "automountServiceAccountToken": False,
    }


RUN_RULES = [  # what the run's identity may do in the sandbox namespace, and nothing more
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["create", "get", "list", "watch", "delete"],
    },
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["networkpolicies"],
        "verbs": ["create", "get"],
    },
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get", "delete"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["create", "get", "list", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get"]},
]


def cluster_manifests(
    namespace: str,
    *,
    run_account: str = RUN_ACCOUNT,
    run_account_namespace: str | None = None,
    sandbox_account: str = SANDBOX_ACCOUNT,
) -> list[dict[str, Any]]:
    """What a cluster admin applies once (``kubectl apply -f``) in the sandbox namespace: the
    sandboxes' ServiceAccount (no RoleBinding: it can do nothing), and the run's identity: a
    ServiceAccount (in ``run_account_namespace`` when the Ray pods live elsewhere), a Role with
    exactly :data:`RUN_RULES` (pods create/get/list/watch/delete; networkpolicies create/get;
    the run's ConfigMap create/get/delete; heartbeat Leases; serviceaccounts get) and the
    RoleBinding between them."""
    account_ns = run_account_namespace or namespace
    out = [sandbox_service_account(namespace, sandbox_account)]
    out.append(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": run_account, "namespace": account_ns},
        }
    )
    out.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": run_account, "namespace": namespace},
            "rules": [dict(r) for r in RUN_RULES],
        }
    )
    out.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": run_account, "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": run_account,
            },
            "subjects": [{"kind": "ServiceAccount", "name": run_account, "namespace": account_ns}],
        }
    )
    return out


def to_yaml(manifests: list[dict[str, Any]]) -> str:
    """Manifests as one multi-document YAML text, for ``kubectl apply -f -``."""
    import yaml

    return yaml.safe_dump_all(manifests, sort_keys=False)
