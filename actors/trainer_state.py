"""What a Trainer keeps of itself: checkpoints on disk, made whole or not at all, and a step's
snapshot in memory (CPU copies of the weights and optimizer state) that undoes a step whose
later update was not finite."""

from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

Snapshot = tuple[dict[str, Tensor], dict[str, Any]]


def write_checkpoint(
    path: str | os.PathLike[str], fill: Callable[[Path], None], state: dict[str, Any]
) -> str:
    """A checkpoint folder made whole or not at all: ``fill`` writes its files into a temporary
    folder beside ``path``, then ``trainer_state.json`` (``state``), then it takes ``path``'s
    place (an older one there is removed after)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    fill(tmp)
    (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2))
    old = target.with_name(f".{target.name}.old{os.getpid()}")
    if target.exists():
        target.replace(old)
    tmp.replace(target)
    shutil.rmtree(old, ignore_errors=True)
    return str(target)


def cpu_copy(value: Any) -> Any:
    """``value`` (a state dict: tensors in dicts and lists) with every tensor copied to the CPU."""
    if isinstance(value, Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: cpu_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(cpu_copy(v) for v in value)
    return copy.deepcopy(value)


def snapshot(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Snapshot:
    """CPU copies of ``model``'s weights and ``optimizer``'s state (kept off the accelerator)."""
    return cpu_copy(model.state_dict()), cpu_copy(optimizer.state_dict())


def restore(model: torch.nn.Module, optimizer: torch.optim.Optimizer, saved: Snapshot) -> None:
    """Put back what :func:`snapshot` copied, bit for bit, on the tensors' own devices."""
    weights, state = saved
    with torch.no_grad():
        model.load_state_dict(weights)
    optimizer.load_state_dict(state)
