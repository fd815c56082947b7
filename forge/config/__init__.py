"""A run's configuration: one pydantic :class:`RunConfig` (:mod:`forge.config.run`) made of its
sections (:mod:`~forge.config.sections`, :mod:`~forge.config.sandbox`,
:mod:`~forge.config.placement`, :mod:`~forge.config.verl`), read from a short YAML file plus
``key=value`` overrides by :func:`load_config`. Everything is importable from here."""

from forge.config.placement import ActorKind, ActorPlacement, PlacementConfig, PodPlacement
from forge.config.run import ConfigError, RunConfig, error_line, load_config
from forge.config.sandbox import KubernetesConfig, SandboxConfig
from forge.config.sections import (
    ATTEMPT_SLACK_S,
    EngineConfig,
    LoggingConfig,
    PolicyConfig,
    ProxyConfig,
    RolloutConfig,
    TrainerConfig,
    WandbConfig,
    WeightSyncConfig,
)
from forge.config.verl import VerlConfig

__all__ = [
    "ATTEMPT_SLACK_S",
    "ActorKind",
    "ActorPlacement",
    "ConfigError",
    "EngineConfig",
    "KubernetesConfig",
    "LoggingConfig",
    "PlacementConfig",
    "PodPlacement",
    "PolicyConfig",
    "ProxyConfig",
    "RolloutConfig",
    "RunConfig",
    "SandboxConfig",
    "TrainerConfig",
    "VerlConfig",
    "WandbConfig",
    "WeightSyncConfig",
    "error_line",
    "load_config",
]
