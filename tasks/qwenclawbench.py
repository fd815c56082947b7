"""QwenClawBench tasks in: ``tasks: qwenclawbench:PATH``, a checkout of the benchmark (its
``data/<version>/tasks/*.md`` and ``assets/``), one of its data folders, or one task file. The
benchmark's data is never in this repository: fetch it yourself (docs/guides/benchmarks.md).

A task is a Markdown file: YAML front matter (``id``, ``grading_type``, ``grading_weights``,
``timeout_seconds``, ``workspace_files``, ``external_dependency``, ...) and sections (``##
Prompt``, ``## Expected Behavior``, ``## Grading Criteria``, ``## Automated Checks`` with a
``grade(transcript, workspace_path)`` function, ``## LLM Judge Rubric``). Each becomes a
:class:`tasks.schema.Task`: the prompt is its instruction, the workspace files (from
``assets/<id>/``, or inline) its seeded files, and its verifier ``qwenclawbench``
(:mod:`rewards.qwenclawbench`: the automated part and the judge, combined as the benchmark
does). Tasks that need what no offline machine has (``external_dependency``: web, feishu, a
mock the benchmark does not ship) are left out, each with its reason.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from tasks.errors import TaskError, build_task, load_each
from tasks.schema import Task

PREFIX = "qwenclawbench:"
NEEDS = {"web": "the web", "feishu": "Feishu's API", "requires_mock": "a mock service not shipped"}
MAX_TURNS = 50  # the benchmark bounds an attempt by time alone
_HEADING = re.compile(r"^## +(.+?)\s*$", re.MULTILINE)
_PYTHON = re.compile(r"```python\s*\n(.*?)\n\s*```", re.DOTALL)  # a fence opening a line
_DROPPED = re.compile(r"^(source_query|source_line_number):.*$", re.MULTILINE)


def is_qwenclawbench(name: str) -> bool:
    return name.startswith(PREFIX)


def task_files(root: Path) -> list[Path]:
    """The task files under ``root`` (a checkout, a data folder, a tasks folder or one file)."""
    if root.is_file():
        return [root]
    for pattern in ("*.md", "tasks/*.md", "data/*/tasks/*.md"):
        found = sorted(p for p in root.glob(pattern) if p.name.lower() != "readme.md")
        if found:
            return found
    raise TaskError([(str(root), "", "no QwenClawBench tasks (tasks/*.md) here")])


def parse(text: str) -> tuple[dict[str, Any], dict[str, str]]:
    """``(front matter, sections by heading)`` of a task file; ValueError when malformed."""
    if not text.startswith("---"):
        raise ValueError("no YAML front matter (the file must start with ---)")
    front, body = _split(text)
    meta = yaml.safe_load(_DROPPED.sub("", front)) or {}
    if not isinstance(meta, dict):
        raise ValueError("the front matter is not a mapping")
    parts = _HEADING.split(body)
    sections = {parts[i].strip(): parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}
    return meta, sections


def _split(text: str) -> tuple[str, str]:
    """``(front matter, body)`` of a file that starts with ``---``."""
    end = text.find("\n---", 3)
    if end < 0:
        raise ValueError("the front matter is not closed (no second ---)")
    rest = text[end + 4 :]
    return text[3:end], rest.split("\n", 1)[1] if "\n" in rest else ""


def _workspace(
    meta: dict[str, Any], assets: Path
) -> tuple[dict[str, str], dict[str, str], list[tuple[str, str]]]:
    """``(text files, binary files as base64, problems)`` of ``workspace_files``."""
    files: dict[str, str] = {}
    binary: dict[str, str] = {}
    problems = []
    for i, item in enumerate(meta.get("workspace_files") or []):
        where = f"workspace_files[{i}]"
        if not isinstance(item, dict):
            problems.append((where, "a mapping with source and dest, or path and content"))
            continue
        dest = str(item.get("dest") or item.get("path") or "")
        if not dest or PurePosixPath(dest).is_absolute() or ".." in PurePosixPath(dest).parts:
            problems.append((where, f"destination {dest!r}: a relative path without '..'"))
            continue
        if "content" in item:
            files[dest] = str(item["content"])
            continue
        source = (assets / str(item.get("source", ""))).resolve()
        if not source.is_relative_to(assets.resolve()):
            problems.append(
                (where, f"source {item.get('source')!r} is outside assets/{assets.name}")
            )
            continue
        if not source.is_file():
            problems.append((where, f"asset {source} is missing"))
            continue
        data = source.read_bytes()
        try:
            files[dest] = data.decode("utf-8")
        except UnicodeDecodeError:
            binary[dest] = base64.b64encode(data).decode()
    return files, binary, problems


def load_task(path: Path) -> Task:
    """One task file as a Task; TaskError naming the file and field at fault."""
    try:
        meta, sections = parse(path.read_text(encoding="utf-8"))
    except (ValueError, yaml.YAMLError) as e:
        raise TaskError([(str(path), "", f"cannot read: {e}")]) from None
    problems = [(str(path), f, m) for f, m in _check(meta, sections)]
    needs = str(meta.get("external_dependency") or "none")
    if needs in NEEDS:
        problems.append(
            (str(path), "external_dependency", f"needs {NEEDS[needs]}: not run offline")
        )
    task_id = str(meta.get("id") or path.stem)
    files, binary, bad = _workspace(meta, path.parent.parent / "assets" / task_id)
    problems += [(str(path), f, m) for f, m in bad]
    if problems:
        raise TaskError(problems)
    weights = meta.get("grading_weights") or {}
    checks = _PYTHON.search(sections.get("Automated Checks", ""))
    rubric = sections.get("LLM Judge Rubric") or sections.get("Grading Criteria", "")
    data = {
        "id": re.sub(r"[^a-z0-9._-]+", "-", task_id.lower()).strip("-._") or "task",
        "instruction": sections["Prompt"],
        "files": files,
        "binary_files": binary,
        "limits": {"timeout_s": float(meta.get("timeout_seconds") or 120), "max_turns": MAX_TURNS},
        "verifier": {
            "type": "qwenclawbench",
            "grading_type": str(meta.get("grading_type") or "automated"),
            "grade": checks.group(1) if checks else None,
            # as the benchmark reads them: a misspelt key leaves that part's weight at 0.5
            "weights": {k: float(weights.get(k, 0.5)) for k in ("automated", "llm_judge")},
            "rubric": "\n\n".join(
                f"{title}:\n{text}"
                for title, text in (
                    ("Task", sections["Prompt"]),
                    ("Expected behavior", sections.get("Expected Behavior", "")),
                    ("Rubric", rubric),
                )
                if text
            ),
        },
        "tags": ["qwenclawbench", str(meta.get("category") or "")],
    }
    return build_task(data, str(path))


def _check(meta: dict[str, Any], sections: dict[str, str]) -> list[tuple[str, str]]:
    problems = []
    if not sections.get("Prompt"):
        problems.append(("## Prompt", "missing"))
    kind = str(meta.get("grading_type") or "automated")
    if kind not in ("automated", "hybrid", "llm_judge"):
        problems.append(("grading_type", f"{kind!r}: automated, hybrid or llm_judge"))
    if kind != "llm_judge" and not _PYTHON.search(sections.get("Automated Checks", "")):
        problems.append(("## Automated Checks", "no ```python block with grade()"))
    return problems


def load(name: str, skipped: list[tuple[str, str, str]] | None = None) -> list[Task]:
    """The tasks of ``qwenclawbench:PATH``: every file's problems raised together, or, given
    ``skipped``, added to it while the rest load (none loading still raises)."""
    root = Path(name.removeprefix(PREFIX)).expanduser()
    return load_each(task_files(root), load_task, skipped)
