"""What a service is: named operations with described, typed parameters over a JSON state.

One definition makes every way an agent reaches a service: the HarnessPod's HTTP API, the MCP
tools (stdio and streamable HTTP), the command-line tool on the sandbox's PATH, the native tools
of the ``react`` harness and the ``SKILL.md`` of harnesses that read skills. The state lives in
the HarnessPod (:class:`World`), never in the sandbox: the agent changes it only through the
operations, and the verifier reads it after the episode (``rewards.app_state``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

TYPES = {"string": str, "integer": int, "boolean": bool, "array": list}
TIME_FORMAT = "%Y-%m-%d %H:%M"


class ServiceError(ValueError):
    """A call the service refuses (the caller's mistake): answered 400 with this message."""


@dataclass(frozen=True)
class Param:
    type: str  # a key of TYPES; an "array" holds strings
    description: str
    required: bool = False
    enum: tuple[str, ...] = ()

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "description": self.description}
        if self.type == "array":
            out["items"] = {"type": "string"}
        if self.enum:
            out["enum"] = list(self.enum)
        return out


@dataclass(frozen=True)
class Op:
    """One operation: ``run(state, **args)`` returns a JSON value and may change ``state``."""

    name: str
    description: str
    run: Callable[..., Any]
    params: dict[str, Param] = field(default_factory=dict)
    writes: bool = False  # it changes the state (a send, a move); reads do not

    def schema(self) -> dict[str, Any]:
        """The parameters as a JSON Schema object (a tool's ``parameters``)."""
        return {
            "type": "object",
            "properties": {k: p.schema() for k, p in self.params.items()},
            "required": [k for k, p in self.params.items() if p.required],
            "additionalProperties": False,
        }

    def check(self, args: Any) -> dict[str, Any]:
        """``args`` as this operation takes them, or ServiceError naming the field."""
        if not isinstance(args, dict):
            raise ServiceError(f"{self.name}: the arguments are a JSON object")
        unknown = sorted(set(args) - set(self.params))
        if unknown:
            raise ServiceError(
                f"{unknown[0]}: unknown argument of {self.name} "
                f"(it takes: {', '.join(self.params) or 'none'})"
            )
        out: dict[str, Any] = {}
        for key, param in self.params.items():
            value = args.get(key)
            if value is None:
                if param.required:
                    raise ServiceError(f"{key}: required by {self.name}")
                continue
            if param.type == "array" and isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            if param.type == "integer" and isinstance(value, str) and value.strip().isdigit():
                value = int(value)
            want = TYPES[param.type]
            ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
            if param.type == "array":
                ok = ok and all(isinstance(v, str) for v in value)
            if not ok:
                raise ServiceError(f"{key}: expected {param.type}, got {type(value).__name__}")
            if param.enum and value not in param.enum:
                raise ServiceError(f"{key}: one of {', '.join(param.enum)}, got {value!r}")
            if param.type == "string" and param.required and not value.strip():
                raise ServiceError(f"{key}: required by {self.name}, got an empty string")
            out[key] = value
        return out


@dataclass(frozen=True)
class App:
    """A service: its operations and how its state is made from a task's seed."""

    name: str
    description: str
    ops: dict[str, Op]
    initial: Callable[[dict[str, Any]], dict[str, Any]]  # seed -> state
    default_seed: Callable[[], dict[str, Any]]


def app(name: str, description: str, ops: list[Op], initial: Callable, default_seed: Callable):
    return App(name, description, {op.name: op for op in ops}, initial, default_seed)


# -- helpers the services share ---------------------------------------------------------------


def next_id(items: list[dict[str, Any]], prefix: str) -> str:
    """``prefix-N`` one past the largest N among ``items``' ids."""
    numbers = [int(m.group(1)) for i in items if (m := re.search(r"(\d+)$", str(i.get("id"))))]
    return f"{prefix}-{max(numbers, default=0) + 1:03d}"


def by_id(items: list[dict[str, Any]], item_id: str, what: str) -> dict[str, Any]:
    for item in items:
        if item.get("id") == item_id:
            return item
    raise ServiceError(f"id: no {what} {item_id!r}")


def matches(query: str, *texts: Any) -> bool:
    """Every word of ``query`` appears in one of ``texts`` (case-insensitive)."""
    blob = " ".join(" ".join(t) if isinstance(t, list) else str(t or "") for t in texts).lower()
    return all(word in blob for word in query.lower().split())


def when(value: str, key: str) -> str:
    """A ``YYYY-MM-DD HH:MM`` time (ServiceError naming ``key`` otherwise), normalised."""
    try:
        return datetime.strptime(value.strip().replace("T", " "), TIME_FORMAT).strftime(TIME_FORMAT)
    except ValueError:
        raise ServiceError(f"{key}: a time as YYYY-MM-DD HH:MM, got {value!r}") from None


def day(value: str, key: str) -> str:
    try:
        return datetime.strptime(value.strip(), "%Y-%m-%d").strftime("%Y-%m-%d")
    except ValueError:
        raise ServiceError(f"{key}: a date as YYYY-MM-DD, got {value!r}") from None


def emails(values: list[str], key: str) -> list[str]:
    out = []
    for v in values:
        v = v.strip().lower()
        if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[a-z]{2,}", v):
            raise ServiceError(f"{key}: {v!r} is not an email address")
        out.append(v)
    return out
