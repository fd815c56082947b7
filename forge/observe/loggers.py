"""Where a run's step records go: ``metrics.jsonl`` always, and TensorBoard event files and a
Weights & Biases run when the config's ``logging`` asks for them (both off by default).

Every numeric value of a record is logged under its name at the record's ``step``; nested
mappings (``truncated``, ``resets``) become ``name/key``. W&B runs offline by default (written
under the run directory, ``wandb sync`` uploads them later), so a run needs no network for it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from forge.config import LoggingConfig


class LoggerMissing(RuntimeError):
    """A logger the config asks for is not installed (the message names the pip command)."""


def scalars(record: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The record's finite numbers by name (booleans and text left out)."""
    out: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(scalars(value, f"{name}/"))
        elif isinstance(value, bool) or not isinstance(value, int | float):
            continue
        elif math.isfinite(value):
            out[name] = float(value)
    return out


def require(config: LoggingConfig) -> None:
    """LoggerMissing (naming the pip command) for a logger asked for and not installed."""
    wanted = {"tensorboardX": config.tensorboard, "wandb": config.wandb is not None}
    for module, on in wanted.items():
        if not on:
            continue
        try:
            __import__(module)
        except ImportError:
            field = "tensorboard" if module == "tensorboardX" else "wandb"
            raise LoggerMissing(
                f"logging.{field}: {module} is not installed (pip install {module}, or the "
                "project's [logging] extra)"
            ) from None


class MetricsLog:
    """One run's step records: appended to ``metrics.jsonl`` and sent to the loggers."""

    def __init__(
        self, run_dir: Path, config: LoggingConfig, name: str, settings: dict[str, Any]
    ) -> None:
        self.file = open(run_dir / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115
        self.tensorboard: Any = None
        self.wandb: Any = None
        require(config)
        if config.tensorboard:
            from tensorboardX import SummaryWriter

            self.tensorboard = SummaryWriter(logdir=str(run_dir / "tensorboard"))
        if config.wandb is not None:
            import wandb

            w = config.wandb
            self.wandb = wandb.init(
                project=w.project, entity=w.entity, name=w.name or name, mode=w.mode,
                tags=w.tags, dir=str(run_dir), config=settings, resume="allow",
            )  # fmt: skip

    def write(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record) + "\n")
        step = int(record.get("step", 0))
        values = {k: v for k, v in scalars(record).items() if k != "step"}
        if self.tensorboard is not None:
            for key, value in values.items():
                self.tensorboard.add_scalar(key, value, step)
            self.tensorboard.flush()
        if self.wandb is not None:
            self.wandb.log(values, step=step)

    def close(self) -> None:
        self.file.close()
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.finish()
