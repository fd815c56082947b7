"""Engines behind the Policy deployment, by name."""

from __future__ import annotations

from typing import Any

from serve.engines.base import Engine, EngineOutput, EngineRequest

ENGINES = ("torch", "scripted", "vllm", "remote")


def make_engine(name: str, **options: Any) -> Engine:
    if name == "torch":
        from serve.engines.torch_engine import TorchEngine

        return TorchEngine(**options)
    if name == "scripted":
        from serve.engines.scripted import ScriptedEngine

        return ScriptedEngine(**options)
    if name == "vllm":
        from serve.engines.vllm import VllmEngine

        return VllmEngine(**options)
    if name == "remote":
        from serve.engines.remote import RemoteEngine

        return RemoteEngine(**options)
    raise ValueError(f"engine: unknown engine {name!r} (known: {', '.join(ENGINES)})")


__all__ = ["ENGINES", "Engine", "EngineOutput", "EngineRequest", "make_engine"]
