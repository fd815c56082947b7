"""The sandbox part of :class:`forge.config.RunConfig`: ``sandbox``, ``sandbox.kubernetes`` and
``sandbox.warm_pool`` (import them from ``forge.config``), and :class:`Strict`, every section's
base."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from forge.config.network import NetworkConfig


class Strict(BaseModel):
    """A config section: unknown keys are refused, naming them."""

    model_config = ConfigDict(extra="forbid")


# The default proxy ports: clear of Ray's and Serve's own (6379, 8000, 8076, 8080, 8265, 9000,
# 10001-19999 for workers, 52365, and the random ones, >= 32768).
PROXY_PORTS = (21000, 21063)


class KubernetesConfig(Strict):
    """``sandbox.kubernetes``: where and how the kubernetes backend makes its pods."""

    namespace: str = Field(
        "openforge",
        pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        description="Namespace of the sandbox pods (its RBAC: `forge kube-rbac --namespace NS`).",
    )
    api_url: str | None = Field(
        None,
        pattern=r"^https?://",
        description="API server URL used as is, without auth (kubectl proxy, kmock). None: "
        "kubeconfig/context, else in-cluster, else the default kubeconfig.",
    )
    kubeconfig: str | None = Field(None, description="Path of a kubeconfig file.")
    context: str | None = Field(None, description="kubeconfig context to use.")
    registry: str | None = Field(
        None, description="Images are <registry>/openforge/<harness>:<version> (None: local)."
    )
    agent_port: int = Field(8937, ge=1, le=65535, description="Sandbox agent port in each pod.")
    pod_start_timeout_s: float = Field(
        180.0, gt=0, description="A pod still pending after this is deleted and retried."
    )
    qps: float = Field(10.0, gt=0, description="Pod creations per second per process.")
    burst: int = Field(20, ge=1, description="Pod creations a process may send at once.")
    ephemeral_storage_mb: int = Field(
        10240, ge=1, description="Ephemeral storage request and limit per pod (MiB)."
    )
    run_as_user: int | None = Field(
        None,
        ge=0,
        description="UID of the whole pod (None: the agent runs as root and drops every harness "
        "command to the images' unprivileged user, out of reach of its token; set: agent and "
        "harness share this uid, so the harness could read the token).",
    )
    harness_selector: dict[str, str] = Field(
        default_factory=lambda: {"openforge.role": "harness-pod"},
        description="Labels of the HarnessPods' pods: the NetworkPolicy's allowed egress peers.",
    )
    harness_namespace: str | None = Field(
        None, description="Namespace of the HarnessPods' pods (None: the sandbox namespace)."
    )
    proxy_cidrs: tuple[str, ...] = Field(
        (),
        description="Extra CIDRs of HarnessPods that are not pods matching harness_selector: "
        "sandbox pods may reach them on the proxy ports, and they may reach the agent port.",
    )
    proxy_ports: tuple[int, int] = Field(
        PROXY_PORTS,
        description="[first, last] TCP ports of the HarnessPods' proxies (inclusive). Each "
        "HarnessPod takes the first two free ones, its model proxy's and its egress proxy's "
        "(several share a Ray pod: 8 on the KubeRay cpu group), and the run's NetworkPolicy "
        "lets sandbox pods reach exactly these ports of the HarnessPods' pods, nothing else of "
        "them (not Ray's own ports). Keep it clear of every other listener in those pods.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="nodeSelector of the sandbox pods."
    )
    image_pull_secrets: tuple[str, ...] = Field(
        (), description="Names of image pull Secrets for the sandbox pods."
    )
    service_account: str = Field(
        "openforge-sandbox", description="Service account of the sandbox pods (bound to nothing)."
    )
    owner: bool = Field(
        True, description="Make the run's ConfigMap the owner of its pods (deleting it reaps)."
    )
    heartbeat_s: float = Field(
        10.0,
        gt=0,
        description="Interval of each HarnessPod's heartbeat Lease renewal (the Lease lives "
        "max(30 s, 6 intervals)); 0.1 API calls/s per HarnessPod: at ~1,000 HarnessPods in a "
        "shared cluster use 60 (docs/scale.md).",
    )

    @field_validator("proxy_cidrs")
    @classmethod
    def _cidrs(cls, cidrs: tuple[str, ...]) -> tuple[str, ...]:

        for cidr in cidrs:
            ipaddress.ip_network(cidr, strict=False)  # ValueError names the bad one
        return cidrs

    @field_validator("proxy_ports")
    @classmethod
    def _ports(cls, ports: tuple[int, int]) -> tuple[int, int]:
        if not 1 <= ports[0] <= ports[1] <= 65535:
            raise ValueError(f"expected [first, last] with 1 <= first <= last <= 65535: {ports}")
        return ports

    @field_validator("harness_selector")
    @classmethod
    def _selector(cls, labels: dict[str, str]) -> dict[str, str]:
        if not labels:  # an empty selector matches every pod: the other sandboxes too
            raise ValueError("must name at least one label of the HarnessPods' pods")
        if labels.get("openforge.role") == "sandbox":
            raise ValueError("must not select the sandbox pods (openforge.role=sandbox)")
        return labels


class WarmPoolConfig(Strict):
    """``sandbox.warm_pool``: sandboxes made ahead for the agent phase (docker, kubernetes), so
    an attempt's start is a handover, not a container's or pod's creation
    (:mod:`forge.sandboxes.warm_pool`). Off (size 0) by default."""

    size: int = Field(
        0,
        ge=0,
        le=256,
        description="Ready sandboxes kept per process and kind (backend, image, read-only "
        "mounts, proxy and egress sockets, limits, phase network), refilled in the background; "
        "each serves one attempt only and is destroyed after it. 0: off, every attempt creates "
        "its own. docker and kubernetes only (a local sandbox takes ~1 ms to make, ~10 ms with "
        "its disk quota as root).",
    )
    max_age_s: float = Field(
        1800.0,
        gt=0,
        description="A warm sandbox not handed over within this many seconds of its creation "
        "is destroyed and replaced.",
    )
    max_attempt_s: float = Field(
        3600.0,
        gt=0,
        description="The longest sandbox deadline (an attempt's: its harness cap, slack and an "
        "in-place verifier's time) a warm sandbox serves; a longer one gets a sandbox of its "
        "own. A warm sandbox's deadline label is its creation + max_age_s + max_attempt_s: "
        "after a crash the reaper finds it by that label (or by its dead creator) at the latest.",
    )
    max_pools: int = Field(
        2,
        ge=1,
        description="Most pools (kinds of sandbox, as size says) a process keeps: a spec of "
        "another kind beyond them gets a sandbox of its own, so per-task mounts cannot multiply "
        "the warm sandboxes.",
    )
    fill_parallel: int = Field(
        2, ge=1, le=32, description="Sandboxes a pool creates at once while it refills."
    )


class SandboxConfig(Strict):
    backend: Literal["local", "docker", "kubernetes"] = Field(
        "local",
        description="Where harnesses run. local: a bubblewrap process on the HarnessPod's node. "
        "docker: one container per attempt (and per verifier run) on a Docker daemon, from "
        "the images `forge image build` makes; no network but the attempt's proxy. "
        "kubernetes: one pod per attempt (settings in sandbox.kubernetes; proxy.host must be "
        "reachable from the pods), exec and files through the agent on the pod IP.",
    )
    network: NetworkConfig = Field(
        default_factory=NetworkConfig,
        description="What each phase of an attempt may reach (build, agent, verify): none, "
        "proxy-only (the default for agent and verify), allowlist or open.",
    )
    root: str | None = Field(
        None,
        description="Host folder for workspaces (local) or for each container's agent socket "
        "folder (docker; default: the temp dir).",
    )
    isolation: Literal["required", "none"] = Field(
        "required",
        description="required: every sandbox runs under bubblewrap (private namespaces, only its "
        "workspace and home writable, a network whose one way out is its proxy); a run that "
        "cannot isolate stops at once and says how to install bubblewrap. none: run harnesses "
        "as plain host processes sharing the host's network and files (only when asked). "
        "Local backend only: docker sandboxes are always isolated.",
    )
    docker_host: str | None = Field(
        None,
        description="docker: the daemon's address (unix:///path/sock, tcp://host:port). None: "
        "DOCKER_HOST, else the private daemon of `forge image daemon start` when it runs, "
        "else the Docker client's default. The daemon must run on this host (it bind-mounts "
        "the proxy's and the agent's Unix sockets).",
    )
    image: str | None = Field(
        None,
        description="docker: run every sandbox (verifiers too) from this image instead of "
        "openforge/<harness>:<version> or openforge/base (it needs python3 and the agent at "
        "/opt/forge/agent; the harness's files are bind-mounted read-only).",
    )
    image_aliases: dict[str, str] = Field(
        default_factory=lambda: {"debian:*": "base", "ubuntu:*": "base", "python:*": "base"},
        description="docker: what a task's own Dockerfile gets for its FROM image (Harbor "
        "tasks; no registry is used): glob pattern -> local image tag, 'base' meaning the "
        "Debian base `forge image build` makes. A base neither mapped nor in the daemon is "
        "refused, naming it.",
    )
    cpus: float = Field(1.0, gt=0, description="docker, kubernetes: CPUs per sandbox.")
    memory_mb: int = Field(
        4096, ge=64, description="docker, kubernetes: memory limit per sandbox in MiB (no swap)."
    )
    pids: int = Field(1024, ge=16, description="docker: most processes per container.")
    disk_mb: int | None = Field(
        2048,
        ge=16,
        description="Disk quota of a sandbox's writable places (MiB): a command that writes "
        "more gets ENOSPC ('No space left on device'), as on a full disk, and the episode goes "
        "on (the policy's doing, scored), never filling the host. local: the sandbox folder "
        "(workspace, home, /tmp) on its own ext4 image of this size, loop-mounted (needs root; "
        "otherwise each exec's files are capped at this size by RLIMIT_FSIZE). docker: "
        "tmpfs mounts of this size for the workspace, home, /tmp and /var/tmp (the image's "
        "root is read-only). kubernetes: memory-backed emptyDir volumes of this sizeLimit. "
        "The tmpfs and emptyDir pages count in memory_mb. None: no quota.",
    )
    start_timeout_s: float = Field(
        30.0, gt=0, description="docker, kubernetes: how long a new sandbox's agent may take."
    )
    kubernetes: KubernetesConfig = Field(
        default_factory=KubernetesConfig, description="kubernetes backend settings."
    )
    warm_pool: WarmPoolConfig = Field(
        default_factory=WarmPoolConfig,
        description="docker, kubernetes: agent-phase sandboxes made ahead (size 0: off).",
    )
