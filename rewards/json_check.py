"""JSON checks: a field of a JSON file, found by a dotted path, equals a given JSON value."""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from pydantic import Field

from forge.sandboxes.base import Sandbox
from rewards.base import Verdict
from rewards.common import VerifierModel, clip, read_text

_MISSING = object()


def path_parts(field: str) -> list[str]:
    """The parts of a dotted path; ``a[0].b`` is read as ``a.0.b``."""
    return re.sub(r"\[(-?\d+)\]", r".\1", field).lstrip(".").split(".")


def lookup(doc: Any, field: str) -> tuple[Any, str]:
    """Follow a dotted path (``a.b.0.c`` or ``a.b[0].c``: keys of objects, indices of lists)
    into ``doc``; ``length`` of a list (or of a string) is its length.

    Returns the value, or a sentinel and where the path stopped.
    """
    value = doc
    walked: list[str] = []
    for part in path_parts(field):
        where = ".".join(walked) or "<root>"
        if isinstance(value, dict):
            if part not in value:
                return _MISSING, f"no key {part!r} in {where}"
            value = value[part]
        elif isinstance(value, (list, str)) and part == "length":
            value = len(value)
        elif isinstance(value, list):
            try:
                index = int(part)
            except ValueError:
                return _MISSING, f"{where} is a list, {part!r} is not an index"
            if not -len(value) <= index < len(value):
                return _MISSING, f"index {index} out of range in {where} (length {len(value)})"
            value = value[index]
        else:
            return _MISSING, f"{where} is {type(value).__name__}, cannot take {part!r}"
        walked.append(part)
    return value, ""


def parse_json(text: str) -> tuple[Any, str]:
    """The JSON value of ``text``, or ``(None, why not)``: invalid JSON, or nesting deeper than
    the parser goes (``[`` * 100000 is the agent's wrong answer, not a crash)."""
    try:
        return json.loads(text), ""
    except json.JSONDecodeError as e:
        return None, f"is not valid JSON: {e}"
    except RecursionError:
        return None, "is JSON nested too deeply to read"


def _dump(value: Any) -> str:
    try:
        return json.dumps(value, default=str)
    except (RecursionError, ValueError):
        return f"<a {type(value).__name__} nested too deeply to show>"


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values that keeps booleans apart from numbers (``true != 1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


class JsonField(VerifierModel):
    """Reward 1 when the JSON file at ``path`` parses and its ``field`` equals ``equals``."""

    kind: ClassVar[str] = "json_field"
    path: str = Field(
        min_length=1,
        description="JSON file in the sandbox; relative paths are taken from the workspace.",
    )
    field: str = Field(
        min_length=1,
        description="Dotted path to the value: object keys and list indices, e.g. 'a.b.0.c'.",
    )
    equals: Any = Field(description="The expected JSON value (string, number, bool, null, ...).")

    def verify(self, sandbox: Sandbox, final_answer: str | None) -> Verdict:
        text, why = read_text(sandbox, self.path)
        if text is None:
            return Verdict(0.0, why)
        doc, why = parse_json(text)
        if why:
            return Verdict(0.0, f"{self.path} {why}")
        value, why = lookup(doc, self.field)
        if value is _MISSING:
            return Verdict(0.0, f"{self.path}: {why}")
        if json_equal(value, self.equals):
            return Verdict(1.0, f"{self.path}: {self.field} == {_dump(self.equals)}")
        return Verdict(
            0.0,
            f"{self.path}: {self.field} is {clip(_dump(value))}, "
            f"expected {clip(_dump(self.equals))}",
        )
