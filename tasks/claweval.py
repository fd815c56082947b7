"""ClawEval tasks in: ``tasks: claweval:PATH``, a checkout of the benchmark (its ``tasks/*/``,
``mock_services/`` and ``src/claw_eval``), or one task folder in it. The benchmark is never in
this repository: fetch it yourself (docs/guides/claw_benchmarks.md).

A task is a folder: ``task.yaml`` (``task_id``, ``prompt``, ``services``, ``tools``,
``tool_endpoints``, ``sandbox_files``, ``environment``, ``judge_rubric``, ...) and
``grader.py``. Each becomes a :class:`tasks.schema.Task`: the prompt is its instruction, each
mock service a service of its own the HarnessPod runs per attempt (:mod:`tasks.services.http`:
its tools offered natively, over MCP and as the ``forge-service`` command), its sandbox files
seeded in the workspace, and its verifier ``claweval`` (:mod:`rewards.claweval`: the task's
grader, its judge relayed to the run's judge; pass at 0.75).

Left out, each with its reason: tasks whose services search the live web (``web_real``: they
need ``$SERP_DEV_KEY`` and the internet, and run when the key is set), tasks that talk with a
simulated user (``user_agent``), tasks with media attachments or a visual judge (OpenForge's
judge reads text), and tasks graded from the sandbox's state by the benchmark's own sandbox
server (``env_snapshot_*``, ``sandbox_grader_files``).
"""

from __future__ import annotations

import base64
import os
import re
import shlex
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import yaml

from tasks.errors import TaskError, build_task, load_each
from tasks.schema import Task

PREFIX = "claweval:"
PASS_THRESHOLD = 0.75
SEARCH_KEY = "SERP_DEV_KEY"  # what ClawEval's live-web services read
# ClawEval's own sandbox tools: each harness brings its own shell and file tools instead
SANDBOX_TOOLS = {"Bash", "Read", "Write", "Edit", "Glob", "Grep"}


def is_claweval(name: str) -> bool:
    return name.startswith(PREFIX)


def checkout_of(path: Path) -> Path:
    """The checkout a task folder belongs to (the folder holding ``src/claw_eval``)."""
    for folder in (path, *path.parents):
        if (folder / "src" / "claw_eval").is_dir():
            return folder
    raise TaskError([(str(path), "", "not in a ClawEval checkout (no src/claw_eval above it)")])


def task_dirs(root: Path) -> list[Path]:
    if (root / "task.yaml").is_file():
        return [root]
    found = sorted(p.parent for p in (root / "tasks").glob("*/task.yaml"))
    if not found:
        raise TaskError([(str(root), "", "no ClawEval tasks (tasks/*/task.yaml) here")])
    return found


def _left_out(meta: dict[str, Any], grader: str) -> list[tuple[str, str]]:
    """Why the task cannot run here (field, reason); empty when it can."""
    out = []
    services = meta.get("services") or []
    live = [s.get("name") for s in services if "web_real" in str(s.get("command"))]
    if live and not os.environ.get(SEARCH_KEY):
        out.append(("services", f"{live[0]} searches the live web: needs ${SEARCH_KEY} and the "
                    "internet (set the key to run it)"))  # fmt: skip
    if (meta.get("user_agent") or {}).get("enabled"):
        out.append(("user_agent", "talks with a simulated user: not supported"))
    if (meta.get("prompt") or {}).get("attachments"):
        out.append(("prompt.attachments", "media attachments: not supported"))
    if "evaluate_visual" in grader:
        out.append(("grader.py", "asks a visual judge (images): not supported"))
    elif "judge.client" in grader:
        out.append(("grader.py", "calls its judge's OpenAI client itself, past the relay"))
    for field in ("env_snapshot_commands", "env_snapshot_files", "sandbox_grader_files"):
        if meta.get(field):
            out.append((field, "graded from the benchmark's sandbox server: not supported"))
            break
    return out


def _services(meta: dict[str, Any], root: Path) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``(apps, problems)``: each service with the tools whose endpoint is on its port."""
    services = meta.get("services") or []
    by_port = {int(s["port"]): s["name"] for s in services if "port" in s and "name" in s}
    endpoints = {e.get("tool_name"): e for e in meta.get("tool_endpoints") or []}
    tools: dict[str, list[dict[str, Any]]] = {name: [] for name in by_port.values()}
    problems = []
    for i, tool in enumerate(meta.get("tools") or []):
        name = str(tool.get("name", ""))
        end = endpoints.get(name)
        if end is None and name in SANDBOX_TOOLS:
            continue
        if end is None:
            problems.append((f"tools[{i}]", f"{name}: no tool_endpoints entry"))
            continue
        url = urlsplit(str(end.get("url", "")))
        service = by_port.get(url.port or 0)
        if service is None:
            problems.append((f"tools[{i}]", f"{name}: {end.get('url')} is on no service's port"))
            continue
        tools[service].append({
            "name": name,
            "op": name.removeprefix(f"{service}_"),
            "description": str(tool.get("description", "")),
            "parameters": tool.get("input_schema") or {"type": "object", "properties": {}},
            "path": url.path or "/",
            "method": str(end.get("method", "POST")).upper(),
        })  # fmt: skip
    apps = {}
    for s in services:
        name = str(s.get("name", ""))
        health = urlsplit(str(s.get("health_check", "")))
        reset = urlsplit(str(s.get("reset_endpoint") or ""))
        if not tools.get(name):
            continue  # a service no tool calls: nothing the agent could reach
        apps[name] = {"http": {
            "command": shlex.split(str(s.get("command", ""))),
            "cwd": str(root),
            "env": {str(k): str(v) for k, v in (s.get("env") or {}).items()},
            "description": f"The {name} service.",
            "health": health.path or "/",
            "health_method": str(s.get("health_check_method", "POST")).upper(),
            "audit": reset.path.removesuffix("/reset") + "/audit" if reset.path else None,
            "ready_timeout_s": float(s.get("ready_timeout") or 10) * 2,
            "pass_env": [SEARCH_KEY] if "web_real" in str(s.get("command")) else [],
            "tools": tools[name],
        }}  # fmt: skip
    return apps, problems


def _files(meta: dict[str, Any], folder: Path) -> tuple[dict[str, str], dict[str, str], list]:
    files: dict[str, str] = {}
    binary: dict[str, str] = {}
    problems = []
    for i, rel in enumerate(meta.get("sandbox_files") or []):
        path = PurePosixPath(str(rel))
        source = (folder / path).resolve()
        if path.is_absolute() or ".." in path.parts or not source.is_relative_to(folder.resolve()):
            problems.append((f"sandbox_files[{i}]", f"{rel}: a path inside the task folder"))
        elif not source.is_file():
            problems.append((f"sandbox_files[{i}]", f"{rel}: missing"))
        else:
            data = source.read_bytes()
            try:
                files[str(path)] = data.decode("utf-8")
            except UnicodeDecodeError:
                binary[str(path)] = base64.b64encode(data).decode()
    return files, binary, problems


def load_task(folder: Path, root: Path) -> Task:
    """One task folder as a Task; TaskError naming the file and field at fault."""
    spec = folder / "task.yaml"
    try:
        meta = yaml.safe_load(spec.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise TaskError([(str(spec), "", f"cannot read: {e}")]) from None
    if not isinstance(meta, dict):
        raise TaskError([(str(spec), "", "not a mapping")])
    grader = folder / "grader.py"
    if not grader.is_file():
        raise TaskError([(str(folder), "grader.py", "missing")])
    source = grader.read_text(encoding="utf-8")
    problems = _left_out(meta, source)
    prompt = str((meta.get("prompt") or {}).get("text") or "")
    if not prompt.strip():
        problems.append(("prompt.text", "missing"))
    apps, bad = _services(meta, root)
    files, binary, bad_files = _files(meta, folder)
    problems += bad + bad_files
    if problems:
        raise TaskError([(str(spec), f, m) for f, m in problems])
    env = meta.get("environment") or {}
    task_id = str(meta.get("task_id") or folder.name)
    data = {
        "id": re.sub(r"[^a-z0-9._-]+", "-", task_id.lower()).strip("-._") or "task",
        "instruction": prompt,
        "files": files,
        "binary_files": binary,
        "apps": apps,
        "limits": {
            "timeout_s": float(env.get("timeout_seconds") or 300),
            "max_turns": int(env.get("max_turns") or 20),
        },
        "pass_threshold": PASS_THRESHOLD,
        "verifier": {
            "type": "claweval",
            "root": str(root),
            "task_dir": str(folder.resolve()),
            "asks_judge": "judge." in source,
        },
        "tags": ["claweval", str(meta.get("category") or "")],
    }
    return build_task(data, str(spec))


def load(name: str, skipped: list[tuple[str, str, str]] | None = None) -> list[Task]:
    """The tasks of ``claweval:PATH``: every folder's problems raised together, or, given
    ``skipped``, added to it while the rest load (none loading still raises)."""
    path = Path(name.removeprefix(PREFIX)).expanduser().resolve()
    root = checkout_of(path)
    return load_each(task_dirs(path), lambda folder: load_task(folder, root), skipped)
