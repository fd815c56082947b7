"""veRL on CPUs: its platform layer knows GPUs and NPUs only, and with neither present it takes
itself for an NVIDIA machine (device "cuda", backend "nccl"). :func:`use_cpu` registers a CPU
platform (device "cpu", backend "gloo") and makes it current; it must run before veRL's engine
module is imported (that module reads the device name once, at import)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

_NOOPS = {
    "empty_cache": lambda: None,
    "memory_allocated": lambda *a: 0,
    "memory_reserved": lambda *a: 0,
    "max_memory_allocated": lambda *a: 0,
    "max_memory_reserved": lambda *a: 0,
    "reset_peak_memory_stats": lambda *a: None,
    "manual_seed": torch.manual_seed,
    "manual_seed_all": torch.manual_seed,
}


def use_cpu() -> None:
    """Make veRL run on the CPU with gloo (idempotent)."""
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry, set_platform

    for name, fn in _NOOPS.items():  # veRL calls these on its device module
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, fn)

    class PlatformCPU(PlatformBase):
        device_name = property(lambda self: "cpu")
        vendor_name = property(lambda self: "cpu")
        device_module = property(lambda self: torch.cpu)

        def is_available(self) -> bool:
            return True

        def current_device(self) -> Any:
            return "cpu"  # used as .to(current_device()): an int would mean cuda:N

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            pass

        def synchronize(self, device_index: int | None = None) -> None:
            pass

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            pass

        def empty_cache(self) -> None:
            pass

        def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
            return (None, None)

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg: str) -> Iterator[None]:
            yield

        def profiler_start(self) -> None:
            pass

        def profiler_stop(self) -> None:
            pass

        def ray_resource_name(self) -> str:
            return "CPU"

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> None:
            return None

    if "cpu" not in PlatformRegistry.registered_names():
        PlatformRegistry.register(platform="cpu")(PlatformCPU)
    set_platform(PlatformCPU())
