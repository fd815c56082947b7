"""NetworkPolicy egress as Kubernetes defines it, for tests (kmock stores policies but nothing
enforces them): a pod selected by any policy with ``Egress`` among its types may open only the
connections some such policy's rule allows (policies add up); a pod no such policy selects may
open any. Peers are matched by pod labels or address; ``namespaceSelector`` is left to the
caller (every pod here is in one namespace)."""

from __future__ import annotations

import ipaddress
from typing import Any


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (``matchLabels`` and ``matchExpressions``) against ``labels``."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _peer(peer: dict[str, Any], labels: dict[str, str], ip: str | None) -> bool:
    if "ipBlock" in peer:
        return ip is not None and ipaddress.ip_address(ip) in ipaddress.ip_network(
            peer["ipBlock"]["cidr"]
        )
    return "podSelector" in peer and selects(peer["podSelector"], labels)


def _port(ports: list[dict[str, Any]], port: int) -> bool:
    return not ports or any(
        p.get("protocol", "TCP") == "TCP" and p["port"] <= port <= p.get("endPort", p["port"])
        for p in ports
    )


def may_connect(
    policies: list[dict[str, Any]],
    pod: dict[str, str],
    to: dict[str, str],
    port: int,
    ip: str | None = None,
) -> bool:
    """Whether a pod labelled ``pod`` may connect to one labelled ``to`` (at ``ip``) on TCP
    ``port`` under ``policies``."""
    mine = [
        p["spec"]
        for p in policies
        if "Egress" in p["spec"].get("policyTypes", []) and selects(p["spec"]["podSelector"], pod)
    ]
    if not mine:
        return True
    return any(
        (not rule.get("to") or any(_peer(peer, to, ip) for peer in rule["to"]))
        and _port(rule.get("ports", []), port)
        for spec in mine
        for rule in spec.get("egress", [])
    )
