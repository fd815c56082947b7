"""Whether veRL's FSDP engine (the trainer.backend=verl) can be imported here, and if not why:
the reason the tests that need it skip with."""

from __future__ import annotations


def _why_missing() -> str:
    try:
        from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead  # noqa: F401
    except Exception as e:  # ImportError, or a dependency failing at import
        return f"veRL's FSDP engine is not importable ({type(e).__name__}: {e})"
    return ""


VERL_MISSING = _why_missing()
