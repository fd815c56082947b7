"""A Harbor task's ``environment/docker-compose.yaml``: the services that run beside the agent.

Harbor merges the file over its own base, in which the ``main`` service is the agent's container
(built from ``environment/Dockerfile``); the task adds services and may set ``main``'s
``environment`` and ``depends_on``. OpenForge reads the part real task sets use:

- ``main``: ``environment`` (added to the task's), ``depends_on`` (every service starts, and is
  healthy, before the attempt anyway);
- any other service: ``image`` (a local image or an alias's: nothing is pulled) or ``build``
  (``context``, ``dockerfile``), ``environment`` (``${VAR}`` and ``${VAR:-default}`` from the
  host's environment, as compose does), ``command``, ``entrypoint``, ``healthcheck`` (``test``,
  ``interval``, ``timeout``, ``start_period``, ``retries``), ``expose`` and ``depends_on``
  (nothing to do: the services share the agent's network namespace and start first).

Anything else (volumes, ports, networks, privileged, ...) is refused naming its key, so a task
never runs differently from how its author meant without saying so.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

MAIN_KEYS = {"environment", "depends_on"}
SERVICE_KEYS = {"image", "build", "environment", "command", "entrypoint", "healthcheck",
                "expose", "depends_on", "container_name"}  # fmt: skip
_VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}|\$(\w+)")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")


class ComposeError(ValueError):
    """What in the file cannot run here: ``problems`` holds ``(field, message)``."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{f}: {m}" for f, m in problems))


def _substitute(text: str) -> str:
    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        return os.environ.get(name) or (m.group(2) or "")

    return _VAR.sub(value, text)


def _env(value: Any, field: str) -> dict[str, str]:
    if isinstance(value, dict):
        return {str(k): _substitute(str(v)) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        pairs = [str(item).split("=", 1) for item in value]
        return {p[0]: _substitute(p[1]) for p in pairs if len(p) == 2}
    raise ComposeError([(field, "a mapping or a list of NAME=value")])


def _argv(value: Any, field: str) -> list[str]:
    if isinstance(value, str):
        return ["sh", "-c", value]
    if isinstance(value, list):
        return [str(v) for v in value]
    raise ComposeError([(field, "a string or a list")])


def seconds(text: Any, field: str) -> float:
    """A compose duration (``2s``, ``1m30s``, ``500ms``) in seconds."""
    if isinstance(text, int | float):
        return float(text)
    parts = _DURATION.findall(str(text))
    if not parts or "".join(n + u for n, u in parts) != str(text).strip():
        raise ComposeError([(field, f"not a duration: {text!r}")])
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    return sum(float(n) * scale[u] for n, u in parts)


def _healthcheck(value: Any, field: str) -> dict[str, Any]:
    test = value.get("test") if isinstance(value, dict) else None
    if isinstance(test, list) and test and test[0] in ("CMD", "CMD-SHELL"):
        command = test[1] if test[0] == "CMD-SHELL" else " ".join(_quote(a) for a in test[1:])
    elif isinstance(test, str):
        command = test
    else:
        raise ComposeError([(f"{field}.test", "[CMD, ...], [CMD-SHELL, ...] or a string")])
    out: dict[str, Any] = {"command": command}
    for key, name in (("interval", "interval_s"), ("timeout", "timeout_s"),
                      ("start_period", "start_period_s")):  # fmt: skip
        if key in value:
            out[name] = seconds(value[key], f"{field}.{key}")
    if "retries" in value:
        out["retries"] = int(value["retries"])
    return out


def _quote(arg: str) -> str:
    return arg if re.fullmatch(r"[\w@%+=:,./-]+", arg) else "'" + arg.replace("'", "'\\''") + "'"


def _service(name: str, spec: dict[str, Any], folder: Path) -> dict[str, Any]:
    field = f"services.{name}"
    unknown = sorted(set(spec) - SERVICE_KEYS)
    if unknown:
        raise ComposeError([(f"{field}.{unknown[0]}", "not supported by OpenForge")])
    out: dict[str, Any] = {"name": name}
    build = spec.get("build")
    if isinstance(build, str):
        build = {"context": build}
    if isinstance(build, dict):
        out["context"] = str((folder / str(build.get("context", "."))).resolve())
        out["dockerfile"] = str(build.get("dockerfile", "Dockerfile"))
    elif "image" in spec:
        out["image"] = str(spec["image"])
    else:
        raise ComposeError([(field, "needs an image or a build")])
    if "environment" in spec:
        out["env"] = _env(spec["environment"], f"{field}.environment")
    for key in ("command", "entrypoint"):
        if spec.get(key) is not None:
            out[key] = _argv(spec[key], f"{field}.{key}")
    if "healthcheck" in spec:
        out["healthcheck"] = _healthcheck(spec["healthcheck"], f"{field}.healthcheck")
    return out


def read_compose(path: Path) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """``(main's environment, the other services as tasks.environment.ComposeService data)`` of a
    Harbor ``docker-compose.yaml``; ComposeError naming the key that cannot run here."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ComposeError([("", f"cannot read: {e}")]) from None
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict):
        raise ComposeError([("services", "expected a mapping of services")])
    extra = sorted(k for k in data if k not in ("services", "version", "name"))
    if extra:
        raise ComposeError([(extra[0], "not supported by OpenForge")])
    main = services.get("main") or {}
    unknown = sorted(set(main) - MAIN_KEYS)
    if unknown:
        raise ComposeError([(f"services.main.{unknown[0]}", "not supported by OpenForge")])
    env = _env(main["environment"], "services.main.environment") if "environment" in main else {}
    others = [
        _service(str(name), spec or {}, path.parent)
        for name, spec in services.items()
        if name != "main"
    ]
    return env, others
