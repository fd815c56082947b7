"""One pydantic ``RunConfig`` for a run: a short YAML file plus ``key=value`` overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from forge.config.harness_mix import (
    HarnessField,
    check_harness,
    check_mix_options,
    check_options,
    weights,
)
from forge.config.placement import ActorKind, ActorPlacement, PlacementConfig
from forge.config.sandbox import SandboxConfig
from forge.config.sandbox import Strict as _Strict
from forge.config.sections import (
    ATTEMPT_SLACK_S,
    LoggingConfig,
    PolicyConfig,
    ProxyConfig,
    RolloutConfig,
    TrainerConfig,
    WeightSyncConfig,
)


class RunConfig(_Strict):
    name: str = Field("quickstart", description="Run name; outputs go to runs/<name>/.")
    runs_dir: str = Field("runs", description="Folder that holds run directories.")
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="The Policy.")
    judge: PolicyConfig | None = Field(
        None,
        description="A judge model the run serves itself, beside the Policy and never trained "
        "(its engine and checkpoint; forge/served_judge.py): the tasks' judge verifiers that "
        "name no endpoint of their own ask it. None: they ask $FORGE_JUDGE_BASE_URL.",
    )
    proxy: ProxyConfig = Field(default_factory=ProxyConfig, description="HarnessPod proxy limits.")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="Sandboxes.")
    harness: HarnessField = Field(
        "react",
        description="Harness every attempt runs, or a weighted mix, e.g. {react: 2, pi: 1}: "
        "each GRPO group is one task in one harness, drawn by weight (harness_mix).",
    )
    harness_mix: Literal["fixed", "adaptive"] = Field(
        "fixed",
        description="How a mix draws each group's harness: fixed (by the weights), or adaptive "
        "(weight moves toward the harnesses whose training pass rate is lowest or rising "
        "fastest, each keeping at least harness_floor of the draws; logged each step).",
    )
    harness_floor: float = Field(
        0.1,
        ge=0,
        lt=1,
        description="adaptive mix: the least share of draws each harness keeps, so none starves.",
    )
    eval_harnesses: list[str] = Field(
        default_factory=list,
        description="Harnesses the in-run evaluation runs through beside the run's own (ones "
        "it never trains in), e.g. [codex, openclaw].",
    )
    harness_options: dict[str, Any] = Field(
        default_factory=dict,
        validate_default=True,
        description="Options of the harness adapter, e.g. for react: tools (subset offered), "
        "system_prompt, max_tokens; with a mix or eval_harnesses, keyed by harness name "
        "({pi: {tools: [read, bash]}}).",
    )
    tasks: str = Field("smoke", description="Task suite name or path.")
    task_ids: list[str] = Field(
        default_factory=list, description="Only these tasks of the suite (all when empty)."
    )
    task_limits: dict[str, int | float] = Field(
        default_factory=dict,
        description="Replace these limits of every task (max_turns, timeout_s, "
        "max_tokens_per_turn), e.g. longer timeouts for a real model on a CPU.",
    )
    harbor_verify: Literal["task", "in_place", "sealed"] = Field(
        "task",
        description="Where Harbor tasks' tests run: in_place (the agent's own container once "
        "its processes are gone: Harbor's mode), sealed (a fresh container with a copy of the "
        "workdir: nothing changed outside it counts), or task (each task's "
        "verifier.environment_mode: shared, the default, or separate). docs/harbor.md says "
        "what each guarantees.",
    )
    temperature: float = Field(
        1.0,
        gt=0,
        description="Sampling temperature of training attempts; it replaces the harness's own, "
        "top_p and top_k are turned off, and the trainer recomputes log-probabilities at it "
        "(greedy decoding has none to train on: use eval_temperature=0 for greedy evaluation).",
    )
    rollout: RolloutConfig = Field(
        default_factory=RolloutConfig, description="Collection: groups, pods, retries."
    )
    trainer: TrainerConfig = Field(
        default_factory=TrainerConfig, description="Trainer: optimizer, loss, micro-batching."
    )
    weight_sync: WeightSyncConfig = Field(
        default_factory=WeightSyncConfig,
        description="How new weights travel from the trainer to the Policy replicas.",
    )
    placement: PlacementConfig = Field(
        default_factory=PlacementConfig,
        description="Where each kind of actor goes on a cluster: CPUs, GPUs, custom resources "
        "and node labels per actor (defaults: as a run on one machine asks).",
    )
    steps: int = Field(20, ge=0, description="Trainer steps to run.")
    eval_every: int = Field(
        0, ge=0, description="Evaluate every k steps, and once before the first (0: never)."
    )
    eval_tasks: str | None = Field(
        None, description="Suite to evaluate on (default: the training tasks, task_ids and all)."
    )
    eval_temperature: float = Field(0.0, ge=0, description="Sampling temperature in evaluation.")
    eval_k: int = Field(
        1,
        ge=1,
        description="Attempts per evaluation task; the pass rate is over all of them (more "
        "attempts, less noise at temperature > 0).",
    )
    logging: LoggingConfig = Field(
        default_factory=LoggingConfig,
        description="Loggers beside metrics.jsonl: tensorboard, wandb (both off by default).",
    )
    checkpoint_every: int = Field(
        0, ge=0, description="Checkpoint every k steps (0: only at the end)."
    )
    keep_checkpoints: int = Field(
        3, ge=1, description="Most recent checkpoints kept in the run; older ones are deleted."
    )

    @field_validator("task_limits")
    @classmethod
    def _known_limits(cls, limits: dict[str, int | float]) -> dict[str, int | float]:
        from tasks.schema import Limits

        Limits.model_validate(limits)  # names and bounds, as in a task file
        return limits

    @model_validator(mode="after")
    def _attempt_outlasts_task_limits(self) -> RunConfig:
        """An attempt cut off by ``rollout.attempt_timeout_s`` before its harness's time is up
        would be an infrastructure failure whatever the agent did; the tasks' verifiers add
        their time when the tasks load (:func:`forge.outcome.check_attempt_timeout`)."""
        timeout = self.task_limits.get("timeout_s")
        if timeout is not None:
            need = float(timeout) + ATTEMPT_SLACK_S
            if self.rollout.attempt_timeout_s < need:
                raise ValueError(
                    f"rollout.attempt_timeout_s: {self.rollout.attempt_timeout_s:g}s is shorter "
                    f"than task_limits.timeout_s ({timeout:g}s) plus {ATTEMPT_SLACK_S:g}s; set "
                    f"it to at least {need:g}s, and more for tasks whose verifiers run commands"
                )
        return self

    @field_validator("harness", mode="before")
    @classmethod
    def _known_harness(cls, value: HarnessField) -> HarnessField:
        return check_harness(value)

    @field_validator("eval_harnesses")
    @classmethod
    def _known_eval_harnesses(cls, names: list[str]) -> list[str]:
        for name in names:
            check_harness(name)
        return names

    @field_validator("harness_options")
    @classmethod
    def _harness_takes_options(cls, options: dict[str, Any], info: ValidationInfo) -> dict:
        from forge.harnesses.registry import HARNESSES

        harness = info.data.get("harness")
        if harness is None:
            return options  # the harness field already failed
        extra = info.data.get("eval_harnesses") or []
        if isinstance(harness, dict) or extra:  # keyed by harness name
            return check_mix_options(list(weights(harness)), options, extra)
        return check_options(HARNESSES[harness], options)

    @model_validator(mode="after")
    def _floor_fits_the_mix(self) -> RunConfig:
        n = len(self.harnesses)
        if self.harness_mix == "adaptive" and self.harness_floor * n > 1:
            raise ValueError(
                f"harness_floor: {self.harness_floor:g} for each of {n} harnesses is more "
                f"than all the draws; at most {1 / n:.3g}"
            )
        return self

    @property
    def harnesses(self) -> list[str]:
        """The harnesses the run trains in (one, or the mix's, in the config's order)."""
        return list(weights(self.harness))

    @property
    def mixed(self) -> bool:
        """Whether the run trains in several harnesses, or evaluates in extra ones (then
        ``harness_options`` is keyed by harness name)."""
        return isinstance(self.harness, dict) or bool(self.eval_harnesses)

    def options_for(self, harness: str) -> dict[str, Any]:
        """``harness``'s adapter options: ``harness_options`` itself for a single harness,
        its entry of them for a mix (none: the harness as shipped)."""
        if not self.mixed:
            return self.harness_options if harness == self.harness else {}
        return dict(self.harness_options.get(harness, {}))

    @property
    def eval_harness_list(self) -> list[str]:
        """The harnesses the in-run evaluation runs through: the run's own, then the
        evaluation-only ones."""
        return list(dict.fromkeys([*self.harnesses, *self.eval_harnesses]))

    @property
    def run_dir(self) -> Path:
        return Path(self.runs_dir) / self.name

    def cpus_needed(self, trainer: bool = True) -> int:
        """Logical CPUs a local cluster needs for this run's actors at their largest (the
        Policy replicas, the Trainer unless ``trainer`` is False, ``max_pods`` HarnessPods and
        one to spare), so that no actor waits on a CPU that a local cluster never has."""
        total = self.policy.replicas * self.actor_options("policy")["num_cpus"] + 1
        total += self.rollout.max_pods * self.actor_options("harness_pod")["num_cpus"]
        for kind in ("scheduler", "replay_buffer") + (("trainer",) if trainer else ()):
            total += self.actor_options(kind)["num_cpus"]
        if trainer and self.trainer.backend == "verl":  # its ranks, beside the coordinator
            total += self.trainer.verl.ranks * self.trainer.verl.cpus_per_rank
        return int(total) + 1

    def actor_options(self, kind: ActorKind) -> dict[str, Any]:
        """The Ray options of one actor of ``kind``: ``placement.<kind>`` over the kind's
        default CPUs and GPUs (the Policy's: ``policy.num_cpus``/``num_gpus``; a HarnessPod's:
        ``rollout.pod_num_cpus``; the Trainer's: 1 CPU; the Scheduler's and ReplayBuffer's:
        none)."""
        defaults = {
            "policy": (self.policy.num_cpus, self.policy.num_gpus),
            "trainer": (1.0, 0.0),
            "harness_pod": (self.rollout.pod_num_cpus, 0.0),
            "scheduler": (0.0, 0.0),
            "replay_buffer": (0.0, 0.0),
        }
        if kind not in defaults:
            raise ValueError(f"placement: unknown actor kind {kind!r}; known: {list(defaults)}")
        placement: ActorPlacement = getattr(self.placement, kind)
        return placement.ray_options(*defaults[kind])


class ConfigError(ValueError):
    pass


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{key}: {p} is not a section")
    node[parts[-1]] = value


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Read a YAML config (or the defaults), apply ``key=value`` overrides, validate."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{path}: {e}") from e
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level")
    for item in overrides or []:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key=value")
        key, raw = item.split("=", 1)
        _set_dotted(data, key.strip(), yaml.safe_load(raw))
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        where = f"{path}: " if path else ""
        lines = [f"{where}{error_line(err)}" for err in e.errors()]
        raise ConfigError("invalid config:\n  " + "\n  ".join(lines)) from None


def error_line(err: Any) -> str:
    """``dotted.field: message`` of one pydantic error. A validator's ``"KEY: detail"`` about
    a key of the mapping it checked (a harness option) extends the field: ``harness_options.
    mounts: ...``."""
    loc = [str(p) for p in err["loc"]]
    msg = str(err["msg"]).removeprefix("Value error, ")
    key, sep, detail = msg.partition(": ")
    if sep and isinstance(err.get("input"), dict) and key in err["input"]:
        loc, msg = [*loc, key], detail
    return f"{'.'.join(loc)}: {msg}" if loc else msg  # a whole-config check names its fields
