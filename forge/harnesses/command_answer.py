"""Where a ``harness: command`` agent's final answer is: its ``answer`` option.

One source and at most one reading::

    {last_line: true}                      the last non-empty line of stdout (the default)
    {json_field: F}                        field F of the last JSON-object line of stdout with it
    {json_path: P, where: {K: V, ...}}     the value at P of the last JSON record that has it
                                           and whose fields K equal V (``where`` is optional)
    {file: PATH}                           the whole text of a file the agent wrote, stripped
    {file: PATH, json_path: P, where: ...} a reading applied to that file instead of stdout
                                           (likewise json_field or last_line)

JSON records: when the whole text is one JSON document (pretty-printed or not) the records are
that document, or its elements when it is an array (a list of events); otherwise every line
that is a JSON object is a record, and a line that is a JSON array gives its elements (lines that
are not JSON, such as logs, are skipped). The last matching record wins.

Paths: dotted keys; a list is indexed by an integer step, from 0 or from the end with a negative
one: ``content.0.text``, ``content.-1.text``, or with brackets ``content[0].text``,
``content[-1].text``. ``where`` keys are paths too (usually top-level fields). A value of JSON
null counts as absent. A string is the answer as it is; any other value is its JSON text.

``file``: a sandbox path, relative to the workspace or under ``{workspace}`` or ``{home}``
(placeholders allowed). A missing file is no answer.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any

from forge.sandboxes.bwrap import HOME, WORKSPACE

KEYS = ("last_line", "json_field", "json_path", "where", "file")
_STEP = re.compile(r"\[(-?\d+)\]|([^.\[\]]+)")
_MISSING = object()


def parse_path(path: str) -> tuple[str | int, ...]:
    """``a.b[0].-1`` -> ``("a", "b", 0, "-1")``: bracket steps are list indices; a dotted step
    is a key, or a list index when it is an integer and the node is a list. ValueError when
    ``path`` is not of that form."""
    steps: list[str | int] = []
    pos, expect_step = 0, True
    while pos < len(path):
        if not expect_step and path[pos] == ".":
            pos, expect_step = pos + 1, True
            continue
        m = _STEP.match(path, pos)
        if m is None or (m.group(2) is not None and not expect_step):
            raise ValueError(path)
        steps.append(int(m.group(1)) if m.group(1) is not None else m.group(2))
        pos, expect_step = m.end(), False
    if not steps or expect_step:
        raise ValueError(path)
    return tuple(steps)


def lookup(node: Any, steps: tuple[str | int, ...]) -> Any:
    """The value at ``steps`` in ``node``, or ``_MISSING``."""
    for step in steps:
        if isinstance(node, dict) and isinstance(step, str) and step in node:
            node = node[step]
        elif isinstance(node, list) and re.fullmatch(r"-?\d+", str(step)):
            i = int(step)
            if not -len(node) <= i < len(node):
                return _MISSING
            node = node[i]
        else:
            return _MISSING
    return _MISSING if node is None else node


def sandbox_path_problem(path: str) -> str | None:
    """Why ``path`` (a template) is not a path under the workspace or home, or None."""
    if not isinstance(path, str) or not path.strip():
        return "a non-empty path"
    concrete = re.sub(
        r"\{(\w+)\}", lambda m: {"home": HOME, "workspace": WORKSPACE}.get(m.group(1), "x"), path
    )
    full = posixpath.normpath(posixpath.join(WORKSPACE, concrete))
    if any(full.startswith(root + "/") for root in (WORKSPACE, HOME)):
        return None
    return f"{path!r} is not under {{workspace}} or {{home}} (relative: from the workspace)"


class AnswerSpec:
    """A parsed ``answer`` option; raises ValueError naming ``answer`` and the bad key."""

    def __init__(self, option: dict[str, Any] | None) -> None:
        option = {"last_line": True} if option is None else option
        if not isinstance(option, dict):
            raise ValueError(f"answer: a mapping, e.g. {{json_field: NAME}}, not {option!r}")
        unknown = sorted(set(option) - set(KEYS))
        if unknown:
            raise ValueError(f"answer: unknown key {unknown[0]!r}; known: {', '.join(KEYS)}")
        readings = [k for k in ("last_line", "json_field", "json_path") if k in option]
        if len(readings) > 1:
            raise ValueError(f"answer: give one of {', '.join(readings)}, not several")
        self.file: str | None = option.get("file")
        if "file" in option and (problem := sandbox_path_problem(option["file"])):
            raise ValueError(f"answer: file: {problem}")
        if not readings and self.file is None:
            raise ValueError("answer: give json_field, json_path, last_line or file")
        self.reading = readings[0] if readings else "text"
        if option.get("last_line", True) is not True:
            raise ValueError("answer: last_line: only true")
        self.field = option.get("json_field")
        if "json_field" in option and (not isinstance(self.field, str) or not self.field):
            raise ValueError("answer: json_field: a field name")
        self.path: tuple[str | int, ...] = ()
        if "json_path" in option:
            try:
                self.path = parse_path(option["json_path"])
            except (TypeError, ValueError):
                raise ValueError(
                    f"answer: json_path: {option['json_path']!r} is not a path like "
                    "content.0.text or content[-1].text"
                ) from None
        where = option.get("where", {})
        if "where" in option and self.reading != "json_path":
            raise ValueError("answer: where: goes with json_path")
        if not isinstance(where, dict) or not all(isinstance(k, str) for k in where):
            raise ValueError("answer: where: a mapping of field -> value")
        try:
            self.where = [(parse_path(k), v) for k, v in where.items()]
        except ValueError as e:
            raise ValueError(f"answer: where: {e} is not a field path") from None

    def read(self, text: str | None) -> str | None:
        """The answer in ``text`` (stdout, or the file's content; None: no file)."""
        if text is None:
            return None
        if self.reading == "text":
            return text.strip() or None
        if self.reading == "last_line":
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            return lines[-1] if lines else None
        if self.reading == "json_field":
            records = [r for r in json_lines(text) if isinstance(r, dict)]
            hits = (r[self.field] for r in reversed(records) if r.get(self.field) is not None)
            value = next(hits, _MISSING)
        else:
            value = _MISSING
            for record in reversed(json_records(text)):
                value = lookup(record, self.path)
                if value is not _MISSING and all(lookup(record, k) == v for k, v in self.where):
                    break
                value = _MISSING
        if value is _MISSING or value is None:
            return None
        return value if isinstance(value, str) else json.dumps(value)


def json_lines(text: str) -> list[Any]:
    """The records of JSON lines: each object line, and the elements of each array line."""
    records: list[Any] = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith(("{", "[")):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        records.extend(value if isinstance(value, list) else [value])
    return records


def json_records(text: str) -> list[Any]:
    """The records of ``text``: one whole JSON document (an array gives its elements) or, when
    it is not one, its JSON lines."""
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        try:
            value = json.loads(stripped)
        except ValueError:
            pass
        else:
            return value if isinstance(value, list) else [value]
    return json_lines(text)
