"""deploy/kuberay/: every manifest against its schema (kubernetes-validate for the core kinds;
the CRD schemas of KubeRay v1.7.0, vendored in deploy/kuberay/crds/, for RayCluster and RayJob),
the RBAC file against `forge kube-rbac`, and the wiring between them: the custom resource, the
GPUs, the ServiceAccount, the labels the sandboxes' NetworkPolicy admits, the run's config. No
API server: what a real cluster would add (admission, CEL rules, the operator) is not run."""

from __future__ import annotations

import copy
import json
import shlex
import shutil
import subprocess
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from ray.autoscaler._private.kuberay.autoscaling_config import (
    _derive_autoscaling_config_from_ray_cr,
    _get_custom_resources,
)

from forge import cli, commands
from forge.config import KubernetesConfig, load_config
from forge.sandboxes import kube_cluster as kc
from forge.sandboxes import kube_manifests as km

ROOT = Path(__file__).resolve().parents[2]
KUBERAY = ROOT / "deploy" / "kuberay"
K8S_VERSIONS = ("1.31.0", kubernetes_validate.latest_version() + ".0")
CRDS = {
    "RayCluster": "ray.io_rayclusters.v1.schema.json",
    "RayJob": "ray.io_rayjobs.v1.schema.json",
}
NAMESPACE = "openforge"


def manifests() -> list[dict[str, Any]]:
    kust = yaml.safe_load((KUBERAY / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for name in kust["resources"]:
        docs += [d for d in yaml.safe_load_all((KUBERAY / name).read_text()) if d]
    return docs


def one(kind: str) -> dict[str, Any]:
    (doc,) = (d for d in manifests() if d["kind"] == kind)
    return doc


def _strict(schema: Any) -> Any:
    """The CRD's structural schema as the API server applies it with strict field validation
    (`kubectl apply`'s default): an object that lists its properties accepts no others."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def crd_validator(kind: str) -> jsonschema.Draft7Validator:
    vendored = json.loads((KUBERAY / "crds" / CRDS[kind]).read_text())
    assert vendored["kind"] == kind and vendored["version"] == "v1"
    return jsonschema.Draft7Validator(_strict(vendored["openAPIV3Schema"]))


def pod_templates(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"].get("rayClusterSpec", doc["spec"])
    out = []
    if "headGroupSpec" in spec:
        out.append(spec["headGroupSpec"]["template"])
        out += [g["template"] for g in spec["workerGroupSpecs"]]
    if "submitterPodTemplate" in doc["spec"]:
        out.append(doc["spec"]["submitterPodTemplate"])
    return out


def validate(doc: dict[str, Any]) -> None:
    """Raise on a manifest its schema refuses."""
    if doc["kind"] in CRDS:
        assert doc["apiVersion"] == "ray.io/v1"
        crd_validator(doc["kind"]).validate(doc)
        # The CRD keeps a pod template's metadata open: check each template as a PodTemplate.
        for i, template in enumerate(pod_templates(doc)):
            wrapped = {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": f"{doc['metadata']['name']}-{i}", "namespace": NAMESPACE},
                "template": template,
            }
            for version in K8S_VERSIONS:
                kubernetes_validate.validate(wrapped, version, strict=True)
        return
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(doc, version, strict=True)


def test_every_manifest_validates() -> None:
    docs = manifests()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        [
            "Namespace",
            "ServiceAccount",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "PersistentVolumeClaim",
            "PersistentVolumeClaim",
            "RayCluster",
            "RayJob",
        ]
    )
    for doc in docs:
        validate(doc)
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]["name"]


def test_kustomization_lists_every_manifest() -> None:
    listed = set(yaml.safe_load((KUBERAY / "kustomization.yaml").read_text())["resources"])
    assert listed == {p.name for p in KUBERAY.glob("*.yaml")} - {"kustomization.yaml"}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kubectl_kustomize_builds_it() -> None:
    """`kubectl apply -k deploy/kuberay` starts from this build (offline: no API server)."""
    done = subprocess.run(
        ["kubectl", "kustomize", str(KUBERAY)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    built = [d for d in yaml.safe_load_all(done.stdout) if d]
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, built)) == sorted(map(key, manifests()))
    templates = [t for d in built if d["kind"] in CRDS for t in pod_templates(d)]
    images = {c["image"] for t in templates for c in t["spec"]["containers"]}
    assert images == {"openforge/ray:2.60.0"}


def test_rbac_is_what_forge_kube_rbac_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["kube-rbac", "--namespace", NAMESPACE]) == 0
    printed = capsys.readouterr().out
    committed = (KUBERAY / "sandbox-rbac.yaml").read_text()
    body = "".join(line for line in committed.splitlines(True) if not line.startswith("#"))
    assert body == printed, "regenerate: forge kube-rbac --namespace openforge"


def _groups() -> dict[str, dict[str, Any]]:
    spec = one("RayCluster")["spec"]
    return {"head": spec["headGroupSpec"], **{g["groupName"]: g for g in spec["workerGroupSpecs"]}}


def custom_resources(group: dict[str, Any]) -> dict[str, float]:
    """Ray's --resources of a group, read the three ways it is read: by the shell KubeRay starts
    `ray start` with, by KubeRay 1.7 (getResourcesMap: outer quotes trimmed, JSON), and by Ray's
    KubeRay autoscaler; all three must agree."""
    params = group.get("rayStartParams", {})
    raw = params.get("resources")
    if raw is None:
        return {}
    (word,) = shlex.split(raw)
    shell = json.loads(word)
    assert json.loads(raw.strip("'\"` ")) == shell
    assert _get_custom_resources({}, params, group.get("groupName", "head")) == shell
    return shell


def _container(group: dict[str, Any]) -> dict[str, Any]:
    return group["template"]["spec"]["containers"][0]


def test_harness_pod_resource_only_on_the_cpu_group() -> None:
    groups = _groups()
    assert custom_resources(groups["cpu"]) == {"harness_pod": 8}
    assert custom_resources(groups["head"]) == {} and custom_resources(groups["gpu"]) == {}
    assert "nvidia.com/gpu" not in _container(groups["cpu"])["resources"]["limits"]


def test_rays_kuberay_autoscaler_reads_the_cluster() -> None:
    """The autoscaler sidecar turns the RayCluster into a `ray up`-style config and validates it
    with Ray's cluster-config schema: the node types it will scale are the ones we meant."""
    config = _derive_autoscaling_config_from_ray_cr(copy.deepcopy(one("RayCluster")))
    types = config["available_node_types"]
    assert set(types) == {"headgroup", "gpu", "cpu"}
    assert types["cpu"]["resources"]["harness_pod"] == 8
    assert types["cpu"]["resources"]["CPU"] == 4 and "GPU" not in types["cpu"]["resources"]
    assert types["gpu"]["resources"]["GPU"] == 4 and "harness_pod" not in types["gpu"]["resources"]
    assert "harness_pod" not in types["headgroup"]["resources"]
    assert not types["headgroup"]["resources"].get("GPU")
    assert (types["gpu"]["min_workers"], types["gpu"]["max_workers"]) == (1, 2)
    assert (types["cpu"]["min_workers"], types["cpu"]["max_workers"]) == (1, 16)
    assert config["idle_timeout_minutes"] == 10


def test_gpu_group_has_gpus_and_bounds_are_sane() -> None:
    groups = _groups()
    assert int(_container(groups["gpu"])["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    assert groups["head"]["rayStartParams"]["num-gpus"] == "0"
    for name in ("gpu", "cpu"):
        g = groups[name]
        assert 0 <= g["minReplicas"] <= g["replicas"] <= g["maxReplicas"], name
    assert one("RayCluster")["spec"]["rayVersion"] == "2.60.0"
    assert version("ray") == "2.60.0"  # the image's Ray must match the project's pin


def test_harness_pods_can_make_sandboxes_and_sandboxes_can_reach_them() -> None:
    cpu = _groups()["cpu"]["template"]
    account = cpu["spec"]["serviceAccountName"]
    assert account == km.RUN_ACCOUNT
    bound = {
        s["name"]
        for d in manifests()
        if d["kind"] == "RoleBinding"
        for s in d["subjects"]
        if s["namespace"] == NAMESPACE
    }
    assert account in bound
    env = {e["name"]: e for e in _container(_groups()["cpu"])["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    # The NetworkPolicies the run applies (the run's config, as the RayJob gives it) admit
    # egress from its sandboxes to these pods, and validate.
    kube = KubernetesConfig(namespace=NAMESPACE)
    policies = kc.network_policies(
        NAMESPACE,
        "gpu-claw",
        kube.agent_port,
        proxy_ports=kube.proxy_ports,
        harness_selector=kube.harness_selector,
    )
    rules = [rule for policy in policies for rule in policy["spec"]["egress"]]
    for policy in policies:
        validate(policy)
    assert rules
    for egress in rules:
        (peer,) = egress["to"]
        assert peer["podSelector"]["matchLabels"].items() <= cpu["metadata"]["labels"].items()
        for name in ("head", "gpu"):  # no other Ray pod is a peer of the sandboxes
            labels = _groups()[name]["template"]["metadata"]["labels"]
            assert not peer["podSelector"]["matchLabels"].items() <= labels.items()
    # Of those pods, the sandboxes reach the proxy ports only: none that Ray listens on there.
    (ports,) = {(p["port"], p.get("endPort", p["port"])) for e in rules for p in e["ports"]}
    opened = range(ports[0], ports[1] + 1)
    assert list(opened) == list(range(kube.proxy_ports[0], kube.proxy_ports[1] + 1))
    declared = {p["containerPort"] for p in _container(_groups()["cpu"]).get("ports", [])}
    declared |= {int(v) for k, v in _groups()["cpu"]["rayStartParams"].items() if "port" in k}
    rays = {6379, 8000, 8076, 8080, 8265, 9000, 10001, 52365} | set(range(10002, 20000))
    assert declared and not (declared | rays) & set(opened)
    assert max(opened) < 32768  # Ray's random ports are drawn above the ephemeral port


def test_ray_token_authentication_is_on() -> None:
    """The RayCluster asks KubeRay for Ray's token authentication; nothing in a pod template
    overrides the mode or the token KubeRay injects (it adds them only where absent); the
    RayJob runs on that cluster, so its submitter gets them; and the docs name the Secret the
    operator makes (the cluster's name, as no secretName is set)."""
    cluster = one("RayCluster")
    assert cluster["spec"]["authOptions"] == {"mode": "token"}
    major, minor, _ = (int(x) for x in cluster["spec"]["rayVersion"].split("."))
    assert (major, minor) >= (2, 52)  # Ray's first with token authentication
    for doc in (cluster, one("RayJob")):
        for template in pod_templates(doc):
            for c in template["spec"]["containers"]:
                names = {e["name"] for e in c.get("env", [])}
                assert not names & {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"}
    selector = one("RayJob")["spec"]["clusterSelector"]
    assert selector == {"ray.io/cluster": cluster["metadata"]["name"]}
    cloud = (ROOT / "docs" / "cloud.md").read_text()
    secret = cluster["metadata"]["name"]
    assert f"get secret {secret} " in cloud and "RAY_AUTH_MODE=token" in cloud


def test_rayjob_runs_forge_run_with_a_valid_config() -> None:
    job = one("RayJob")
    assert job["spec"]["clusterSelector"] == {
        "ray.io/cluster": one("RayCluster")["metadata"]["name"]
    }
    entrypoint = job["spec"]["entrypoint"]
    assert subprocess.run(["bash", "-n", "-c", entrypoint]).returncode == 0
    words = shlex.split(entrypoint)
    start = words.index("forge")
    assert words[:start] == ["cd", "/home/ray/openforge", "&&"]
    args = cli.parse(words[start + 1 :])
    assert args.command == "run"
    path, overrides = commands._config_and_overrides(args)
    assert path is not None
    config = load_config(ROOT / path, overrides)  # raises on an unknown or invalid key
    assert config.sandbox.backend == "kubernetes"
    assert config.sandbox.kubernetes.namespace == NAMESPACE
    assert config.proxy.host == "0.0.0.0"
    assert config.runs_dir.startswith("/home/ray/runs")


def _set(path: str, value: Any) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        *keys, last = path.split(".")
        for k in keys:
            doc = doc[int(k)] if isinstance(doc, list) else doc[k]
        doc[last] = value

    return edit


BROKEN = {
    "RayCluster: misspelt workerGroupSpecs": ("RayCluster", _set("spec.workerGroupSpec", [])),
    "RayCluster: replicas as text": ("RayCluster", _set("spec.workerGroupSpecs.1.replicas", "1")),
    "RayCluster: rayStartParams value not a string": (
        "RayCluster",
        _set("spec.workerGroupSpecs.1.rayStartParams.num-cpus", 4),
    ),
    "RayCluster: no containers in a pod template": (
        "RayCluster",
        _set("spec.headGroupSpec.template.spec.containers", None),
    ),
    "RayCluster: unknown key in a template's metadata": (
        "RayCluster",
        _set("spec.workerGroupSpecs.1.template.metadata.label", {"openforge.role": "x"}),
    ),
    "RayCluster: an auth mode Ray does not have": (
        "RayCluster",
        _set("spec.authOptions", {"mode": "password"}),
    ),
    "RayJob: entrypoint not a string": ("RayJob", _set("spec.entrypoint", ["forge", "run"])),
    "RayJob: unknown submission mode field": ("RayJob", _set("spec.submitMode", "K8sJobMode")),
    "Role: verbs not a list": ("Role", _set("rules.0.verbs", "create")),
    "PersistentVolumeClaim: unknown field": ("PersistentVolumeClaim", _set("spec.size", "1Gi")),
}


@pytest.mark.parametrize("case", BROKEN.values(), ids=BROKEN.keys())
def test_broken_manifests_fail(case: tuple[str, Any]) -> None:
    kind, edit = case
    doc = copy.deepcopy(next(d for d in manifests() if d["kind"] == kind))
    edit(doc)
    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        validate(doc)


def test_the_escaped_resources_form_is_refused() -> None:
    """The form in KubeRay's older samples passes the shell and Ray's autoscaler, but KubeRay
    1.7's own parse of it fails (it then logs an error and skips adding accelerators)."""
    group = {"groupName": "cpu", "rayStartParams": {"resources": '"{\\"harness_pod\\": 8}"'}}
    with pytest.raises(json.JSONDecodeError):
        custom_resources(group)
