"""What produced an episode, recorded on it (``Episode.provenance``) so that any result can be
split by it (``forge analyze --by KEY``):

    harness            the harness as the run names it (``react``, ``pi``, ``command``)
    harness_name       the adapter's own name (a command agent's ``name``)
    harness_version    the pinned package version, or ``builtin``
    harness_digest     a digest of the adapter's code and the installed package's lock file
    prompt_hash        the system prompt and tool schemas of the first model call
    sandbox            the backend (local, docker, kubernetes); ``image``: its image, if any
    task_version       a digest of the task as loaded (instruction, files, verifier, limits)
    verifier           the verifier's type
    rubric_hash        a digest of its judge rubrics, when a judge scores it
    policy_versions    the first and last policy version that sampled a turn
    model              the Policy's model; ``temperature`` and ``max_tokens_per_turn``

Digests are the first 12 hex digits of a SHA-256.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from pathlib import Path
from typing import Any

from forge.types import Turn
from rewards.registry import judges

KEYS = (
    "harness", "harness_name", "harness_version", "harness_digest", "prompt_hash", "sandbox",
    "image", "task_version", "verifier", "policy_versions", "model", "temperature",
    "max_tokens_per_turn", "rubric_hash",
)  # fmt: skip


def digest(value: Any) -> str:
    data = value if isinstance(value, bytes) else json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).hexdigest()[:12]


@functools.cache
def harness_identity(key: str, adapter: type) -> tuple[str, str]:
    """``(version, digest)`` of harness ``key``: its pinned package's version and a digest of
    the adapter's source with the installed package's lock file (``builtin`` without one)."""
    from forge.harnesses.install import PACKAGES

    try:
        parts = [inspect.getsource(inspect.getmodule(adapter) or adapter).encode()]
    except (OSError, TypeError):  # no source at hand (a frozen install): its name then
        parts = [f"{adapter.__module__}.{adapter.__qualname__}".encode()]
    package = PACKAGES.get(key)
    version = package.version if package is not None else "builtin"
    if package is not None:
        for name in ("package-lock.json", ".complete"):
            lock = Path(package.folder) / name
            if lock.is_file():
                parts.append(lock.read_bytes())
                break
    return version, digest(b"\0".join(parts))


def prompt_hash(turns: list[Turn]) -> str:
    """The system prompt and tool schemas of the first model call ("" without one)."""
    if not turns:
        return ""
    request = turns[0].request or {}
    messages = request.get("messages") or request.get("input") or []
    system = [
        m.get("content")
        for m in messages
        if isinstance(m, dict) and m.get("role") in ("system", "developer")
    ]
    extra = request.get("system") or request.get("instructions")  # Anthropic, Responses
    return digest({"system": [*system, extra] if extra else system, "tools": request.get("tools")})


def _rubrics(verifier: Any) -> list[str]:
    return [j.rubric for j in judges(verifier)]


def verifier_kind(verifier: Any) -> str:
    """A verifier's type; a list of them joined with ``+``."""
    if isinstance(verifier, list):
        return "+".join(verifier_kind(v) for v in verifier)
    if isinstance(verifier, dict):
        return str(verifier.get("type", "?"))
    return str(getattr(verifier, "type", type(verifier).__name__))


def provenance(
    key: str,
    harness: Any,
    task: Any,
    backend: str,
    image: str,
    turns: list[Turn],
    model: str,
    temperature: float | None,
) -> dict[str, Any]:
    """The record; never raises (what could not be read is named under ``error``: a record of
    what produced an episode never costs the episode)."""
    try:
        return _record(key, harness, task, backend, image, turns, model, temperature)
    except Exception as e:
        return {"harness": key, "error": f"{type(e).__name__}: {e}"[:500]}


def _record(key: str, harness: Any, task: Any, *rest: Any) -> dict[str, Any]:
    backend, image, turns, model, temperature = rest
    version, code = harness_identity(key, type(harness))
    versions = [t.policy_version for t in turns]
    return {
        "harness": key,
        "harness_name": harness.name,
        "harness_version": version,
        "harness_digest": code,
        "prompt_hash": prompt_hash(turns),
        "sandbox": backend,
        "image": image,
        "task_version": digest(task.model_dump(mode="json")),
        "verifier": verifier_kind(task.verifier),
        "policy_versions": [min(versions), max(versions)] if versions else [],
        "model": model,
        "temperature": temperature,
        "max_tokens_per_turn": task.limits.max_tokens_per_turn,
        **({"rubric_hash": digest(judged)} if (judged := _rubrics(task.verifier)) else {}),
    }
