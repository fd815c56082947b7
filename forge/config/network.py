"""``sandbox.network``: what each phase of an attempt may reach (DESIGN.md decision 13).

An attempt has three phases, each with its own policy:

- ``build``: building a task's image (its Dockerfile's ``RUN`` lines);
- ``agent``: the harness at work;
- ``verify``: the task's tests.

A policy's ``mode`` is one of:

- ``none``: nothing (in the agent phase the model's proxy stays: the harness needs it);
- ``proxy-only``: the attempt's model proxy alone (every phase has it where it has a model);
- ``allowlist``: also the hosts, networks and ports listed, through the run's egress proxy
  (:mod:`forge.sandboxes.egress`: HTTP and HTTPS, ``HTTP_PROXY``/``HTTPS_PROXY`` set);
- ``open``: also any public address through the same proxy; private, loopback and link-local
  addresses (the cluster the run lives in) stay out of reach unless ``cidrs`` lists them.

The model's proxy is the only way to the model in every phase, and the attempt's key never
leaves it. A task may ask for more than the run gives (Harbor's ``allow_internet``): its agent
and verify phases then get ``open``, when ``honour_task_requests`` allows it.
"""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

NetworkMode = Literal["none", "proxy-only", "allowlist", "open"]
EGRESS_MODES = ("allowlist", "open")  # the phases that go through the egress proxy


class PhaseNetwork(BaseModel):
    """One phase's network: its mode, and what ``allowlist`` lets through."""

    model_config = ConfigDict(extra="forbid")

    mode: NetworkMode = Field("proxy-only", description="none, proxy-only, allowlist or open.")
    hosts: list[str] = Field(
        default_factory=list,
        description="Host names reachable in allowlist mode (glob patterns: *.mirror.example.com).",
    )
    cidrs: list[str] = Field(
        default_factory=list,
        description="Networks reachable in allowlist and open mode (open needs them for private "
        "addresses, e.g. a package mirror inside the cluster).",
    )
    ports: list[int] = Field(
        default_factory=lambda: [80, 443],
        description="Ports reachable (empty: any).",
    )

    @field_validator("cidrs")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        for text in v:
            try:
                ipaddress.ip_network(text, strict=False)
            except ValueError as e:
                raise ValueError(f"{text!r} is not a network: {e}") from None
        return v

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: list[int]) -> list[int]:
        bad = [p for p in v if not 0 < p < 65536]
        if bad:
            raise ValueError(f"not a port: {bad[0]}")
        return v

    def through_egress(self) -> bool:
        return self.mode in EGRESS_MODES


class NetworkConfig(BaseModel):
    """``sandbox.network``: each phase's network."""

    model_config = ConfigDict(extra="forbid")

    build: PhaseNetwork = Field(
        default_factory=lambda: PhaseNetwork(mode="open"),
        description="Image builds: open (the daemon's own network) or none.",
    )
    agent: PhaseNetwork = Field(
        default_factory=PhaseNetwork, description="The harness at work (default: its proxy only)."
    )
    verify: PhaseNetwork = Field(
        default_factory=PhaseNetwork,
        description="The task's tests (default: nothing but its proxy).",
    )
    honour_task_requests: bool = Field(
        True,
        description="A task that asks for the internet (Harbor's allow_internet, or "
        "network_mode = public set in its task.toml) gets open agent and verify phases.",
    )

    @field_validator("build")
    @classmethod
    def _build(cls, v: PhaseNetwork) -> PhaseNetwork:
        if v.mode not in ("open", "none"):
            raise ValueError("the build phase is open or none (a build has no model proxy)")
        return v


def phase_network(config: NetworkConfig, phase: str, task_asks: bool = False) -> PhaseNetwork:
    """The network of ``phase`` (``agent`` or ``verify``) of an attempt whose task asks for the
    internet (``task_asks``) or not."""
    policy: PhaseNetwork = getattr(config, phase)
    if task_asks and config.honour_task_requests and policy.mode != "open":
        return policy.model_copy(update={"mode": "open"})
    return policy
