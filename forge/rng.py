"""Random number generator states of a process, as a dict a checkpoint can carry.

:func:`rng_state` captures torch's CPU generator, every CUDA device's generator (when CUDA is
available), Python's ``random`` and NumPy's legacy global generator; :func:`set_rng_state` puts
them back, so a resumed run draws the same numbers the uninterrupted run would have. The dict
holds only tensors and plain Python values, so it loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import random
from typing import Any

import torch

try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy ships with torch's usual installs
    np = None  # type: ignore[assignment]


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if np is not None:
        name, key, pos, has_gauss, gauss = np.random.get_state(legacy=True)
        state["numpy"] = (name, torch.from_numpy(key.astype("int64")), pos, has_gauss, gauss)
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"][: torch.cuda.device_count()]
        torch.cuda.set_rng_state_all(cuda)
    if "numpy" in state and np is not None:
        name, key, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((name, key.numpy().astype("uint32"), pos, has_gauss, gauss))
