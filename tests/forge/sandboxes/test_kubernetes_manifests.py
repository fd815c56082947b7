"""The kubernetes backend's manifests (validated against the official schemas with
kubernetes-validate), names, labels, the token bucket and the retry policy: no API server."""

from __future__ import annotations

import email.utils
import itertools
import threading
import time

import kubernetes_validate
import pytest
import yaml

from forge.sandboxes import kube_cluster as kc
from forge.sandboxes import kube_manifests as km
from forge.sandboxes.agent_boot import agent_command
from forge.sandboxes.kube_calls import RetryPolicy, TokenBucket
from tests.forge.sandboxes.netpol import may_connect

pytestmark = pytest.mark.k8s
VERSIONS = ("1.31.0", kubernetes_validate.latest_version() + ".0")
LABELS = {"run": "run-1", "pod": "pod-3", "episode": "ep-0007", "attempt": "2"}


def validate(manifest: dict) -> None:
    for version in VERSIONS:
        kubernetes_validate.validate(manifest, version, strict=True)


def pod(**kw: object) -> dict:
    args: dict = dict(
        name=km.pod_name(LABELS),
        namespace="sbx",
        image="registry.example/openforge/react:1.0-abc",
        command=agent_command(listen="0.0.0.0:8937"),
        labels=km.pod_labels(LABELS, 1_900_000_000.2, "react"),
        env={"PATH": "/usr/bin:/bin", "HOME": "/home/agent"},
        token="t0k3n",
        agent_port=8937,
        deadline_s=660.5,
        resources=km.resources(1.5, 4096, 10240),
        annotations={"openforge.nonce": "abc"},
        owner={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "openforge-run-x",
            "uid": "0b7f6a64-8a3e-4c3e-9b8e-0d7d2f0e1a11",
            "blockOwnerDeletion": False,
            "controller": False,
        },
    )
    args.update(kw)
    return km.pod_manifest(**args)


def test_pod_manifest_fields_and_schema() -> None:
    m = pod()
    validate(m)
    spec, c = m["spec"], m["spec"]["containers"][0]
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 661
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == km.SANDBOX_ACCOUNT
    assert spec["enableServiceLinks"] is False
    assert c["command"][-6:] == [
        "--listen",
        "0.0.0.0:8937",
        "--workspace",
        "/workspace",
        "--home",
        "/home/agent",
    ]
    assert "/opt/forge/agent" in c["command"][3]
    assert c["ports"] == [{"name": "agent", "containerPort": 8937, "protocol": "TCP"}]
    assert (
        c["resources"]["requests"]
        == c["resources"]["limits"]
        == {"cpu": "1500m", "memory": "4096Mi", "ephemeral-storage": "10240Mi"}
    )
    sec = c["securityContext"]
    assert sec["allowPrivilegeEscalation"] is False and sec["privileged"] is False
    assert sec["capabilities"] == {"drop": ["ALL"], "add": km.CAPS}
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert {"name": "FORGE_AGENT_TOKEN", "value": "t0k3n"} in c["env"]
    labels = m["metadata"]["labels"]
    assert labels["openforge.run"] == "run-1" and labels["openforge.attempt"] == "2"
    assert labels["openforge.episode"] == "ep-0007" and labels["openforge.pod"] == "pod-3"
    assert labels["openforge.role"] == "sandbox" and labels["openforge.kind"] == "harness"
    assert labels["openforge.phase"] == "agent" and labels["openforge.network"] == "proxy-only"
    assert labels["openforge.deadline"] == "1900000002"
    assert m["metadata"]["ownerReferences"][0]["kind"] == "ConfigMap"


def test_pod_manifest_non_root_is_restricted() -> None:
    m = pod(run_as_user=1000, node_selector={"pool": "sandboxes"}, image_pull_secrets=["reg"])
    validate(m)
    assert m["spec"]["securityContext"]["runAsNonRoot"] is True
    assert m["spec"]["securityContext"]["runAsUser"] == 1000
    assert m["spec"]["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert m["spec"]["nodeSelector"] == {"pool": "sandboxes"}
    assert m["spec"]["imagePullSecrets"] == [{"name": "reg"}]
    assert "ownerReferences" in pod(owner=None)["metadata"] or True
    assert "ownerReferences" not in pod(owner=None)["metadata"]


def test_pod_names_deterministic_valid_and_distinct() -> None:
    name = km.pod_name(LABELS)
    assert name == km.pod_name(dict(reversed(list(LABELS.items()))))
    assert km.is_dns_label(name) and name.startswith("forge-ep-0007-a2-")
    others = [
        {**LABELS, "attempt": "3"},
        {**LABELS, "run": "run-2"},
        {**LABELS, "pod": "pod-4"},
        {**LABELS, "role": "verifier"},
    ]
    names = {name} | {km.pod_name(o) for o in others}
    assert len(names) == 5
    assert km.pod_name({**LABELS, "role": "verifier"}).split("-")[-2] == "v"
    weird = {"run": "R/un", "episode": "Ép_isode." * 20, "attempt": "12"}
    w = km.pod_name(weird)
    assert km.is_dns_label(w) and len(w) <= 63 and w == km.pod_name(dict(weird))
    assert km.is_dns_label(km.pod_name({}))


def test_label_values() -> None:
    assert km.label_value("run-1") == "run-1"
    bad = km.label_value("a run/with spaces" + "x" * 80)
    assert len(bad) <= 63 and km._VALUE.match(bad)
    assert km.label_value("a/b") != km.label_value("a b")  # the hash keeps them apart
    assert km._VALUE.match(km.label_value("///"))
    assert km.label_value("") == ""


HARNESS_POD = {"openforge.role": "harness-pod"}
RAY_PORTS = (6379, 8265, 10001, 52365)  # the GCS, the dashboard and its job API, Ray Client


def sandbox(run: str, phase: str, network: str) -> dict[str, str]:
    """A sandbox pod's labels as the backend writes them."""
    role = "verifier" if phase == "verify" else "harness"
    labels = km.pod_labels({"run": run, "role": role, "network": network}, 0.0, None)
    labels.pop("openforge.deadline")
    return labels


def test_network_policies_fence_each_phase() -> None:
    """Every sandbox pod is reached only from the HarnessPods, on the agent port. An agent-phase
    pod, whatever its network mode, reaches the HarnessPods' proxy ports and nothing else (no
    other port of theirs, no other pod, no address); a verify-phase pod reaches them only when
    its network goes through the egress proxy (allowlist, open), and else nothing at all."""
    ps = kc.network_policies("sbx", "run-1", 8937, proxy_ports=(21000, 21063))
    for p in ps:
        validate(p)
    names = [p["metadata"]["name"] for p in ps]
    assert len(set(names)) == 3 and all(n.startswith("openforge-sandbox-") for n in names)
    base = ps[0]["spec"]
    assert base["podSelector"]["matchLabels"] == {
        "openforge.run": "run-1",
        "openforge.role": "sandbox",
    }
    assert base["policyTypes"] == ["Ingress", "Egress"] and base["egress"] == []
    peers = [{"podSelector": {"matchLabels": HARNESS_POD}}]
    assert base["ingress"] == [{"from": peers, "ports": [{"protocol": "TCP", "port": 8937}]}]
    assert not any("Ingress" in p["spec"]["policyTypes"] for p in ps[1:])
    reach = {}
    for phase in ("agent", "verify"):
        for mode in ("none", "proxy-only", "allowlist", "open"):
            pod = sandbox("run-1", phase, mode)
            assert may_connect(ps, pod, HARNESS_POD, 21000) == may_connect(
                ps, pod, HARNESS_POD, 21063
            )
            assert not may_connect(ps, pod, HARNESS_POD, 20999)
            assert not may_connect(ps, pod, HARNESS_POD, 21064)
            assert not any(may_connect(ps, pod, HARNESS_POD, port) for port in RAY_PORTS)
            assert not may_connect(ps, pod, sandbox("run-1", "agent", "open"), 21000)
            assert not may_connect(ps, pod, {}, 443, ip="93.184.216.34")
            assert not may_connect(ps, pod, {"k8s-app": "kube-dns"}, 53)
            reach[phase, mode] = may_connect(ps, pod, HARNESS_POD, 21000)
    assert reach == {
        ("agent", "none"): True,  # its model's proxy stays: the harness needs it
        ("agent", "proxy-only"): True,
        ("agent", "allowlist"): True,
        ("agent", "open"): True,
        ("verify", "none"): False,
        ("verify", "proxy-only"): False,  # a verifier has no model of its own
        ("verify", "allowlist"): True,
        ("verify", "open"): True,
    }
    # another run's pods are not this run's policies' business
    assert may_connect(ps, sandbox("run-2", "verify", "none"), HARNESS_POD, 21000)
    q = kc.network_policies(
        "sbx",
        "run-1",
        8937,
        proxy_ports=(20000, 20999),
        harness_namespace="ray",
        proxy_cidrs=["10.0.0.5/32"],
    )
    for p in q:
        validate(p)
    eg = q[1]["spec"]["egress"][0]
    assert eg["ports"] == [{"protocol": "TCP", "port": 20000, "endPort": 20999}]
    assert eg["to"][0]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "ray"}
    }
    assert eg["to"][1] == {"ipBlock": {"cidr": "10.0.0.5/32"}}
    assert may_connect(q, sandbox("run-1", "agent", "none"), {}, 20000, ip="10.0.0.5")
    assert not may_connect(q, sandbox("run-1", "agent", "none"), {}, 20000, ip="10.0.0.6")
    single = kc.network_policies("sbx", "r", 1, proxy_ports=(8931, 8931))
    assert single[1]["spec"]["egress"][0]["ports"] == [{"protocol": "TCP", "port": 8931}]


def test_network_policies_always_name_the_proxy_ports() -> None:
    """Never "every port of the HarnessPods' pods" (Ray's raylet, object manager and dashboard
    agent listen there): with the default config, and with any config, each egress rule names
    the proxy ports, and each ingress rule the agent port; there is no way to ask for none."""
    from forge.config import KubernetesConfig
    from forge.config.sandbox import PROXY_PORTS

    kube = KubernetesConfig()
    assert kube.proxy_ports == PROXY_PORTS
    net = {k: getattr(kube, k) for k in ("harness_selector", "harness_namespace")}
    for cidrs in ([], ["10.0.0.0/24"]):
        ps = kc.network_policies("sbx", "r", kube.agent_port, proxy_ports=kube.proxy_ports,
                                 proxy_cidrs=cidrs, **net)  # fmt: skip
        lo, hi = PROXY_PORTS
        rules = [rule for p in ps for rule in p["spec"]["egress"]]
        assert len(rules) == 2
        for rule in rules:
            assert rule["ports"] == [{"protocol": "TCP", "port": lo, "endPort": hi}], rule
        for p in ps:
            validate(p)
            for rule in p["spec"].get("ingress", []):
                assert rule["ports"] == [{"protocol": "TCP", "port": kube.agent_port}], rule
    with pytest.raises(TypeError, match="proxy_ports"):
        kc.network_policies("sbx", "r", 8937)  # type: ignore[call-arg]
    for bad in [(0, 10), (9000, 8000), (1, 70000)]:
        with pytest.raises(ValueError, match="proxy_ports"):
            kc.network_policies("sbx", "r", 8937, proxy_ports=bad)


def test_rbac_and_other_objects_validate() -> None:
    objs = kc.cluster_manifests("sbx", run_account_namespace="ray")
    for o in objs:
        validate(o)
    kinds = [o["kind"] for o in objs]
    assert kinds == ["ServiceAccount", "ServiceAccount", "Role", "RoleBinding"]
    sandbox_sa, run_sa, role, binding = objs
    assert sandbox_sa["automountServiceAccountToken"] is False
    assert run_sa["metadata"]["namespace"] == "ray"
    pods = next(r for r in role["rules"] if r["resources"] == ["pods"])
    assert sorted(pods["verbs"]) == ["create", "delete", "get", "list", "watch"]
    netpols = next(r for r in role["rules"] if r["resources"] == ["networkpolicies"])
    assert sorted(netpols["verbs"]) == ["create", "get"]
    assert all("*" not in r["verbs"] and "*" not in r["resources"] for r in role["rules"])
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "openforge-run", "namespace": "ray"}
    ]
    bound = {s["name"] for o in objs if o["kind"] == "RoleBinding" for s in o["subjects"]}
    assert km.SANDBOX_ACCOUNT not in bound  # the sandbox identity can do nothing
    assert list(yaml.safe_load_all(kc.to_yaml(objs))) == objs
    for o in (
        kc.run_configmap("sbx", "run-1"),
        kc.heartbeat_lease("sbx", "run-1", "pod-3", "2026-01-01T00:00:00.000000Z", 60),
        kc.sandbox_service_account("sbx"),
    ):
        validate(o)


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_token_bucket_spreads_a_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=4, burst=3, clock=clock, sleep=clock.sleep, rng=lambda: 0.9)
    sent = []
    for _ in range(23):
        bucket.acquire()
        sent.append(clock.t)
    assert sent[:3] == [0.0, 0.0, 0.0]  # the burst goes at once
    assert all(b > a for a, b in itertools.pairwise(sent[2:]))  # then one at a time
    for start in sent:  # any one-second window holds at most burst + qps sends
        assert sum(1 for t in sent if start <= t < start + 1.0) <= 3 + 4
    later = sent[3:]
    for start in later:  # once the burst is spent, at most qps a second
        assert sum(1 for t in later if start <= t < start + 1.0) <= 4
    assert sent[-1] >= (23 - 3) / 4  # no faster than qps on average


def test_token_bucket_reservations_under_concurrency() -> None:
    waits: list[float] = []
    bucket = TokenBucket(qps=5, burst=2, clock=lambda: 100.0, sleep=waits.append, rng=lambda: 0.0)
    threads = [threading.Thread(target=bucket.acquire) for _ in range(7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(waits) == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])  # 2 went at once
    jittery = TokenBucket(
        qps=5, burst=1, clock=lambda: 0.0, sleep=lambda s: None, rng=lambda: 1.0, jitter=0.5
    )
    jittery.acquire()
    assert jittery.acquire() == pytest.approx(0.2 + 0.1)


def test_retry_policy() -> None:
    p = RetryPolicy(rng=lambda: 1.0, base_s=0.5, cap_s=4.0)
    assert [p.backoff(n) for n in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    q = RetryPolicy(rng=lambda: 0.0)
    assert q.retry_after({"Retry-After": "3"}) == 3.0
    assert q.retry_after({}) is None and q.retry_after(None) is None
    assert q.retry_after({"Retry-After": "9999"}) == q.max_retry_after_s
    when = email.utils.formatdate(time.time() + 5, usegmt=True)
    assert 3.0 <= q.retry_after({"Retry-After": when}) <= 5.0
    assert q.retry_after({"Retry-After": "soon"}) is None


def test_pod_runs_the_harness_unprivileged_on_a_quota() -> None:
    """The backend's pod: the agent drops harness commands to the images' user, the image's
    root is read-only, and every writable place is a memory-backed emptyDir of disk_mb."""
    from forge.config import SandboxConfig
    from forge.sandboxes.agent_boot import HARNESS_UID
    from forge.sandboxes.base import SandboxSpec
    from forge.sandboxes.kubernetes import KubernetesSandbox

    box = KubernetesSandbox(SandboxConfig(backend="kubernetes", disk_mb=512))
    box.name, box.image = "p", "openforge/base:x"
    m = box.manifest(SandboxSpec(labels=LABELS), "t0k3n", None, "hb")
    validate(m)
    c = m["spec"]["containers"][0]
    i = c["command"].index("--user")
    assert c["command"][i + 1] == f"{HARNESS_UID}:{HARNESS_UID}"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {v["mountPath"]: v["name"] for v in c["volumeMounts"]}
    assert set(mounts) == {"/workspace", "/home/agent", "/tmp", "/var/tmp"}
    volumes = {v["name"]: v["emptyDir"] for v in m["spec"]["volumes"]}
    assert set(volumes) == set(mounts.values())
    assert all(v == {"medium": "Memory", "sizeLimit": "512Mi"} for v in volumes.values())
    settings = box.settings.model_copy(update={"run_as_user": 2000})  # a non-root pod cannot drop
    box = KubernetesSandbox(SandboxConfig(backend="kubernetes"), settings=settings)
    box.name, box.image = "p", "openforge/base:x"
    command = box.manifest(SandboxSpec(labels=LABELS), "t", None, "hb")["spec"]["containers"][0]
    assert "--user" not in command["command"]
