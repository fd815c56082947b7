"""The error every task loader raises (:mod:`tasks.loader`, :mod:`tasks.harbor`): each problem
names the file and the field at fault."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from rewards.common import SpecError, join_field
from tasks.schema import Task


class TaskError(ValueError):
    """A task file that cannot be loaded. ``problems`` holds ``(file, field, message)``."""

    def __init__(self, problems: list[tuple[str, str, str]]) -> None:
        self.problems = problems
        lines = [": ".join(p for p in (file, field, msg) if p) for file, field, msg in problems]
        super().__init__("\n".join(lines))


def _loc_part(part: int | str) -> str:
    if isinstance(part, int):
        return f"[{part}]"
    return part if part.isidentifier() else f"[{part!r}]"


def validation_problems(err: ValidationError, prefix: str) -> list[tuple[str, str]]:
    """Turn pydantic's errors into ``(field, message)`` pairs under ``prefix``."""
    out: list[tuple[str, str]] = []
    for e in err.errors():
        field = prefix
        for part in e["loc"]:
            field = join_field(field, _loc_part(part))
        cause = (e.get("ctx") or {}).get("error")
        if isinstance(cause, SpecError):
            out.extend((join_field(field, f), m) for f, m in cause.errors)
            continue
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
        elif e["type"] == "missing":
            msg = "required field is missing"
        else:
            msg = e["msg"].removeprefix("Value error, ")
        out.append((field, msg))
    return out


def build_task(data: dict[str, Any], source: str) -> Task:
    """``data`` as a Task whose ``_source`` is ``source`` (a reader's file or folder); TaskError
    naming ``source`` and each field at fault."""
    try:
        task = Task.model_validate(data)
    except ValidationError as e:
        raise TaskError([(source, f, m) for f, m in validation_problems(e, "")]) from None
    task._source = source
    return task


def load_each(
    sources: list[Any], load_one: Any, skipped: list[tuple[str, str, str]] | None
) -> list[Task]:
    """``load_one(source)`` for each source of a benchmark's checkout: every source's problems
    raised together (TaskError), or, given ``skipped``, added to it while the rest load (none
    loading still raises). Duplicate ids are problems too."""
    tasks: list[Task] = []
    problems: list[tuple[str, str, str]] = []
    for source in sources:
        try:
            tasks.append(load_one(source))
        except TaskError as e:
            problems.extend(e.problems)
    ids = [t.id for t in tasks]
    problems += [(t.id, "id", "duplicate id") for t in tasks if ids.count(t.id) > 1]
    if problems and (skipped is None or not tasks):
        raise TaskError(problems)
    if skipped is not None:
        skipped.extend(problems)
    return tasks
