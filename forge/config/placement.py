"""The ``placement`` part of :class:`forge.config.RunConfig`: where each kind of actor goes.

Ray places an actor on a node that has what it asks for: CPUs, GPUs, custom resources (a node
advertises them at ``ray start --resources``; ``cluster.yaml`` gives the CPU worker group
``harness_pod: 8``) and node labels (``ray start --labels``, ``labels`` of a node type in
``cluster.yaml`` or of a KubeRay group). Each actor kind of a run has one :class:`ActorPlacement`;
the defaults ask for what a run asked for before this section existed, so on one machine
nothing moves. Import it from ``forge.config``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from forge.config.sandbox import Strict

ActorKind = Literal["policy", "trainer", "harness_pod", "scheduler", "replay_buffer"]
# Kubernetes-style label syntax, as Ray's label selector takes it.
_NAME = r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_NAME}$")
_SELECTOR = re.compile(rf"^!?(in)?\({_NAME}(, ?{_NAME})*\)$|^!?{_NAME}$")
# Ray's own resource names: asked for with num_cpus / num_gpus (or memory), never in resources.
_BUILTIN = {"CPU", "GPU", "memory", "object_store_memory"}


class ActorPlacement(Strict):
    """What one actor of a kind asks Ray for, hence which nodes it may run on."""

    num_cpus: float | None = Field(
        None, ge=0, description="CPUs reserved per actor (None: the kind's default)."
    )
    num_gpus: float | None = Field(
        None,
        ge=0,
        description="GPUs reserved per actor (None: the kind's default). Ray then places it "
        "only on a node with that many free GPUs and sets CUDA_VISIBLE_DEVICES in it.",
    )
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom resources reserved per actor, e.g. {harness_pod: 1}: only nodes "
        "that advertise them can take the actor (cluster.yaml gives the CPU workers "
        "harness_pod: 8), and the autoscaler adds such a node when actors wait for one.",
    )
    label_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Node labels the actor's node must have, in Ray's selector syntax: "
        "{key: value}, {key: '!value'}, {key: 'in(a,b)'}, {key: '!in(a,b)'}; e.g. "
        "{openforge/node: gpu} with cluster.yaml's node labels. Labels restrict where an "
        "actor may go; they do not make the autoscaler start a node (resources do).",
    )

    @field_validator("resources")
    @classmethod
    def _custom_resources(cls, resources: dict[str, float]) -> dict[str, float]:
        for name, amount in resources.items():
            if name in _BUILTIN:
                raise ValueError(
                    f"{name}: a Ray resource, not a custom one; use num_cpus / num_gpus"
                )
            if not name or amount < 0:
                raise ValueError(f"{name}: a custom resource needs a name and an amount >= 0")
        return resources

    @field_validator("label_selector")
    @classmethod
    def _label_syntax(cls, selector: dict[str, str]) -> dict[str, str]:
        for key, value in selector.items():
            if not _KEY.match(key):
                raise ValueError(f"{key}: not a label key ([prefix/]name, Kubernetes syntax)")
            if not _SELECTOR.match(value):
                raise ValueError(
                    f"{key}: {value!r} is not a label selector (value, !value, in(a,b), !in(a,b))"
                )
        return selector

    def ray_options(self, num_cpus: float, num_gpus: float = 0.0) -> dict[str, Any]:
        """Ray actor options: this placement over the kind's default CPUs and GPUs. Empty
        resources and selectors are left out (exactly the options of a run without them)."""
        options: dict[str, Any] = {
            "num_cpus": num_cpus if self.num_cpus is None else self.num_cpus,
            "num_gpus": num_gpus if self.num_gpus is None else self.num_gpus,
        }
        if self.resources:
            options["resources"] = dict(self.resources)
        if self.label_selector:
            options["label_selector"] = dict(self.label_selector)
        return options


class PodPlacement(ActorPlacement):
    """A HarnessPod's placement, with how the pool's pods share out over the nodes."""

    strategy: Literal["spread", "default"] = Field(
        "spread",
        description="spread: each new pod goes to the least loaded node that fits it (Ray's "
        "SPREAD), so a node's loss takes few attempts with it and sandboxes share out the "
        "CPU nodes; default: Ray's default, which fills a node before it uses the next. On "
        "one machine both put every pod on it.",
    )

    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables of every HarnessPod's process (a judge's key where "
        "the pods run on other nodes than the driver; the run's served judge adds its own).",
    )

    def ray_options(self, num_cpus: float, num_gpus: float = 0.0) -> dict[str, Any]:
        options = super().ray_options(num_cpus, num_gpus)
        if self.strategy == "spread":
            options["scheduling_strategy"] = "SPREAD"
        if self.env:
            options["runtime_env"] = {"env_vars": dict(self.env)}
        return options


class PlacementConfig(Strict):
    """``placement``: where the actors of a run go. Every field's defaults keep the placement
    of a run that says nothing: Ray's choice, with the CPUs and GPUs asked for as before."""

    policy: ActorPlacement = Field(
        default_factory=ActorPlacement,
        description="Each Policy replica (a Ray Serve replica). num_cpus / num_gpus None: "
        "policy.num_cpus / policy.num_gpus. Serve itself spreads replicas over the nodes "
        "that fit. For a GPU cluster: num_gpus 1 (or the replica's tensor-parallel size) and "
        "the GPU nodes' label.",
    )
    trainer: ActorPlacement = Field(
        default_factory=ActorPlacement,
        description="The Trainer. num_cpus None: 1; num_gpus None: 0. With trainer.device "
        "cuda it needs num_gpus 1, or it may land on a node without a GPU.",
    )
    harness_pod: PodPlacement = Field(
        default_factory=PodPlacement,
        description="Each HarnessPod (proxy and sandbox lifecycle; a local sandbox runs on "
        "its node). num_cpus None: rollout.pod_num_cpus; num_gpus None: 0. On cluster.yaml's "
        "cluster: resources {harness_pod: 1}, so pods go only to the CPU workers.",
    )
    scheduler: ActorPlacement = Field(
        default_factory=ActorPlacement,
        description="The Scheduler (the control plane: lose its node and the run stops; the "
        "run's WeightStore stays on the driver's node). num_cpus / num_gpus None: 0. Put it "
        "on the head (a label only the head has) or a node that is not spot.",
    )
    replay_buffer: ActorPlacement = Field(
        default_factory=ActorPlacement,
        description="The ReplayBuffer (holds groups as object refs and writes the episode "
        "files under runs_dir on its node). num_cpus / num_gpus None: 0. Head or a stable "
        "CPU node, like the Scheduler.",
    )


def selector_matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """Whether a node with ``labels`` satisfies ``selector`` (value, !value, in(..), !in(..))."""
    for key, expr in selector.items():
        negate = expr.startswith("!")
        expr = expr.removeprefix("!")
        if expr.startswith(("in(", "(")) and expr.endswith(")"):
            allowed = {v.strip() for v in expr[expr.index("(") + 1 : -1].split(",")}
        else:
            allowed = {expr}
        if (labels.get(key) in allowed) == negate:
            return False
    return True


def node_fits(options: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether ``node`` (an entry of ``ray.nodes()``) could ever hold an actor with these Ray
    ``options``: its total resources and its labels, not what is free now."""
    total = node.get("Resources", {})
    wanted = {"CPU": options.get("num_cpus", 0), "GPU": options.get("num_gpus", 0)}
    wanted.update(options.get("resources", {}))
    if any(amount > total.get(name, 0.0) for name, amount in wanted.items() if amount):
        return False
    return selector_matches(options.get("label_selector", {}), node.get("Labels") or {})


def unplaceable(kinds: dict[str, dict[str, Any]], nodes: list[dict[str, Any]]) -> list[str]:
    """One line for each actor kind (``{kind: ray options}``) that no live node can take, naming
    what it asks for: the run would wait for a node the autoscaler may or may not add."""
    alive = [n for n in nodes if n.get("Alive", n.get("alive"))]
    lines = []
    for kind, options in kinds.items():
        if not any(node_fits(options, n) for n in alive):
            asks = {k: v for k, v in options.items() if k != "scheduling_strategy" and v}
            lines.append(
                f"placement.{kind}: no node of the cluster ({len(alive)} alive) fits {asks}"
            )
    return lines
