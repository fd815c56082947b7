"""Loading tasks from files: one task per file, or a suite file with a ``tasks:`` list.

A suite is a built-in name (every ``*.yaml``/``*.yml``/``*.json`` file of ``tasks/data/<name>/``)
or a path to such a directory or to one file. Every problem is a :class:`TaskError` that names
the file and the field at fault::

    tasks/data/smoke/bad.yaml: tasks[2].verifier.type: unknown verifier 'fil_exists' (known: ...)
"""

from __future__ import annotations

import json
import re
from os import PathLike
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rewards.common import join_field
from tasks import claw_gen, claweval, harbor, mcpatlas, qwenclawbench
from tasks.errors import TaskError, validation_problems
from tasks.schema import Task

DATA_DIR = Path(__file__).resolve().parent / "data"
TASK_SUFFIXES = (".yaml", ".yml", ".json")


def _parse(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TaskError([(str(path), "", f"cannot read: {e}")]) from None
    try:
        if path.suffix == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise TaskError([(str(path), "", f"invalid {kind}: {e}")]) from None


def load_task_file(path: str | PathLike[str]) -> list[Task]:
    """Load the task, or the suite's tasks, of one YAML or JSON file."""
    path = Path(path)
    name = str(path)
    data = _parse(path)
    if isinstance(data, dict) and "tasks" in data:
        extra = sorted(str(k) for k in data if k != "tasks")
        if extra:
            raise TaskError([(name, extra[0], "unknown key (a suite file has only 'tasks')")])
        items = data["tasks"]
        if not isinstance(items, list) or not items:
            raise TaskError([(name, "tasks", "expected a non-empty list of tasks")])
        entries = [(f"tasks[{i}]", item) for i, item in enumerate(items)]
    elif isinstance(data, dict):
        entries = [("", data)]
    else:
        got = "an empty file" if data is None else type(data).__name__
        raise TaskError(
            [(name, "", f"expected a task mapping or a mapping with 'tasks:', got {got}")]
        )

    tasks: list[Task] = []
    problems: list[tuple[str, str, str]] = []
    seen: dict[str, str] = {}
    for where, item in entries:
        if not isinstance(item, dict):
            problems.append((name, where, f"expected a task mapping, got {type(item).__name__}"))
            continue
        try:
            task = Task.model_validate(item)
        except ValidationError as e:
            problems.extend((name, f, m) for f, m in validation_problems(e, where))
            continue
        if task.id in seen:
            problems.append(
                (name, join_field(where, "id"), f"duplicate id {task.id!r} (also {seen[task.id]})")
            )
            continue
        seen[task.id] = where
        task._source = name
        tasks.append(task)
    if problems:
        raise TaskError(problems)
    return tasks


def list_suites() -> list[str]:
    """Names of the built-in suites (directories of ``tasks/data``)."""
    if not DATA_DIR.is_dir():
        return []
    return sorted(p.name for p in DATA_DIR.iterdir() if p.is_dir() and not p.name.startswith("."))


def resolve_suite(name_or_path: str | PathLike[str]) -> list[Path]:
    """The task files a suite name or path stands for, in load order."""
    text = str(name_or_path)
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", text) and (DATA_DIR / text).is_dir():
        target = DATA_DIR / text
    else:
        target = Path(name_or_path)
        if not target.exists():
            known = ", ".join(list_suites()) or "none"
            raise TaskError(
                [(text, "", f"no such suite: not a path, nor a built-in suite ({known})")]
            )
    if target.is_file():
        return [target]
    files = sorted(p for p in target.iterdir() if p.is_file() and p.suffix in TASK_SUFFIXES)
    if not files:
        raise TaskError([(str(target), "", "no task files (*.yaml, *.yml, *.json) in directory")])
    return files


def load_suite(
    name_or_path: str | PathLike[str], skipped: list[tuple[str, str, str]] | None = None
) -> list[Task]:
    """Load every task of a suite; ids must be unique across all its files. A generated suite's
    name (``claw-gen/train``: :mod:`tasks.claw_gen`) builds its tasks instead, and
    ``harbor:PATH`` reads Harbor-format task folders (:mod:`tasks.harbor`; given ``skipped``,
    a folder that cannot load is added to it and the rest load), ``qwenclawbench:PATH`` a
    QwenClawBench checkout (:mod:`tasks.qwenclawbench`, the same way) and ``claweval:PATH`` a
    ClawEval checkout (:mod:`tasks.claweval`, the same way) and ``mcpatlas:PATH`` MCP-Atlas's
    credential-free subset (:mod:`tasks.mcpatlas`, the same way)."""
    text = str(name_or_path)
    if harbor.is_harbor(text):
        return harbor.load(text, skipped)
    if qwenclawbench.is_qwenclawbench(text):
        return qwenclawbench.load(text, skipped)
    if claweval.is_claweval(text):
        return claweval.load(text, skipped)
    if mcpatlas.is_mcpatlas(text):
        return mcpatlas.load(text, skipped)
    if claw_gen.is_generated(text) and not Path(text).exists():
        try:
            return claw_gen.load(text)
        except ValueError as e:
            raise TaskError([(text, "", str(e).removeprefix(text + ": "))]) from None
    tasks: list[Task] = []
    problems: list[tuple[str, str, str]] = []
    owner: dict[str, str] = {}
    for path in resolve_suite(name_or_path):
        try:
            loaded = load_task_file(path)
        except TaskError as e:
            problems.extend(e.problems)
            continue
        for task in loaded:
            where = str(path)
            if task.id in owner and owner[task.id] != where:
                problems.append(
                    (where, "id", f"duplicate id {task.id!r} (also in {owner[task.id]})")
                )
                continue
            owner[task.id] = where
            tasks.append(task)
    if problems:
        raise TaskError(problems)
    return tasks
